"""What a running connector tells its operator (docs/ARCHITECTURE.md, "The tree is the architecture"): log lines with
their context, text or JSON (logs.py), and the metrics with `/metrics` and `/health` (metrics.py)."""
