"""Secrets: which settings are secret, masking them in text and in both log formats, and
the one-line reasons of a failed connection."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from daemon import secrets
from daemon.errors import SchemaRegistryUnavailableError, failure_reason
from daemon.formats.registry import access_failure
from daemon.model.config import load_pipeline_file
from daemon.model.environment import SECRET_FILE_MAX_BYTES, expand_environment, expand_text
from daemon.secrets import CARRIED_MAX_CHARS, is_secret_key, redact, remember, remembered
from daemon.service.logs import JsonFormatter, TextFormatter


@pytest.fixture(autouse=True)
def _forget_what_each_test_remembers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets are remembered process-wide, and every pipeline this process starts later
    carries them to its workers: a test's secrets (one of 1 MiB) must not outlive it."""
    monkeypatch.setattr(secrets, "_secrets", set(secrets._secrets))


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "ssl.key.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "basic.auth.user.info",
        "bearer.auth.token",
        "bearer.auth.client.secret",
        "ssl.key.pem",
        # [spark.conf]: every setting whose name says secret, password, token, credential
        # or key, in Spark's camelCase too.
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key",
        "spark.authenticate.secret",
        "spark.ssl.keyPassword",
        "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net",
        "spark.hadoop.aws.credentials",
        "spark.kubernetes.authenticate.oauthToken",
        "apiKey",
    ],
)
def test_secret_settings_are_known_by_name(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "sasl.username",
        "security.protocol",
        "ssl.ca.location",
        "url",
        # Named for a key or secret, but holding a path, a size or a switch.
        "ssl.key.location",
        "spark.authenticate.secret.file",
        "spark.io.encryption.keySizeBits",
        "basic.auth.credentials.source",
        "sasl.oauthbearer.token.endpoint.url",
        "spark.security.credentials.hive.enabled",
    ],
)
def test_other_settings_are_not_secret(key: str) -> None:
    assert not is_secret_key(key)


def test_remembered_secrets_and_url_user_info_are_masked() -> None:
    remember({"sasl.password": "pw-planted-1", "basic.auth.user.info": "ada:pw-planted-2"})
    text = "pw-planted-1, ada:pw-planted-2, pw-planted-2 and https://bob:pw3@sr.example:8081/x"
    assert redact(text) == "***, ***, *** and https://***@sr.example:8081/x"


def test_both_log_formats_mask_secrets_in_message_and_traceback() -> None:
    remember({"sasl.password": "pw-planted-log"})
    try:
        raise RuntimeError("login with pw-planted-log failed")
    except RuntimeError:
        record = logging.LogRecord(
            "enrichd.service", logging.ERROR, __file__, 1, "tried %s", ("pw-planted-log",), None
        )
        record.exc_info = sys.exc_info()
    text = TextFormatter().format(record)
    line = json.loads(JsonFormatter().format(record))
    for shown in (text, line["message"], line["error"]):
        assert "pw-planted-log" not in shown
    assert "tried ***" in text and "login with *** failed" in line["error"]


def test_expansion_fills_defaults_escapes_and_reports_each_missing_variable() -> None:
    env = {"SET": "v", "EMPTY": ""}
    assert expand_text("${SET}-${EMPTY:-d}-${UNSET:-}-$${SET}", env) == ("v-d--${SET}", [])
    data = {"kafka": {"client_conf": {"sasl.password": "${NOPE}"}}, "pipeline": [{"name": "${X}"}]}
    expanded, problems = expand_environment(Path("p.toml"), data, env)
    assert expanded["kafka"]["client_conf"]["sasl.password"] == ""
    assert problems == [
        "p.toml: kafka.client_conf.sasl.password: environment variable NOPE is not set; set "
        "it, or give a default as ${NOPE:-default}",
        "p.toml: pipeline[0].name: environment variable X is not set; set it, or give a "
        "default as ${X:-default}",
    ]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            SchemaRegistryError(401, 401, "Unauthorized"),
            "schema registry https://***@sr.example refused the credentials (401); check "
            "basic.auth.user.info or bearer.auth.* in [schema_registry]",
        ),
        (
            SchemaRegistryError(403, 40301, "denied"),
            "schema registry https://***@sr.example denied access (403); the credentials "
            "lack permission to read this subject or schema",
        ),
        (
            ConnectionRefusedError(111, "Connection refused"),
            "cannot reach schema registry https://***@sr.example ([Errno 111] Connection "
            "refused); check [schema_registry] url",
        ),
    ],
)
def test_a_registry_that_cannot_be_used_gets_one_line(error: Exception, expected: str) -> None:
    failure = access_failure("https://ada:pw@sr.example", error)
    assert isinstance(failure, SchemaRegistryUnavailableError)
    assert str(failure) == expected


