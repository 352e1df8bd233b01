"""`daemon verify PIPELINE.toml` on a SASL_SSL cluster: the file's TLS and SCRAM settings
reach every client it makes, its child `daemon run`'s and its raw batch reader's too.

The cluster is the suite's two gates in a row, as most company clusters are set up
(docs/connecting.md, SASL_SSL with SCRAM-SHA-512): the TLS terminator (tests/tls_proxy.py)
in front of the SCRAM gate (tests/scram_proxy.py) in front of a Tansu that advertises the
terminator's port. A client without TLS fails the handshake, one without the SASL login is
cut off by the gate, so the run could not pass unless every client used the file's settings.
It is also the suite's `daemon verify` through a kill -9 and its report (tables and JSON),
with input produced while the run goes on, the count of replays that found their batch
committed, and the cluster-settings warnings:
one `comap` run killed once and restarted, so that the restarted child's clients are shown to
log in too, and no second verify run with a kill (a Spark start of its own, twice) is needed
on the session's broker (tests/commands/test_verify.py tests the rest of verify there).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.kafka.admin import existing_topics
from tests.connecting.test_connecting import write_pipeline
from tests.ports import free_port
from tests.scram_proxy import ScramGate
from tests.secure_cluster import Pki, start_tansu, start_tls_proxy, stop_process


@pytest.fixture
def sasl_ssl_gate(pki: Pki, tmp_path: Path) -> Iterator[tuple[str, ScramGate]]:
    """The bootstrap address of TLS, then SCRAM, then Tansu; and the SCRAM gate."""
    tls_port, gate_port, tansu_port = free_port(), free_port(), free_port()
    tansu = start_tansu(tansu_port, tls_port)
    gate = ScramGate(gate_port, tansu_port, "enrichd", secrets.token_urlsafe(12))
    log = tmp_path / "tls-proxy.log"
    proxy = start_tls_proxy(tls_port, gate_port, pki, mutual=False, log=log)
    try:
        yield f"127.0.0.1:{tls_port}", gate
    finally:
        stop_process(proxy)
        gate.close()
        stop_process(tansu)


def test_verify_passes_over_sasl_ssl_with_scram(
    sasl_ssl_gate: tuple[str, ScramGate], pki: Pki, tmp_path: Path
) -> None:
    servers, gate = sasl_ssl_gate
    kafka = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": gate.user,
        "sasl.password": "${ENRICHD_TEST_SCRAM_PASSWORD}",
        "ssl.ca.location": str(pki.ca),
    }
    path = write_pipeline(tmp_path, servers, kafka=kafka)
    prefix = f"verify-{uuid.uuid4().hex[:8]}"
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "verify", str(path), "--joiner", "comap"]
        # 28 records of seed 12 hold every scenario, poison and an unroutable tombstone too.
        + ["--records", "28", "--seed", "12", "--kills", "1"]
        + ["--prefix", prefix, "--json", str(report_file)],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "ENRICHD_TEST_SCRAM_PASSWORD": gate.password,
        },
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # The report as tables...
    assert "PASS: exactly once through 1 kill -9(s): nothing lost, nothing duplicated" in (
        done.stdout
    )
    assert "tweet joins its user" in done.stdout and "restarts" in done.stdout
    # ... and as JSON.
    report = json.loads(report_file.read_text())
    assert (report["verdict"], report["exit_code"], report["prefix"]) == ("pass", 0, prefix)
    comap = report["joiners"]["comap"]
    assert comap["ok"] and comap["examples"] == []
    rows = comap["scenarios"] + comap["dead_letters"]
    assert all(row["expected"] == row["observed"] and row["verdict"] == "ok" for row in rows)
    assert sum(row["expected"] for row in comap["scenarios"]) > 0
    letters = {row["scenario"] for row in comap["dead_letters"]}
    assert letters == {"UndecodableRecord", "UnroutableTombstone"}
    # The kill's restart, then the zombie scenario's new run.
    assert len(report["restarts"]) == 1 and report["starts"] == 3
    assert report["stop_exit_code"] == 0
    assert report["rates"]["input_records"] > 28  # the workload and an end marker per key
    # Part of the input came while the run went on, and the answer was exact all the same.
    assert 0 < report["rates"]["input_at_start"] < report["rates"]["input_records"] // 2 + 1
    # The kill landed once a task of the batch had committed, so the restarted run replays
    # that batch and its tasks find their markers, unless the batch's other task and Spark's
    # commit got in before the kill did (timing's, as the zombie's stop below): the report
    # says which. (The replay path itself: tests/delivery/test_crash_recovery.py.)
    assert report["restarts"][0]["after"] == "a task committed"
    if report["replays_found"]:
        assert "found their batch committed by its marker" in done.stdout
    else:
        assert "replays: NO replayed task found its batch committed" in done.stdout
    # The settings exactly-once rests on, as this Tansu reports them for verify's own topics
    # (the file's are not made): one replica, and empty DescribeConfigs answers, said as not
    # reported. Warnings, which do not fail the run.
    warned = report["settings_warnings"]
    topics = f"topics {prefix}.{report['run']}.comap.out, {prefix}.{report['run']}.comap.dlq"
    assert [line.split(":")[0] for line in warned] == [
        topics,
        f"min.insync.replicas is not reported for {topics}",
        f"unclean.leader.election.enable is not reported for {topics}",
        "transaction.max.timeout.ms is not reported by the brokers",
        "offsets.retention.minutes is not reported by the brokers",
    ], warned
    assert all(f"WARNING settings: {line}" in done.stdout for line in warned)
    # The zombie: stopped in a micro-batch, replaced by a run that committed that batch,
    # woken up, and ended. The output above is exact, so nothing it did once woken was
    # written twice. What it was seen doing is timing's: in three runs here its logs showed
    # 8 fenced-transaction lines once, its tasks finding the batch committed once, and
    # nothing within the watch once; the report says which. So is whether the stop landed
    # while the batch's tasks ran: on a loaded CI machine the batch's last task committed
    # before the SIGSTOP did, and the report says "after it was committed".
    zombie = report["zombie"]
    assert zombie["new_batch"] >= zombie["paused_batch"], zombie
    where = "while its tasks ran" if zombie["in_flight"] else "after it was committed"
    assert where in done.stdout
    assert zombie["ended"].startswith(("was killed by verify", "exited by itself")), zombie
    assert "zombie: daemon run stopped (SIGSTOP)" in done.stdout
    assert report["broker"]["bootstrap"] == servers
    # The raw batches and the API versions were read through TLS and SCRAM too.
    assert report["raw_batches"].startswith("read")
    assert report["broker"]["api_versions"]["Fetch"]
    # Every connection, the restarted child's too, logged in; none was cut off for trying
    # without.
    assert gate.authenticated > 0 and gate.refused == 0
    assert gate.password not in done.stdout + done.stderr
    conf = {key: value for key, value in kafka.items() if key != "sasl.password"}
    conf |= {"bootstrap.servers": servers, "sasl.password": gate.password}
    # Its topics are gone (no --keep).
    assert [name for name in existing_topics(conf) if name.startswith(prefix + ".")] == []
