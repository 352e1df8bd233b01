"""The pipeline file of verify's child `daemon run`: the user's connection, verify's pipelines.

The ``[kafka]`` and ``[schema_registry]`` tables are copied from the user's file as written,
before ``${VAR}`` and ``${file:...}`` are filled in: the child fills them in from the same
environment, so no secret is written to disk or put on a command line. Relative paths in
them (client settings that name a file, ``${file:...}`` references) are made absolute
against the user's file's folder, since the child's file lives elsewhere.

Example:
    >>> print(toml_value({"a": 1, "b": ["x", True], "c": {"d": "e"}}))
    { "a" = 1, "b" = [ "x", true ], "c" = { "d" = "e" } }
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from daemon.model.config import PATH_SETTINGS

_FILE_REFERENCE = re.compile(r"\$\{file:(?P<path>[^}]*)\}")


def toml_value(value: Any) -> str:
    """A value as TOML: tables inline, strings in JSON's escapes (which TOML shares)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, list | tuple):
        return "[ " + ", ".join(toml_value(item) for item in value) + " ]"
    raise TypeError(f"no TOML for {type(value).__name__}")


def connection_tables(source: Path) -> dict[str, Any]:
    """The user's ``[kafka]`` and ``[schema_registry]`` tables, as written, paths absolute."""
    data = tomllib.loads(source.read_text(encoding="utf-8"))
    base = source.resolve().parent
    tables = {name: data[name] for name in ("kafka", "schema_registry") if name in data}
    return _absolute(tables, base, "")


def _absolute(value: Any, base: Path, key: str) -> Any:
    if isinstance(value, dict):
        return {k: _absolute(v, base, k) for k, v in value.items()}
    if not isinstance(value, str):
        return value

    def anchor(match: re.Match[str]) -> str:
        path = match.group("path")
        return match.group(0) if Path(path).is_absolute() else "${file:" + str(base / path) + "}"

    value = _FILE_REFERENCE.sub(anchor, value)
    if key in PATH_SETTINGS and value and "$" not in value and not Path(value).is_absolute():
        return str(base / value)
    return value


def write_child_file(
    path: Path, connection: dict[str, Any], spark: dict[str, Any], pipelines: list[dict[str, Any]]
) -> None:
    """Write the child's pipeline file, readable by its owner only.

    Args:
        path: where.
        connection: the ``kafka`` (and ``schema_registry``) tables.
        spark: the ``spark`` table.
        pipelines: one table per ``[[pipeline]]``.
    """
    lines = ["# Written by `daemon verify` for its child `daemon run`; deleted with its run.", ""]
    for name, table in {**connection, "spark": spark}.items():
        lines.append(f"{name} = {toml_value(table)}")
    lines.append("pipeline = [")
    lines.extend(f"  {toml_value(pipe)}," for pipe in pipelines)
    lines.append("]")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)
