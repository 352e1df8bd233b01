"""``${VAR}`` and ``${VAR:-default}`` in a pipeline file, filled in from the environment.

Every string value of the file is expanded when it is loaded (keys are not), so secrets stay
out of the file: ``sasl.password = "${KAFKA_PASSWORD}"``. As in a POSIX shell and Docker
Compose, ``${VAR:-default}`` gives ``default`` when ``VAR`` is unset or empty, and ``$$``
is a literal ``$``. A variable that is not set and has no default is a problem naming the
variable and the key it was meant for; the values themselves are never put in a message.

Example:
    >>> expand_text("${USER_HOME:-/home}/x", {})
    ('/home/x', [])
    >>> expand_text("${KAFKA_PASSWORD}", {})
    ('', ['KAFKA_PASSWORD'])
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_REFERENCE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def expand_text(text: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """``text`` with its references filled in, and the names of the variables that are missing."""
    missing: list[str] = []

    def fill(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group("name"), match.group("default")
        value = environ.get(name)
        if default is not None:
            return value if value else default
        if value is None:
            missing.append(name)
            return ""
        return value

    return _REFERENCE.sub(fill, text), missing


def expand_environment(
    path: Path, data: dict[str, Any], environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Parsed TOML with every string expanded; and one problem line per missing variable.

    Each problem names the file, the key (``kafka.client_conf.sasl.password``,
    ``pipeline[0].inputs.one.topic``) and the variable.
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []

    def walk(value: Any, where: str) -> Any:
        if isinstance(value, str):
            expanded, missing = expand_text(value, env)
            problems.extend(
                f"{path}: {where}: environment variable {name} is not set; set it, or give "
                f"a default as ${{{name}:-default}}"
                for name in missing
            )
            return expanded
        if isinstance(value, dict):
            return {k: walk(item, f"{where}.{k}" if where else k) for k, item in value.items()}
        if isinstance(value, list):
            return [walk(item, f"{where}[{i}]") for i, item in enumerate(value)]
        return value

    return walk(data, ""), problems
