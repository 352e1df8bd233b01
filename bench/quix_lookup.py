"""The lookup peer: Quix Streams enriching clicks with user regions from a changelog topic.

Quix Streams 3.x has ``StreamingDataFrame.join_lookup(lookup, fields, on=...)``, but its
lookups query something outside Kafka: ``SQLiteLookup`` and ``PostgresLookup`` run a query
per record against a database, and the Quix Configuration Service lookup reads that
service's configuration events (whose content it fetches over HTTP). None of them keeps a
table of the latest value per key of an arbitrary Kafka topic, which is this benchmark's
join (a KTable or GlobalKTable join in Kafka Streams). So the peer is written as Quix users
write such a join:

- user regions: a topic keyed by user, with an ``AvroDeserializer``;
- clicks: keyed by click id as produced, so ``group_by(user)`` re-keys them through a
  ``repartition__`` topic Quix creates (JSON values, the user as a string key);
- the two dataframes are ``concat``-ed and one ``apply(stateful=True, expand=True)`` keeps
  each user's latest region in Quix's RocksDB state and emits a click with the region
  current when it is applied (``default`` when none), as enrichd's ``lookup`` in left mode;
- enriched clicks go out through an ``AvroSerializer``, keyed by click id.

Quix reads the table topic and the repartitioned clicks side by side, not in timestamp
order, so a click can overtake its user's region; the child counts the clicks it enriched
with the default, which the report compares with the clicks whose user has no region.

The children run under ``--quix-python`` like :mod:`bench.quix` (only the standard library at
the top of this module), as many as the caller asks in one consumer group, timed the same
way: from the first input record any of them sees to the last one's final checkpoint commit.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench.quix import (
    QuixResult,
    Tally,
    application,
    child_main,
    launch,
    new_clock,
    run_timed,
    schema,
)


def run_quix_lookup(
    python: str,
    servers: str,
    table_topic: str,
    clicks_topic: str,
    output: str,
    default: dict[str, Any],
    expected: int,
    input_records: int,
    timeout_s: float = 900.0,
    processes: int = 1,
) -> tuple[QuixResult, int]:
    """Run the Quix application in ``processes`` children, one consumer group; (its result,
    clicks given ``default`` by all of them).

    Never raises for a Quix failure: a missing install, an error inside Quix or a run that
    does not deliver ``expected`` enriched clicks in time comes back with ``reason`` set.
    """
    config = {
        "servers": servers,
        "table": table_topic,
        "clicks": clicks_topic,
        "output": output,
        "default": default,
        "expected": expected,
    }
    result, answer = launch(
        python,
        "bench.quix_lookup",
        config,
        "bench-quix-lookup",
        input_records,
        timeout_s,
        processes,
    )
    return result, answer["defaulted"] if result.ran else 0


def _child(config: dict[str, Any]) -> dict[str, Any]:
    """Build and run the application; the clock readings it took, on ``time.monotonic``."""
    from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer

    app = application(config)
    table = app.topic(
        config["table"],
        key_deserializer="str",
        value_deserializer=AvroDeserializer(schema("user_region")),
    )
    clicks = app.topic(
        config["clicks"],
        key_deserializer="str",
        value_deserializer=AvroDeserializer(schema("click")),
    )
    output = app.topic(
        config["output"],
        key_serializer="str",
        value_serializer=AvroSerializer(schema("enriched_click")),
    )
    clock = new_clock()
    clock["defaulted"] = 0
    expected, default = config["expected"], config["default"]

    def seen(_value: Any) -> None:
        if not clock["first"]:
            clock["first"] = time.monotonic()
        clock["consumed"] += 1

    def lookup(value: dict[str, Any], state: Any) -> list[dict[str, Any]]:
        """One record under its user's key: a region is stored, a click is enriched."""
        if "clicks" not in value:
            state.set("region", value)
            return []
        region = state.get("region")
        if region is None:
            clock["defaulted"] += 1
            region = default
        return [{"click": value, "region": region}]

    def delivered(_value: Any) -> None:
        clock["views"] += 1

    table_sdf = app.dataframe(table).update(seen)
    click_sdf = app.dataframe(clicks).update(seen)
    by_user = click_sdf.group_by(
        lambda click: str(click["user"]), name="user", key_serializer="str", key_deserializer="str"
    )
    enriched = table_sdf.concat(by_user).apply(lookup, stateful=True, expand=True)
    enriched = enriched.to_topic(output, key=lambda row: row["click"]["id"])
    enriched = enriched.update(delivered)

    tally = Tally(config, clock, "views", expected)
    result = run_timed(app, clock, tally, config["timeout_s"])
    result["defaulted"] = clock["defaulted"]
    if not tally.done or not clock["committed"]:
        result["error"] = (
            f"stopped after {config['timeout_s']:.0f} s with {tally.total():,} of "
            f"{expected:,} outputs ({clock['consumed']:,} input records seen by this process)"
        )
    return result


if __name__ == "__main__":
    sys.exit(child_main(_child, sys.argv[1:]))
