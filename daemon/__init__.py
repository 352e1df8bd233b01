"""enrichd: a plugin-based Kafka-to-Kafka enrichment daemon on PySpark Structured Streaming."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("enrichd")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"
