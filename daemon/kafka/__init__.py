"""Kafka I/O for Spark: a streaming source and an exactly-once sink as Python data sources."""
