"""The child's pipeline file: the user's connection as written, verify's pipelines."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from daemon.model.config import load_pipeline_file
from daemon.verify.child_file import connection_tables, toml_value, write_child_file


def test_connection_settings_are_copied_unexpanded_with_paths_made_absolute(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    source = folder / "pipeline.toml"
    source.write_text(
        """
[kafka]
bootstrap_servers = "${BROKERS}"
[kafka.client_conf]
"security.protocol" = "SASL_SSL"
"sasl.password" = "${file:secrets/pw}"
"ssl.ca.location" = "ca.pem"
"ssl.key.location" = "/etc/key.pem"

[schema_registry]
url = "https://registry:8081"
"basic.auth.user.info" = "${SR_USER}:${SR_PASSWORD}"

[[pipeline]]
name = "ignored"
""",
        encoding="utf-8",
    )
    tables = connection_tables(source)
    assert tables == {
        "kafka": {
            "bootstrap_servers": "${BROKERS}",
            "client_conf": {
                "security.protocol": "SASL_SSL",
                "sasl.password": "${file:" + str(folder / "secrets" / "pw") + "}",
                "ssl.ca.location": str(folder / "ca.pem"),
                "ssl.key.location": "/etc/key.pem",
            },
        },
        "schema_registry": {
            "url": "https://registry:8081",
            "basic.auth.user.info": "${SR_USER}:${SR_PASSWORD}",
        },
    }


def test_the_child_file_loads_and_only_its_owner_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENRICHD_TEST_PASSWORD", "pw")
    path = tmp_path / "child.toml"
    pipeline = {
        "name": "p-comap",
        "joiner": "comap",
        "checkpoint": str(tmp_path / "cp"),
        "inputs": {
            "one": {"topic": "p.one", "schema": "/s/user.avsc", "key": "id"},
            "many": {"topic": "p.many", "schema": "/s/tweet.avsc", "key": "author_id"},
        },
        "output": {"topic": "p.out", "schema": "/s/tweet_view.avsc"},
        "options": {"many_id": "id", "nested": {"a": [1, 2.5, True]}},
    }
    connection = {
        "kafka": {
            "bootstrap_servers": "127.0.0.1:9092",
            "client_conf": {"sasl.password": "${ENRICHD_TEST_PASSWORD}", "linger.ms": 5},
        }
    }
    write_child_file(path, connection, {"master": "local[2]"}, [pipeline])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert '"${ENRICHD_TEST_PASSWORD}"' in path.read_text()  # the reference, not the secret
    file = load_pipeline_file(path)
    assert file.kafka.client_conf == {"sasl.password": "pw", "linger.ms": 5}
    assert file.pipeline[0].options == {"many_id": "id", "nested": {"a": [1, 2.5, True]}}
    assert file.pipeline[0].inputs["many"].topic == "p.many"


def test_toml_values_escape_what_json_escapes() -> None:
    assert toml_value('a "quoted" \\ line\n') == '"a \\"quoted\\" \\\\ line\\n"'
    assert toml_value({}) == "{}"
    with pytest.raises(TypeError):
        toml_value(object())