def test_a_registry_that_does_not_know_a_schema_is_not_a_connection_problem() -> None:
    assert access_failure("https://sr.example", SchemaRegistryError(404, 40403, "nf")) is None


def test_the_reason_of_a_failed_query_is_enrichd_s_own_line_inside_sparks_text() -> None:
    spark_text = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted\n"
        '  File "source.py", line 9, in _route\n'
        "daemon.errors.SchemaRegistryUnavailableError: schema registry http://h refused the "
        "credentials (401); check it\n"
        "\tat org.apache.spark.api.python.BasePythonRunner"
    )
    assert failure_reason(spark_text) == (
        "schema registry http://h refused the credentials (401); check it"
    )
    assert failure_reason("boom\nat line 3") == "boom"


# -- ${file:/path}: secrets from files (a Kubernetes Secret mounted as files) -----------------


def test_a_file_reference_is_the_files_content_less_one_line_ending(tmp_path: Path) -> None:
    (tmp_path / "unix").write_text("pw-file-1\n")
    (tmp_path / "dos").write_bytes(b"pw-file-2\r\n")
    (tmp_path / "bare").write_text("pw-file-3")
    (tmp_path / "two").write_text("pw-file-4\n\n")
    (tmp_path / "pem").write_text("-----BEGIN-----\nabc\n-----END-----\n")
    names = ("unix", "dos", "bare", "two", "pem")
    text = "|".join(f"${{file:{tmp_path / name}}}" for name in names)
    assert expand_text(text, {}) == (
        "pw-file-1|pw-file-2|pw-file-3|pw-file-4\n|-----BEGIN-----\nabc\n-----END-----",
        [],
    )


def test_a_relative_file_reference_resolves_against_the_pipeline_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "kafka-password").write_text("pw-file-relative\n")
    monkeypatch.chdir("/")  # not where the pipeline file is
    data = {"kafka": {"client_conf": {"sasl.password": "${file:secrets/kafka-password}"}}}
    expanded, problems = expand_environment(tmp_path / "p.toml", data, {})
    assert problems == []
    assert expanded["kafka"]["client_conf"]["sasl.password"] == "pw-file-relative"


def test_file_and_variable_references_mix_and_are_expanded_once(tmp_path: Path) -> None:
    (tmp_path / "user-info").write_text("${NOT_EXPANDED}:pw-${file:/etc/passwd}\n")
    (tmp_path / "key").write_text("pw-file-key")
    text = f"${{USER}}:${{file:{tmp_path / 'key'}}} $${{file:{tmp_path / 'key'}}}"
    assert expand_text(text, {"USER": "ada"}) == (f"ada:pw-file-key ${{file:{tmp_path}/key}}", [])
    # A file's content (and a variable's value) is taken as it is, never expanded again.
    assert expand_text(f"${{file:{tmp_path / 'user-info'}}}", {}) == (
        "${NOT_EXPANDED}:pw-${file:/etc/passwd}",
        [],
    )
    assert expand_text("${V}", {"V": f"${{file:{tmp_path / 'key'}}}"}) == (
        f"${{file:{tmp_path}/key}}",
        [],
    )


