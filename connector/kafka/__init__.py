"""Kafka beyond the control topic: the local broker for demos and tests, watermarks and lag, the dead-letter producer."""
