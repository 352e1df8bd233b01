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

The child runs under ``--quix-python`` like :mod:`bench.quix` (only the standard library at
the top of this module), timed the same way: from the first input record to the final
checkpoint commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.quix import QuixResult, probe

_REPO = Path(__file__).resolve().parent.parent
_SCHEMAS = _REPO / "schemas"


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
) -> tuple[QuixResult, int]:
    """Run the Quix application in a child process; (its result, clicks given ``default``).

    Never raises for a Quix failure: a missing install, an error inside Quix or a run that
    does not deliver ``expected`` enriched clicks in time comes back with ``reason`` set.
    """
    version, reason = probe(python)
    if reason:
        return QuixResult(input_records, reason=reason), 0
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-quix-") as state_dir:
        config = {
            "servers": servers,
            "table": table_topic,
            "clicks": clicks_topic,
            "output": output,
            "default": default,
            "expected": expected,
            "state_dir": state_dir,
            "group": f"bench-quix-lookup-{os.getpid()}-{int(time.time())}",
            "timeout_s": timeout_s,
        }
        try:
            done = subprocess.run(  # noqa: S603 - our own interpreter choice, no shell
                [python, "-m", "bench.quix_lookup", json.dumps(config)],
                cwd=_REPO,
                capture_output=True,
                text=True,
                timeout=timeout_s + 120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return QuixResult(input_records, version, f"no answer in {timeout_s + 120:.0f} s"), 0
    answers = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not answers:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
        return QuixResult(input_records, version, f"exit code {done.returncode}: {tail}"), 0
    answer = json.loads(answers[-1])
    if answer.get("error"):
        return QuixResult(input_records, version, answer["error"]), 0
    result = QuixResult(
        input_records,
        version,
        startup_s=answer["first"] - answer["started"],
        seconds=answer["committed"] - answer["first"],
        stop_s=answer["returned"] - answer["committed"],
        views=answer["views"],
    )
    return result, answer["defaulted"]


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
    table = app.topic(
        config["table"],
        key_deserializer="str",
        value_deserializer=AvroDeserializer(_schema("user_region")),
    )
    clicks = app.topic(
        config["clicks"],
        key_deserializer="str",
        value_deserializer=AvroDeserializer(_schema("click")),
    )
    output = app.topic(
        config["output"],
        key_serializer="str",
        value_serializer=AvroSerializer(_schema("enriched_click")),
    )
    clock: dict[str, Any] = {"first": 0.0, "consumed": 0, "views": 0, "committed": 0.0}
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
        if clock["views"] == expected:
            app.stop()  # run() then commits its checkpoint, which flushes the producer

    table_sdf = app.dataframe(table).update(seen)
    click_sdf = app.dataframe(clicks).update(seen)
    by_user = click_sdf.group_by(
        lambda click: str(click["user"]), name="user", key_serializer="str", key_deserializer="str"
    )
    enriched = table_sdf.concat(by_user).apply(lookup, stateful=True, expand=True)
    enriched = enriched.to_topic(output, key=lambda row: row["click"]["id"])
    enriched = enriched.update(delivered)

    # The final commit is the moment the last output is delivered: time it from the outside.
    context = app._processing_context  # noqa: SLF001 - only to read the clock at the commit
    commit = context.commit_checkpoint

    def timed_commit(force: bool = False, revoking: bool = False) -> None:
        commit(force=force, revoking=revoking)
        if force and clock["views"] >= expected and not clock["committed"]:
            clock["committed"] = time.monotonic()

    context.commit_checkpoint = timed_commit  # type: ignore[method-assign]
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
        "defaulted": clock["defaulted"],
    }
    if clock["views"] < expected or not clock["committed"]:
        result["error"] = (
            f"stopped after {config['timeout_s']:.0f} s with {clock['views']:,} of "
            f"{expected:,} outputs ({clock['consumed']:,} input records seen)"
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
