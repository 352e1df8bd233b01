"""The service behind ``daemon run``: supervision, metrics, health, logs."""
