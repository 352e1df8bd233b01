"""`daemon verify PIPELINE.toml` on secured brokers: the file's TLS or SASL settings reach
every client it makes, its child `daemon run`'s and its raw batch reader's too.

Each broker accepts only clients that do what the file says (tests/secure_cluster.py,
tests/scram_proxy.py): a client made without the settings could not read or write, and the
run could not pass. One small `comap` run each, without kills (the kills are tested on the
session's broker, tests/commands/test_verify.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from daemon.kafka.admin import existing_topics
from tests.connecting.test_connecting import scram, write_pipeline
from tests.scram_proxy import ScramGate
from tests.secure_cluster import TlsBroker


def verify(path: Path, report: Path, prefix: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``daemon verify PATH`` with one small joiner and no kills."""
    return subprocess.run(
        [sys.executable, "-m", "daemon", "verify", str(path), "--joiner", "comap"]
        + ["--records", "20", "--kills", "0", "--prefix", prefix, "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **env},
    )


def passed(done: subprocess.CompletedProcess[str], report: Path) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    found = json.loads(report.read_text())
    assert (found["verdict"], found["joiners"]["comap"]["ok"]) == ("pass", True)
    # The raw batches were read through the same TLS or SASL settings.
    assert str(found["raw_batches"]).startswith("read")
    return found


def test_verify_passes_over_mutual_tls(mtls_broker: TlsBroker, tmp_path: Path) -> None:
    kafka = mtls_broker.client_conf()
    del kafka["bootstrap.servers"]
    kafka["ssl.key.password"] = "${ENRICHD_TEST_KEY_PASSWORD}"  # noqa: S105 - from the env
    path = write_pipeline(tmp_path, mtls_broker.bootstrap_servers, kafka=kafka)
    prefix = f"verify-{uuid.uuid4().hex[:8]}"
    password = mtls_broker.pki.key_password
    done = verify(path, tmp_path / "report.json", prefix, ENRICHD_TEST_KEY_PASSWORD=password)
    report = passed(done, tmp_path / "report.json")
    assert report["broker"]["bootstrap"] == mtls_broker.bootstrap_servers
    assert password not in done.stdout + done.stderr
    conf = mtls_broker.client_conf()
    assert [name for name in existing_topics(conf) if name.startswith(prefix + ".")] == []


def test_verify_passes_through_the_scram_gate(scram_broker: ScramGate, tmp_path: Path) -> None:
    kafka = scram(scram_broker.user, "${ENRICHD_TEST_SCRAM_PASSWORD}")
    path = write_pipeline(tmp_path, scram_broker.bootstrap_servers, kafka=kafka)
    prefix = f"verify-{uuid.uuid4().hex[:8]}"
    refused, authenticated = scram_broker.refused, scram_broker.authenticated
    done = verify(
        path, tmp_path / "report.json", prefix, ENRICHD_TEST_SCRAM_PASSWORD=scram_broker.password
    )
    passed(done, tmp_path / "report.json")
    assert scram_broker.refused == refused and scram_broker.authenticated > authenticated
    assert scram_broker.password not in done.stdout + done.stderr
    conf = {"bootstrap.servers": scram_broker.bootstrap_servers}
    conf |= scram(scram_broker.user, scram_broker.password)
    assert [name for name in existing_topics(conf) if name.startswith(prefix + ".")] == []
