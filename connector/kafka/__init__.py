"""Kafka beyond the control topic: the clients' settings, watermarks and lag, the dead-letter producer, records read
back by their coordinates (the local broker for demos and tests is connector/local/kafka.py)."""