def test_a_missing_or_unreadable_file_is_one_problem_naming_the_path_and_key(
    tmp_path: Path,
) -> None:
    (tmp_path / "latin1").write_bytes(b"pw-\xe9t\xe9\n")
    (tmp_path / "folder").mkdir()
    data = {
        "kafka": {
            "client_conf": {
                "sasl.password": f"${{file:{tmp_path / 'missing'}}}",
                "ssl.key.password": f"${{file:{tmp_path / 'latin1'}}}",
                "ssl.key.pem": f"${{file:{tmp_path / 'folder'}}}",
            }
        },
        "pipeline": [{"name": "${file:}"}],
    }
    expanded, problems = expand_environment(Path("p.toml"), data, {})
    fix = "mount or write it there, or correct the path in ${file:...}"
    assert problems == [
        f"p.toml: kafka.client_conf.sasl.password: cannot read secret file "
        f"{tmp_path / 'missing'} (No such file or directory); {fix}",
        f"p.toml: kafka.client_conf.ssl.key.password: cannot read secret file "
        f"{tmp_path / 'latin1'} (not UTF-8 text); {fix}",
        f"p.toml: kafka.client_conf.ssl.key.pem: cannot read secret file "
        f"{tmp_path / 'folder'} (Is a directory); {fix}",
        "p.toml: pipeline[0].name: ${file:} names no file; give a path, as ${file:/path/to/secret}",
    ]
    assert set(expanded["kafka"]["client_conf"].values()) == {""}


def test_a_secret_file_over_the_cap_is_one_problem_and_is_not_read_whole(
    tmp_path: Path,
) -> None:
    """A reference to a wrong path (a log, a device that never ends) must not fill the memory."""
    (tmp_path / "big").write_bytes(b"x" * (SECRET_FILE_MAX_BYTES + 1))
    (tmp_path / "just").write_bytes(b"y" * SECRET_FILE_MAX_BYTES)
    data = {
        "a": f"${{file:{tmp_path / 'big'}}}",
        "b": f"${{file:{tmp_path / 'just'}}}",
        "c": "${file:/dev/zero}",
    }
    expanded, problems = expand_environment(Path("p.toml"), data, {})
    too_large = (
        "is larger than 1 MiB, too large for a secret; check the path in ${file:...} (a CA "
        "bundle or key file goes in a *.location setting)"
    )
    assert problems == [
        f"p.toml: a: secret file {tmp_path / 'big'} {too_large}",
        f"p.toml: c: secret file /dev/zero {too_large}",
    ]
    assert len(expanded["b"]) == SECRET_FILE_MAX_BYTES


def test_secret_options_of_a_pipeline_are_masked_nested_ones_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[pipeline.options]`` of a plugin that talks to a service: its token from ``${VAR}``."""
    monkeypatch.setenv("ENRICHD_TEST_TOKEN", "tok-planted-in-options")
    (tmp_path / "p.toml").write_text(
        """
[[pipeline]]
name = "p"
joiner = "comap"
checkpoint = "cp"
inputs.one = { topic = "u", schema = "u.avsc", key = "id" }
output = { topic = "o", schema = "o.avsc" }
[pipeline.options]
api_token = "${ENRICHD_TEST_TOKEN}"
lookup = { "service.password" = "pw-planted-nested", region = "eu-west" }
many_id = "id"
"""
    )
    load_pipeline_file(tmp_path / "p.toml")
    text = "tok-planted-in-options pw-planted-nested eu-west id"
    assert redact(text) == "*** *** eu-west id"


def test_a_value_read_from_a_file_is_masked_whatever_setting_it_fills(tmp_path: Path) -> None:
    """Even in a setting whose name does not say it is secret (here ``client.id``)."""
    (tmp_path / "id").write_text("pw-file-not-by-name\n")
    expand_environment(Path("p.toml"), {"client.id": f"${{file:{tmp_path / 'id'}}}"}, {})
    assert redact("client pw-file-not-by-name refused") == "client *** refused"


def test_spark_settings_are_masked_but_switches_and_paths_are_not() -> None:
    remember(
        {
            "spark.hadoop.fs.s3a.secret.key": "s3-planted-secret",
            "spark.authenticate.secret": "rpc-planted-secret",
            "spark.authenticate.secret.file": "/etc/spark/secret-path",
            "spark.authenticate": "true",
            "spark.some.token.renewal": "false",
        }
    )
    text = "s3-planted-secret rpc-planted-secret /etc/spark/secret-path true false"
    assert redact(text) == "*** *** /etc/spark/secret-path true false"


def test_a_value_too_long_for_a_worker_is_masked_here_and_not_carried() -> None:
    """A joiner operator carries :func:`remembered` in what Spark ships with every task."""
    long, short = "k" * (CARRIED_MAX_CHARS + 1), "p" * 40
    secrets.remember_value(long)
    secrets.remember_value(short)
    assert short in remembered() and long not in remembered()
    assert redact(f"a {long} b") == "a *** b"
