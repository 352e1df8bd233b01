"""`daemon plugins list|describe` and the plugin host behind them, with real entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint, entry_points

import pytest
from typer.testing import CliRunner

import daemon.cli.plugins as cli_plugins
from daemon.cli import app
from daemon.errors import UnknownJoinerError
from daemon.plugin.host import (
    BUILTIN_DISTRIBUTION,
    DISABLE_AUTOLOAD_ENV,
    JoinerRegistry,
    build_registry,
)

BUILTINS = {"comap", "asof", "lookup", "window", "table"}
runner = CliRunner()


def fake(name: str, module: str) -> EntryPoint:
    """A hand-made entry point of the ``enrichd`` group (its ``dist`` is None)."""
    return EntryPoint(name=name, value=module, group="enrichd")


def builtins_plus(*extra: EntryPoint) -> list[EntryPoint]:
    """enrichd's own entry points and ``extra``: not whatever else the venv has installed
    (such as plugins/enrichd-joiner-example), so the exact checks below stay exact."""
    own = [
        e
        for e in entry_points(group="enrichd")
        if e.dist is not None and e.dist.name == BUILTIN_DISTRIBUTION
    ]
    return [*own, *extra]


def use_registry(monkeypatch: pytest.MonkeyPatch, registry: JoinerRegistry) -> None:
    monkeypatch.setattr(cli_plugins, "registry", lambda: registry)


def test_list_shows_the_builtins_from_enrichd() -> None:
    result = runner.invoke(app, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "enrichd" in line]
    for name in BUILTINS:
        assert any(f" {name} " in row for row in rows), name
    assert "(not implemented yet)" not in result.output  # every built-in works
    assert "many_id" in result.output
    assert "failed" not in result.output


def test_list_json_has_every_joiner_with_options() -> None:
    result = runner.invoke(app, ["plugins", "list", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert set(document) == {"joiners", "failures"}
    joiners = {j["name"]: j for j in document["joiners"]}
    assert set(joiners) >= BUILTINS
    comap = joiners["comap"]
    assert comap["distribution"] == "enrichd"
    assert comap["version"]
    assert comap["implemented"] is True
    assert comap["roles"] == ["one", "many"]
    assert comap["options"]["many_id"] == {
        "type": "str",
        "default": None,
        "required": True,
        "description": "field that identifies a many-side record",
        "field_of": "many",
    }
    assert "field_of" not in comap["options"]["max_many_per_key"]
    assert comap["outputs"] == [
        {
            "output": "output",
            "key": "the many-side record's id, as text",
            "tombstones": "when the one side is deleted, or a many-side record is",
            "fields": [
                {
                    "name": "id",
                    "type": "many field '<many_id>'",
                    "holds": "the many-side record's id (many_id)",
                },
                {"name": "one", "type": "one record", "holds": "the one-side record"},
                {"name": "many", "type": "many record", "holds": "the many-side record"},
            ],
        }
    ]
    assert comap["headers"].startswith('with headers_from = "inputs": the side that did not')
    assert comap["options"]["state_ttl"]["type"] == "duration | None"
    assert comap["options"]["max_many_per_key"]["default"] == 10_000
    assert all(joiners[name]["implemented"] for name in BUILTINS)
    assert document["failures"] == []


def test_list_marks_a_registered_but_unimplemented_joiner(monkeypatch: pytest.MonkeyPatch) -> None:
    use_registry(
        monkeypatch, build_registry(builtins_plus(fake("sketch", "tests.fixtures.sketch_plugin")))
    )
    table = runner.invoke(app, ["plugins", "list"])
    assert table.exit_code == 0, table.output
    (row,) = [line for line in table.output.splitlines() if " sketch " in line]
    assert "(not implemented yet)" in row
    listed = runner.invoke(app, ["plugins", "list", "--json"])
    joiners = {j["name"]: j for j in json.loads(listed.output)["joiners"]}
    assert joiners["sketch"]["implemented"] is False
    assert joiners["comap"]["implemented"] is True


def test_describe_shows_roles_options_and_semantics() -> None:
    result = runner.invoke(app, ["plugins", "describe", "comap"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "roles: one, many" in out
    for option in ("many_id", "max_many_per_key", "state_ttl"):
        assert option in out
    assert "(required)" in out
    assert "10000" in out
    assert "fan-out" in out  # from the semantics paragraph
    assert "\n    State per join key" not in out  # docstring indentation is removed
    assert "a field of many" in out  # many_id names a field of the many records
    assert "output value (default options)" in out
    assert "the many-side record's id (many_id)" in out  # the id comap writes
    assert "key: the many-side record's id, as text" in out
    assert 'headers: with headers_from = "inputs": the side that did not change' in out


def test_describe_of_a_joiner_that_declares_no_output_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_registry(
        monkeypatch, build_registry(builtins_plus(fake("extra", "tests.fixtures.extra_plugin")))
    )
    result = runner.invoke(app, ["plugins", "describe", "echo"])  # extra_plugin's joiner
    assert result.exit_code == 0, result.output
    assert "output value: not declared (the semantics say it)" in result.output


def test_describe_shows_literal_choices_and_duration_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = fake("extra", "tests.fixtures.extra_plugin")
    use_registry(monkeypatch, build_registry(builtins_plus(extra)))
    result = runner.invoke(app, ["plugins", "describe", "echo"])
    assert result.exit_code == 0, result.output
    assert '"inner" | "left"' in result.output
    assert '"10s"' in result.output
    listing = json.loads(runner.invoke(app, ["plugins", "list", "--json"]).output)
    echo = next(j for j in listing["joiners"] if j["name"] == "echo")
    assert echo["options"]["mode"]["choices"] == ["inner", "left"]
    assert echo["options"]["grace"] == {
        "type": "duration",
        "default": 10_000,
        "required": False,
        "description": "how long to wait",
    }
    assert "choices" not in echo["options"]["grace"]


def test_describe_unknown_raises_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    use_registry(monkeypatch, build_registry(builtins_plus()))
    result = runner.invoke(app, ["plugins", "describe", "nope"])
    assert result.exit_code != 0
    assert isinstance(result.exception, UnknownJoinerError)
    assert "asof, comap, lookup, table, window" in str(result.exception)


def test_describe_unknown_is_one_error_line_for_the_user() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "plugins", "describe", "nope"],
        capture_output=True,
        text=True,
        env={**os.environ, DISABLE_AUTOLOAD_ENV: "1"},  # the choices: the built-ins only
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: unknown joiner 'nope'; installed joiners: asof, comap, lookup, table, window\n"
    )


def test_enrichd_register_joiners_from_a_third_party_plugin() -> None:
    registry = build_registry(builtins_plus(fake("extra", "tests.fixtures.extra_plugin")))
    assert set(registry.joiners) == BUILTINS | {"echo"}
    assert registry.joiners["echo"].plugin.name == "extra"
    assert registry.failures == []


def test_duplicate_joiner_name_is_a_failure_naming_both_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = build_registry(builtins_plus(fake("impostor", "tests.fixtures.dup_plugin")))
    assert set(registry.joiners) == BUILTINS
    assert registry.joiners["comap"].plugin.distribution == "enrichd"  # the first one wins
    (failure,) = registry.failures
    assert failure.plugin.name == "impostor"
    assert "'comap'" in failure.error
    assert "plugin 'comap' (enrichd)" in failure.error
    assert "plugin 'impostor'" in failure.error

    use_registry(monkeypatch, registry)
    result = runner.invoke(app, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    assert "plugins that failed to load" in result.output
    assert "impostor" in result.output


def test_broken_plugin_is_recorded_and_the_others_still_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = build_registry(
        builtins_plus(
            fake("broken", "tests.fixtures.broken_plugin"),
            fake("extra", "tests.fixtures.extra_plugin"),
        )
    )
    assert set(registry.joiners) == BUILTINS | {"echo"}
    (failure,) = registry.failures
    assert failure.plugin.name == "broken"
    assert failure.error == "ImportError: enrichd_fake_dependency is not installed"

    use_registry(monkeypatch, registry)
    result = runner.invoke(app, ["plugins", "list", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["failures"] == [
        {
            "plugin": "broken",
            "distribution": "?",
            "version": "?",
            "error": "ImportError: enrichd_fake_dependency is not installed",
        }
    ]
    assert {j["name"] for j in document["joiners"]} == BUILTINS | {"echo"}


def test_plugin_with_a_misspelled_hook_fails_loudly() -> None:
    registry = build_registry(builtins_plus(fake("typo", "tests.fixtures.typo_plugin")))
    assert set(registry.joiners) == BUILTINS
    (failure,) = registry.failures
    assert failure.plugin.name == "typo"
    assert "enrichd_register_joiner" in failure.error


@pytest.mark.parametrize(("disabled", "expected"), [("1", BUILTINS), ("", BUILTINS | {"echo"})])
def test_disable_plugin_autoload_keeps_only_enrichds_own(
    monkeypatch: pytest.MonkeyPatch, disabled: str, expected: set[str]
) -> None:
    # Stand in for an installed third-party distribution among the real entry points.
    extra = fake("extra", "tests.fixtures.extra_plugin")
    monkeypatch.setattr(
        "daemon.plugin.host.entry_points", lambda group: builtins_plus(extra) if group else []
    )
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, disabled)
    assert set(build_registry().joiners) == expected


def test_disable_plugin_autoload_in_a_real_process() -> None:
    env = {**os.environ, DISABLE_AUTOLOAD_ENV: "1"}
    result = subprocess.run(
        [sys.executable, "-m", "daemon", "plugins", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {j["distribution"] for j in document["joiners"]} == {"enrichd"}
    assert {j["name"] for j in document["joiners"]} >= BUILTINS


def test_every_plugin_with_a_misspelled_hook_is_reported() -> None:
    registry = build_registry(
        builtins_plus(
            fake("typo", "tests.fixtures.typo_plugin"),
            fake("typo2", "tests.fixtures.typo_plugin:Misspelled"),
        )
    )
    assert {failure.plugin.name for failure in registry.failures} == {"typo", "typo2"}
    assert set(registry.joiners) == BUILTINS
