"""Avro through fastavro, and the compiled reader and writer beside it."""
