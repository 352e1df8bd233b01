"""The source's packs: records grouped by state bucket into one row each, read back whole."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.model.wire import INPUT, SOURCE, pack, unpack


def records(keys: list[str]) -> pa.RecordBatch:
    n = len(keys)
    return pa.RecordBatch.from_pydict(
        {
            "input": [0] * n,
            "key": keys,
            "event_time": list(range(n)),
            "partition": [3] * n,
            "offset": list(range(100, 100 + n)),
            "timestamp": [7] * n,
            "kafka_key": [None if i % 2 else f"k{i}".encode() for i in range(n)],
            "value": [f"v{i}".encode() for i in range(n)],
            "error": [None if i % 3 else "MissingKey: no" for i in range(n)],
            "headers": [None if i % 4 else b"packed" for i in range(n)],
        },
        schema=INPUT.arrow,
    )


@settings(deadline=None)  # a first example once took 283 ms in a longer run
@given(buckets=st.lists(st.sampled_from([5, 17, 99, 12]), max_size=60))
def test_a_pack_holds_one_buckets_records_in_their_order(buckets: list[int]) -> None:
    batch = records([f"key-{i}" for i in range(len(buckets))])
    packed = pack(batch, buckets)
    assert packed.schema == SOURCE.arrow
    labels = packed.column("bucket").to_pylist()
    assert sorted(labels) == sorted(set(buckets))  # one row per bucket
    expected = batch.to_pylist()
    for label, blob in zip(labels, packed.column("records").to_pylist(), strict=True):
        assert unpack(blob).to_pylist() == [
            record for record, bucket in zip(expected, buckets, strict=True) if bucket == label
        ]
