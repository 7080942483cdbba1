"""Servers lakesink starts on 127.0.0.1 for demos and tests: the local schema registry (registry.py, with the Go
program it builds from registry_server/)."""
