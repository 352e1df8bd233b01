"""`daemon verify` on the session's broker: a tampered output reported as lost, duplicated and
unexpected; and SIGTERM to verify itself. A pass through a kill -9, with its report as tables
and JSON, runs on a SASL_SSL cluster (tests/connecting/test_connecting_verify.py): one such
run proves both (a run with a kill starts Spark twice).

The SIGTERM test and the continuous-mode pass run the real command, whose child `daemon
run` starts a Spark of its own (the pass in continuous mode three times: its kills, progress and
zombie differ from a micro-batch run's, so the SASL_SSL run does not cover them).
The tampered output needs no Spark: the test writes what the pipeline would have
written, transactionally as enrichd does, changes it, and reads it back through verify's own
reading and check, raw record batches included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka.admin import create_topics, existing_topics
from daemon.signals import StopRequest
from daemon.verify.answer import Identity
from daemon.verify.child import descendants
from daemon.verify.facts import BrokerFacts
from daemon.verify.readback import RawLogs
from daemon.verify.report import as_json, show
from daemon.verify.run import (
    VerifiedPipeline,
    VerifyOptions,
    VerifyReport,
    plan_pipeline,
    read_back,
)
from daemon.verify.workload import POISON
from tests.kafka_helpers import read_topic

Headers = list[tuple[str, str | bytes | None]]


def verify_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "daemon", "verify", *args]


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, **extra}


def topics_under(conf: dict[str, str], prefix: str) -> list[str]:
    return sorted(name for name in existing_topics(conf) if name.startswith(prefix + "."))


# -- the check against a tampered output ------------------------------------------------------


def write_answer(
    conf: dict[str, str], pipe: VerifiedPipeline, leave_out: Identity, twice: Identity
) -> None:
    """Write the pipeline's answer as enrichd would, one transaction; ``leave_out`` missing,
    ``twice`` written again in a second transaction."""
    spec = pipe.config
    assert spec.output.schema_file is not None
    codec = AvroCodec(load_schema_file(spec.output.schema_file))
    producer = Producer({**conf, "transactional.id": f"test-{uuid.uuid4().hex}"})
    producer.init_transactions(30)

    def write(identity: Identity, extra: Headers | None = None) -> None:
        key, value, item = identity
        value = json.loads(value)
        producer.produce(
            spec.output.topic,
            key=None if key is None else key.encode(),
            value=None if value is None else codec.encode(value),
            headers=source_headers(pipe, item) + (extra or []),
        )

    producer.begin_transaction()
    for identity, count in pipe.answer.outputs.items():
        for _ in range(count - (identity == leave_out)):
            write(identity)
    for (kind, item), count in pipe.answer.dead_letters.items():
        for _ in range(count):
            headers: Headers = [("enrichd.error.class", kind.encode())]
            headers += source_headers(pipe, item)
            producer.produce(spec.dead_letters, value=POISON, headers=headers)
    producer.commit_transaction(30)
    producer.begin_transaction()
    write(twice)
    producer.commit_transaction(30)
    producer.begin_transaction()  # a copy that a read_committed reader must never be given
    write(twice, [("test.copy", b"aborted")])
    producer.flush(30)
    producer.abort_transaction(30)


def source_headers(pipe: VerifiedPipeline, item: int | None) -> Headers:
    """The ``enrichd.source.*`` headers naming a workload item (produced at its index)."""
    if item is None:
        return []
    topic = pipe.config.inputs[pipe.work.items[item].role].topic
    pipe.items[(topic, 0, item)] = item
    return [
        ("enrichd.source.topic", topic.encode()),
        ("enrichd.source.partition", b"0"),
        ("enrichd.source.offset", str(item).encode()),
    ]


def test_a_lost_a_duplicated_and_an_unexpected_record_fail_the_check_with_exit_code_3(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    options = VerifyOptions(joiners=("comap",), records=40, seed=7)  # with dead letters
    base = f"verify-{uuid.uuid4().hex[:8]}.r1"
    pipe = plan_pipeline("comap", base, tmp_path, options)
    create_topics(conf, {pipe.config.output.topic: 1, pipe.config.dead_letters: 1})
    joined = [name for name in pipe.answer.outputs if name[2] is not None and name[1] != "null"]
    leave_out, twice = joined[0], joined[1]
    write_answer(conf, pipe, leave_out, twice)
    poison = Producer(conf)  # bytes no schema decodes, outside any transaction
    poison.produce(pipe.config.output.topic, key=b"?", value=POISON)
    poison.flush(30)

    report = VerifyReport("r1", base, BrokerFacts(broker.bootstrap_servers), options)
    raw = RawLogs(conf)
    try:
        read_back(conf, raw, [pipe], report, StopRequest())
    finally:
        raw.close()

    assert (report.ok, report.exit_code) == (False, 3)
    assert report.raw_batches.startswith("read")
    (check,) = report.checks
    total = check.totals()
    assert (total.lost, total.duplicated, total.unexpected) == (1, 1, 1)
    verdicts = {row.scenario: row.verdict for row in check.rows if not row.ok}
    scenario_of = {pipe.work.items[name[2]].scenario for name in (leave_out, twice)}
    for scenario in scenario_of:
        lost = int(pipe.work.items[leave_out[2]].scenario == scenario)
        duplicated = int(pipe.work.items[twice[2]].scenario == scenario)
        wrong = [f"lost {lost}"] * bool(lost) + [f"duplicated {duplicated}"] * bool(duplicated)
        assert verdicts.pop(scenario) == ", ".join(wrong)
    assert verdicts == {"end of input": "unexpected 1"}  # the poison, which no item made
    assert all(row.ok for row in check.dead_letters)
    # The aborted copy counts as the broker's fault where the reader was given it, never as
    # enrichd's duplicate.
    given = [
        out
        for out in read_topic(conf, pipe.config.output.topic)
        if out.headers.get("test.copy") == b"aborted"
    ]
    assert check.broker_leaked == ({pipe.config.output.topic: len(given)} if given else {})

    as_document = as_json(report)
    assert (as_document["verdict"], as_document["exit_code"]) == ("fail", 3)
    console = Console(record=True, width=300)
    show(report, console)
    shown = console.export_text()
    assert "FAIL: see the rows not marked ok above" in shown and "lost 1" in shown


# -- SIGTERM to verify itself ----------------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def session_members(session: int) -> list[int]:
    """The live processes of a session (the child ``daemon run`` starts one of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if entry.name.isdigit() and int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def child_run(pid: int) -> int | None:
    """The pid of verify's child ``daemon run``, once it has one."""
    for child in descendants(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command[1:4] == [b"-m", b"daemon", b"run"]:
            return child
    return None


def test_sigterm_stops_the_child_run_and_deletes_verifys_topics(broker: EmbeddedBroker) -> None:
    prefix = f"verify-{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen(  # noqa: S603 - our own command
        verify_command(
            "--bootstrap", broker.bootstrap_servers, "--joiner", "comap", "--records", "20"
        )
        + ["--kills", "1", "--prefix", prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    try:
        child = None
        while child is None and process.poll() is None:
            child = child_run(process.pid)
            time.sleep(0.02)
        assert child is not None, process.communicate(timeout=60)
        assert topics_under(conf, prefix)  # made before the child starts
        below = descendants(child) | {child}
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, stdout + stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("error: daemon verify was stopped (SIGTERM or SIGINT) before ")
    assert line.endswith("deleted; nothing was checked") and f"under {prefix}." in line
    assert "PASS" not in stdout and "FAIL" not in stdout
    assert [pid for pid in below if alive(pid)] == [] and session_members(child) == []
    assert topics_under(conf, prefix) == []


# -- continuous mode ---------------------------------------------------------------------------


def test_a_continuous_pipeline_passes_through_a_kill_and_a_zombie(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """The real command in continuous mode: long batches of seconds, killed once right after a
    sub-batch's marker landed and restarted, then stopped with SIGSTOP inside a long batch,
    replaced and woken, its output checked exactly (three Spark starts). A lookup: its running
    totals are a second continuous query, read on from the first's output, checked too."""
    prefix = f"verify-{uuid.uuid4().hex[:8]}"
    report_file = tmp_path / "report.json"
    done = subprocess.run(  # noqa: S603 - our own command
        verify_command("--bootstrap", broker.bootstrap_servers, "--joiner", "lookup")
        # 28 records of seed 12 hold every scenario, poison and an unroutable tombstone too.
        + ["--records", "28", "--seed", "12", "--kills", "1", "--mode", "continuous"]
        + ["--prefix", prefix, "--json", str(report_file), "--timeout", "400"],
        capture_output=True,
        text=True,
        timeout=600,
        env=environment(),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "PASS: exactly once through 1 kill -9(s)" in done.stdout
    assert "mode: continuous, long batches of 4 s" in done.stdout
    report = json.loads(report_file.read_text())
    assert (report["verdict"], report["options"]["mode"]) == ("pass", "continuous")
    lookup = report["joiners"]["lookup"]
    rows = lookup["scenarios"] + lookup["dead_letters"]
    assert all(row["expected"] == row["observed"] and row["verdict"] == "ok" for row in rows)
    counted = {row["scenario"]: row["expected"] for row in lookup["scenarios"]}
    assert counted["running totals"] == counted["click enriched"] > 0, counted
    # The kill landed once a sub-batch's marker was on the markers topic, and the restarted
    # run read on.
    (kill,) = report["restarts"]
    assert kill["after"] == "a sub-batch committed" and kill["recovered_s"] is not None
    assert (report["starts"], report["stop_exit_code"]) == (3, 0)
    # Whether the long batch the kill cut short had committed sub-batches to replay is
    # timing's (the marker may be the first sub-batch's, its commit not yet in): the report
    # says which.
    if report["replays_found"]:
        assert "found their batch committed by its marker" in done.stdout
    else:
        assert "replays: NO replayed task found its batch committed" in done.stdout
    # The zombie: stopped once a sub-batch of a long batch committed, replaced by a run that
    # committed that long batch, woken and ended. Whether the long batch was still running
    # when the stop landed (almost always: it lasts 4 s, the stop follows the sub-batch's
    # commit within a poll) and what the woken run did are timing's, as in micro-batch mode
    # (tests/connecting/test_connecting_verify.py): the report says which. The output above
    # is exact, so it wrote nothing twice.
    zombie = report["zombie"]
    assert zombie["new_batch"] >= zombie["paused_batch"], zombie
    where = "while its tasks ran" if zombie["in_flight"] else "after it was committed"
    assert where in done.stdout
    assert zombie["ended"].startswith(("was killed by verify", "exited by itself")), zombie
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    assert topics_under(conf, prefix) == []
