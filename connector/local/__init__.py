"""Servers lakesink starts on 127.0.0.1 for demos and tests (docs/ARCHITECTURE.md, "The tree is the architecture"):
the broker (kafka.py), the S3 server (s3.py), the schema registry (registry.py, with the Go program it builds from
registry_server/), a Spark cluster (spark_cluster.py), PostgreSQL (postgres.py) and Kafka Connect (connect.py), on the
one base of server.py and the ports of ports.py. The runtime never imports them (pyproject.toml's contracts)."""
