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

Both write Avro in the example's output schema with enrichd's output keys. The clock runs
from the first input record the application sees to its final checkpoint commit; the
application stops once it has seen every input record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.quix import QuixResult, probe

_REPO = Path(__file__).resolve().parent.parent
_SCHEMAS = _REPO / "schemas"


def run_quix_join(
    python: str,
    servers: str,
    kind: str,
    topics: dict[str, str],
    output: str,
    options: dict[str, Any],
    input_records: int,
    timeout_s: float = 1800.0,
) -> QuixResult:
    """Run the ``kind`` ("asof" or "window") application in a child; never raises for Quix.

    ``QuixResult.views`` is the number of outputs the application handed to its producer.
    """
    version, reason = probe(python)
    if reason:
        return QuixResult(input_records, reason=reason)
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-quix-") as state_dir:
        config = {
            "servers": servers,
            "kind": kind,
            "left": topics["left"],
            "right": topics["right"],
            "output": output,
            "options": options,
            "input_records": input_records,
            "state_dir": state_dir,
            "group": f"bench-quix-{kind}-{os.getpid()}-{int(time.time())}",
            "timeout_s": timeout_s,
        }
        try:
            done = subprocess.run(  # noqa: S603 - our own interpreter choice, no shell
                [python, "-m", "bench.quixjoins", json.dumps(config)],
                cwd=_REPO,
                capture_output=True,
                text=True,
                timeout=timeout_s + 120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return QuixResult(input_records, version, f"no answer in {timeout_s + 120:.0f} s")
    answers = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not answers:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
        return QuixResult(input_records, version, f"exit code {done.returncode}: {tail}")
    answer = json.loads(answers[-1])
    if answer.get("error"):
        return QuixResult(input_records, version, answer["error"])
    return QuixResult(
        input_records,
        version,
        startup_s=answer["first"] - answer["started"],
        seconds=answer["committed"] - answer["first"],
        stop_s=answer["returned"] - answer["committed"],
        views=answer["views"],
    )


def _schema(name: str) -> Any:
    return json.loads((_SCHEMAS / f"{name}.avsc").read_text(encoding="utf-8"))


def _child(config: dict[str, Any]) -> dict[str, Any]:
    """Build and run the application; the clock readings it took, on ``time.monotonic``."""
    from quixstreams import Application
    from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer

    app = Application(
        broker_address=config["servers"],
        consumer_group=config["group"],
        auto_offset_reset="earliest",
        state_dir=config["state_dir"],
        loglevel="WARNING",
    )
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
            value_deserializer=AvroDeserializer(_schema(name)),
            timestamp_extractor=event_time,
        )
        for side, name in (("left", names[0]), ("right", names[1]))
    )
    output = app.topic(
        config["output"], key_serializer="str", value_serializer=AvroSerializer(_schema(names[2]))
    )
    clock: dict[str, Any] = {"first": 0.0, "consumed": 0, "views": 0, "committed": 0.0}
    total = config["input_records"]

    def seen(_value: Any) -> None:
        if not clock["first"]:
            clock["first"] = time.monotonic()
        clock["consumed"] += 1
        if clock["consumed"] == total:
            app.stop()  # after this record's outputs; run() then commits, flushing them

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

    # The final commit is the moment the last output is delivered: time it from the outside.
    context = app._processing_context  # noqa: SLF001 - only to read the clock at the commit
    commit = context.commit_checkpoint

    def timed_commit(force: bool = False, revoking: bool = False) -> None:
        commit(force=force, revoking=revoking)
        if force and clock["consumed"] >= total and not clock["committed"]:
            clock["committed"] = time.monotonic()

    context.commit_checkpoint = timed_commit  # type: ignore[method-assign]
    import threading

    timer = threading.Timer(config["timeout_s"], app.stop)
    timer.daemon = True
    timer.start()
    started = time.monotonic()
    app.run()
    returned = time.monotonic()
    timer.cancel()
    result = {
        "started": started,
        "first": clock["first"],
        "committed": clock["committed"],
        "returned": returned,
        "views": clock["views"],
        "consumed": clock["consumed"],
    }
    if clock["consumed"] < total or not clock["committed"]:
        result["error"] = (
            f"stopped after {config['timeout_s']:.0f} s with {clock['consumed']:,} of "
            f"{total:,} input records seen"
        )
    return result


def main(argv: list[str]) -> int:
    """Child entry point: run with the JSON config in ``argv[0]``, print a JSON answer."""
    try:
        answer = _child(json.loads(argv[0]))
    except Exception as exc:  # noqa: BLE001 - the parent reports any failure as such
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
