"""The row shapes that flow between the Kafka source, the joiner operator and the Kafka sink."""

from __future__ import annotations

import pyarrow as pa

SOURCE_DDL = (
    "role string, key string, event_time long, topic string, partition int, "
    "offset long, timestamp long, kafka_key binary, value binary, error string"
)
"""One input record: ``key`` groups it (the join key, or :data:`DEAD_LETTER_ROUTE` when ``error``
says why the record cannot be joined); ``value`` keeps the original bytes."""

SOURCE_ARROW = pa.schema(
    [
        ("role", pa.string()),
        ("key", pa.string()),
        ("event_time", pa.int64()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("kafka_key", pa.binary()),
        ("value", pa.binary()),
        ("error", pa.string()),
    ]
)

SINK_DDL = "topic string, key binary, value binary, headers array<struct<key:string,value:binary>>"
"""One output record: its topic (output or dead letters), key, value (null: tombstone), headers."""

DEAD_LETTER_ROUTE = "\x00dead-letter"
"""The group key of records that failed before joining; no real join key is a lone NUL."""
