"""Storage the tables live on: where a table lives and its file operations (store.py), a store's start-up checks
(checks.py)."""
