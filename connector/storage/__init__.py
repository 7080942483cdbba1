"""Storage the tables live on: the local S3-compatible server for demos and tests (local_s3.py)."""
