"""Connection settings: every Kafka client from one place, and ``[schema_registry]``'s shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from daemon.errors import ConfigError
from daemon.formats.registry import client_settings
from daemon.kafka.connect import client_conf
from daemon.model.config import ConfigProblems, parse_pipeline_file

DAEMON = Path(__file__).resolve().parents[3] / "daemon"
SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def test_every_kafka_client_is_made_in_connect_py() -> None:
    """So that each one gets [kafka] client_conf: a client made elsewhere could miss it."""
    made_elsewhere = [
        f"{path.relative_to(DAEMON)}:{number}"
        for path in DAEMON.rglob("*.py")
        if path.name != "connect.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\b(Consumer|Producer|AdminClient)\(", line)
    ]
    assert made_elsewhere == []


def pipeline_file(tmp_path: Path, kafka: dict[str, Any], registry: dict[str, Any] | None) -> Any:
    data = {
        "kafka": {"bootstrap_servers": "b:9093", "client_conf": kafka},
        **({"schema_registry": registry} if registry is not None else {}),
        "pipeline": [
            {
                "name": "p",
                "joiner": "comap",
                "checkpoint": "state",
                "inputs": {
                    "one": {"topic": "u", "schema": str(SCHEMAS / "user.avsc"), "key": "id"},
                    "many": {"topic": "t", "schema": str(SCHEMAS / "tweet.avsc"), "key": "a"},
                },
                "output": {"topic": "v", "schema": str(SCHEMAS / "tweet_view.avsc")},
            }
        ],
    }
    return parse_pipeline_file(tmp_path / "p.toml", data)


def test_client_settings_reach_the_clients_as_text_with_relative_files_from_the_folder(
    tmp_path: Path,
) -> None:
    file = pipeline_file(
        tmp_path,
        {
            "security.protocol": "SSL",
            "ssl.ca.location": "certs/ca.pem",
            "enable.ssl.certificate.verification": True,
            "socket.timeout.ms": 30000,
        },
        {"url": "https://sr", "ssl.ca.location": "/etc/ca.pem", "timeout": 10},
    )
    assert client_conf(file) == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SSL",
        "ssl.ca.location": str(tmp_path.resolve() / "certs/ca.pem"),
        "enable.ssl.certificate.verification": "true",
        "socket.timeout.ms": "30000",
    }
    assert client_settings(file.schema_registry, file.kafka) == {
        "url": "https://sr",
        "ssl.ca.location": "/etc/ca.pem",
        "timeout": 10,
    }


def test_unknown_registry_settings_are_rejected_with_the_valid_ones_listed(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigProblems) as error:
        pipeline_file(tmp_path, {}, {"url": "https://sr", "basic.auth.userinfo": "a:b"})
    (problem,) = error.value.problems
    assert problem.startswith(
        f"{tmp_path / 'p.toml'}: schema_registry: unknown setting 'basic.auth.userinfo'; the "
        "registry client's settings: url, basic.auth.user.info, basic.auth.credentials.source,"
    )


def test_sasl_inherit_takes_the_kafka_credentials_for_the_registry(tmp_path: Path) -> None:
    registry = {"url": "https://sr", "basic.auth.credentials.source": "SASL_INHERIT"}
    file = pipeline_file(tmp_path, {"sasl.username": "ada", "sasl.password": "pw"}, registry)
    assert client_settings(file.schema_registry, file.kafka) == {
        "url": "https://sr",
        "basic.auth.user.info": "ada:pw",
    }
    alone = pipeline_file(tmp_path, {}, registry)
    with pytest.raises(ConfigError, match="needs sasl.username and sasl.password"):
        client_settings(alone.schema_registry, alone.kafka)


def test_every_block_of_the_connecting_page_is_a_valid_pipeline_file_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tomllib

    page = (DAEMON.parent / "docs" / "connecting.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) >= 8
    for name in re.findall(r"\$\{([A-Z_]+)\}", page):
        monkeypatch.setenv(name, f"value-of-{name.lower()}")
    for secret in set(re.findall(r"\$\{file:(/[^}]+)\}", page)):  # the page's secret files
        page = page.replace(f"${{file:{secret}}}", f"${{file:{tmp_path / secret.lstrip('/')}}}")
        (tmp_path / secret.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / secret.lstrip("/")).write_text(f"value-of-{Path(secret).name}\n")
    blocks = re.findall(r"```toml\n(.*?)```", page, flags=re.DOTALL)
    for block in blocks:
        data = tomllib.loads(block)
        kafka = data.get("kafka", {})
        file = pipeline_file(tmp_path, kafka.get("client_conf", {}), data.get("schema_registry"))
        if file.schema_registry is not None:
            settings = client_settings(file.schema_registry, file.kafka)
            assert settings["url"].startswith("https://")
        assert "${" not in str(client_conf(file))
