"""State buckets: stable labels that Spark's shuffle deals out evenly to the stateful tasks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from daemon.checkpoint import STATE_BUCKETS
from daemon.kafka.records import _BUCKET_LABELS, bucket_of


def test_every_bucket_has_its_own_label() -> None:
    assert len(set(_BUCKET_LABELS)) == STATE_BUCKETS


def test_a_key_keeps_its_bucket_across_processes_and_releases() -> None:
    # A checkpoint's state is found by these labels: changing them loses every key's state.
    # These are what the current layout (STATE_LAYOUT, 32 buckets) writes; a change here
    # needs a new checkpoint layout.
    assert [bucket_of(key) for key in ("1", "user-42", "")] == [75, 3, 12]


@pytest.mark.parametrize("partitions", [1, 2, 4, 8, 16])
def test_sparks_shuffle_gives_each_partition_as_many_buckets(spark: Any, partitions: int) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    frame = spark.createDataFrame([(label,) for label in _BUCKET_LABELS], "bucket int")
    placed = frame.select(F.pmod(F.hash("bucket"), F.lit(partitions)).alias("p")).collect()
    assert Counter(row.p for row in placed) == dict.fromkeys(
        range(partitions), STATE_BUCKETS // partitions
    )
