"""The application shell: the command line, service wiring, demo, status and verify; the only code that imports both roles."""
