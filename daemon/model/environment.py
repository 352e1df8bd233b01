"""``${VAR}``, ``${VAR:-default}`` and ``${file:/path}`` in a pipeline file, filled in at load.

Every string value of the file is expanded when it is loaded (keys are not), so secrets stay
out of the file: ``sasl.password = "${KAFKA_PASSWORD}"`` from the environment, or
``sasl.password = "${file:/etc/enrichd/secrets/kafka-password}"`` from a file, such as a
Kubernetes Secret or a Docker secret mounted as files (the shape of Kafka's config providers).

- ``${VAR:-default}``, as in a POSIX shell and Docker Compose, gives ``default`` when ``VAR``
  is unset or empty, and ``$$`` is a literal ``$``. A variable that is not set and has no
  default is a problem naming the variable and the key it was meant for.
- ``${file:PATH}`` is the whole content of the file at ``PATH`` (UTF-8), less one trailing
  line ending (files written with ``echo`` or an editor end with one; a password does not).
  A relative ``PATH`` is resolved against the pipeline file's folder, like every relative path
  of the file. A file that is missing or unreadable is a problem naming the path and the key.
  Whatever is read from a file is taken for a secret, whichever setting it fills: it is
  remembered for :func:`daemon.secrets.redact`, so it is masked wherever enrichd prints. A
  file larger than :data:`SECRET_FILE_MAX_BYTES` is a problem too: a secret is small, and a
  reference to a wrong path (a log, a device) must not fill the memory.

The values themselves are never put in a problem. A value is expanded once: a ``${...}``
inside a variable's value or a file's content is kept as it is.

Example:
    >>> expand_text("${USER_HOME:-/home}/x", {})
    ('/home/x', [])
    >>> expand_text("${KAFKA_PASSWORD}", {})
    ('', ['environment variable KAFKA_PASSWORD is not set; set it, or give a default as ...'])
    >>> expand_text("${file:/nonexistent/kafka-password}", {})
    ('', ['cannot read secret file /nonexistent/kafka-password (No such file or directory); ...'])
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from daemon import secrets

_REFERENCE = re.compile(
    r"\$\$"
    r"|\$\{file:(?P<file>[^}]*)\}"
    r"|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}"
)


SECRET_FILE_MAX_BYTES = 1024 * 1024
"""The largest file a ``${file:...}`` reads: 1 MiB holds any key, token or certificate chain."""


def read_secret_file(reference: str, base: Path | None = None) -> tuple[str, str | None]:
    """The content of the file a ``${file:...}`` names, or a problem saying why there is none.

    Args:
        reference: the path as written after ``file:``.
        base: the folder a relative path is resolved against (the pipeline file's folder);
            None: the working directory.

    Returns:
        The content less one trailing line ending (remembered as a secret), and None; or an
        empty string and the problem, naming the path but never any content.
    """
    if not reference.strip():
        return "", "${file:} names no file; give a path, as ${file:/path/to/secret}"
    path = Path(reference)
    if base is not None and not path.is_absolute():
        path = base / path
    fix = "mount or write it there, or correct the path in ${file:...}"
    try:
        with path.open("rb") as file:
            data = file.read(SECRET_FILE_MAX_BYTES + 1)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return "", f"cannot read secret file {path} ({why}); {fix}"
    if len(data) > SECRET_FILE_MAX_BYTES:
        return "", (
            f"secret file {path} is larger than {SECRET_FILE_MAX_BYTES // 1024 // 1024} MiB, "
            "too large for a secret; check the path in ${file:...} (a CA bundle or key file "
            "goes in a *.location setting)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "", f"cannot read secret file {path} (not UTF-8 text); {fix}"
    if text.endswith("\n"):
        text = text[:-1].removesuffix("\r")
    secrets.remember_value(text)
    return text, None


def expand_text(
    text: str, environ: Mapping[str, str], base: Path | None = None
) -> tuple[str, list[str]]:
    """``text`` with its references filled in, and one problem per reference that cannot be.

    Args:
        text: a string value of the file.
        environ: the variables.
        base: the folder relative ``${file:...}`` paths are resolved against.
    """
    problems: list[str] = []

    def fill(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        reference = match.group("file")
        if reference is not None:
            content, problem = read_secret_file(reference, base)
            if problem is not None:
                problems.append(problem)
            return content
        name, default = match.group("name"), match.group("default")
        value = environ.get(name)
        if default is not None:
            return value if value else default
        if value is None:
            problems.append(
                f"environment variable {name} is not set; set it, or give a default as "
                f"${{{name}:-default}}"
            )
            return ""
        return value

    return _REFERENCE.sub(fill, text), problems


def expand_environment(
    path: Path, data: dict[str, Any], environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Parsed TOML with every string expanded; and one problem line per failed reference.

    Each problem names the file, the key (``kafka.client_conf.sasl.password``,
    ``pipeline[0].inputs.one.topic``) and the variable or the secret file's path. Relative
    ``${file:...}`` paths are resolved against ``path``'s folder.
    """
    env = os.environ if environ is None else environ
    base = path.resolve().parent
    problems: list[str] = []

    def walk(value: Any, where: str) -> Any:
        if isinstance(value, str):
            expanded, failed = expand_text(value, env, base)
            problems.extend(f"{path}: {where}: {problem}" for problem in failed)
            return expanded
        if isinstance(value, dict):
            return {k: walk(item, f"{where}.{k}" if where else k) for k, item in value.items()}
        if isinstance(value, list):
            return [walk(item, f"{where}[{i}]") for i, item in enumerate(value)]
        return value

    return walk(data, ""), problems
