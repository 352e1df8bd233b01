"""The peer for the two-stream joins: Quix Streams' ``join_asof`` and ``join_interval``.

As :mod:`bench.quix` does for comap, the application runs in a child process
(``python -m bench.quixjoins CONFIG``) under the interpreter that has Quix Streams, so this
module imports only the standard library at its top.

The applications, written as a Quix Streams user would (Quix 3.x's join API):

- ``asof``: recommendations ``join_asof`` moods, ``how="left"`` (every recommendation is
  answered, with a null mood when none is known, as enrichd's revision 0 is), ``grace_ms`` =
  the pipeline's ``history_retention``, event time from each record's ``event_time`` field
  (a ``timestamp_extractor``). Quix looks up the latest mood at or before the
  recommendation's time in its store when the recommendation arrives, and emits that one
  answer: a mood arriving later changes nothing already emitted.
- ``window``: left ``join_interval`` right, ``how="inner"``, ``backward_ms`` and
  ``forward_ms`` = the window, ``grace_ms`` = window + grace, event time = the Kafka
  timestamp (the workload stamps records with their ``at`` field). Quix emits a pair when
  its later record arrives, looking back from it: a pair whose later-arriving record has
  the earlier event time is not found, so it matches enrichd only on in-order input (the
  benchmark's workload is in order per key).

Both write Avro in the example's output schema with enrichd's output keys. The application
runs in as many children as the caller asks, in one consumer group; the clock runs from the
first input record any of them sees to the last one's final checkpoint commit, and they stop
once together they have seen every input record.
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


def run_quix_join(
    python: str,
    servers: str,
    kind: str,
    topics: dict[str, str],
    output: str,
    options: dict[str, Any],
    input_records: int,
    timeout_s: float = 1800.0,
    processes: int = 1,
) -> QuixResult:
    """Run the ``kind`` ("asof" or "window") application in ``processes`` children, one
    consumer group; never raises for Quix.

    ``QuixResult.views`` is the number of outputs the application handed to its producer.
    """
    config = {
        "servers": servers,
        "kind": kind,
        "left": topics["left"],
        "right": topics["right"],
        "output": output,
        "options": options,
        "input_records": input_records,
    }
    group = f"bench-quix-{kind}"
    return launch(python, "bench.quixjoins", config, group, input_records, timeout_s, processes)[0]


def _child(config: dict[str, Any]) -> dict[str, Any]:
    """Build and run the application; the clock readings it took, on ``time.monotonic``."""
    from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer

    app = application(config)
    options = config["options"]
    asof = config["kind"] == "asof"
    names = (
        ("recommendation", "mood", "recommendation_view")
        if asof
        else (
            "left_event",
            "right_event",
            "joined_pair",
        )
    )

    def event_time(value: Any, _headers: Any, timestamp: int, _kind: Any) -> int:
        return int(value["event_time"]) if asof else timestamp

    left, right = (
        app.topic(
            config[side],
            key_deserializer="str",
            value_deserializer=AvroDeserializer(schema(name)),
            timestamp_extractor=event_time,
        )
        for side, name in (("left", names[0]), ("right", names[1]))
    )
    output = app.topic(
        config["output"], key_serializer="str", value_serializer=AvroSerializer(schema(names[2]))
    )
    clock = new_clock()
    total = config["input_records"]

    def seen(_value: Any) -> None:
        if not clock["first"]:
            clock["first"] = time.monotonic()
        clock["consumed"] += 1

    def delivered(_value: Any) -> None:
        clock["views"] += 1

    left_sdf = app.dataframe(left).update(seen)
    right_sdf = app.dataframe(right).update(seen)
    if asof:
        joined = left_sdf.join_asof(
            right_sdf,
            how="left",
            on_merge=lambda rec, mood: {"recommendation": rec, "mood": mood, "revision": 0},
            grace_ms=options["history_retention"],
        )
        joined = joined.to_topic(
            output,
            key=lambda view: (
                f"{view['recommendation']['consultant']}@{view['recommendation']['event_time']}"
            ),
        )
    else:
        joined = left_sdf.join_interval(
            right_sdf,
            how="inner",
            on_merge=lambda lval, rval: {"left": lval, "right": rval},
            grace_ms=options["window"] + options["grace"],
            backward_ms=options["window"],
            forward_ms=options["window"],
        )
        joined = joined.to_topic(output, key=lambda pair: str(pair["left"]["k"]))
    joined.update(delivered)

    # Every input record seen, by all the children together, is the end of the run.
    tally = Tally(config, clock, "consumed", total)
    result = run_timed(app, clock, tally, config["timeout_s"])
    if not tally.done or not clock["committed"]:
        result["error"] = (
            f"stopped after {config['timeout_s']:.0f} s with {tally.total():,} of "
            f"{total:,} input records seen"
        )
    return result


if __name__ == "__main__":
    sys.exit(child_main(_child, sys.argv[1:]))
