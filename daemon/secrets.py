"""Keeping secrets out of everything enrichd prints.

How it works: when a pipeline file is loaded, the values of its secret settings (any key
whose name says secret, password, token, credential, passphrase or key, or user info, in
``[kafka] client_conf``, ``[schema_registry]``, ``[spark.conf]`` and each pipeline's
``[pipeline.options]``, nested tables too: :func:`is_secret_key`) are remembered here with
:func:`remember`, and so is every value read from a secret file (``${file:/path}``:
:mod:`daemon.model.environment`). Every way out of the process (error lines, text and JSON
logs, ``/readyz``, tracebacks under ``ENRICHD_DEBUG``, ``daemon validate``) passes its text
through :func:`redact`, which replaces each remembered value with ``***`` and the user info
of any URL (``https://user:pass@host``) likewise.

Spark's Python workers get the settings in pickled specs and never print them: their
errors are made of messages composed here and passed through :func:`redact` where they are
printed. One thing they write themselves: the reason a dead letter's ``enrichd.error.message``
header gives, which may quote an exception that quotes a secret. So the joiner operator
carries the values remembered on the driver (:func:`remembered`) in its pickled state, not in
any Spark option, and its workers remember them (:func:`remember_values`) before they redact
the reasons they write.

Example:
    >>> remember({"sasl.password": "hunter2", "sasl.username": "ada"})
    >>> redact("login with hunter2 at https://ada:pw@sr.example:8081 failed")
    'login with *** at https://***@sr.example:8081 failed'
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"

_SECRET_WORDS = frozenset({"password", "secret", "token", "credential", "passphrase", "key"})
"""A setting whose name has one of these words (or its plural) holds a secret..."""
_NAMES_SOMETHING_ELSE = frozenset(
    "location file store source provider url endpoint size bit bits length type algorithm "
    "format schema subject enabled enable".split()
)
"""...unless a word after it says the setting names something else: ``ssl.key.location``
(a path), ``basic.auth.credentials.source``, ``sasl.oauthbearer.token.endpoint.url``,
``spark.io.encryption.keySizeBits``, ``spark.authenticate.secret.file``,
``spark.security.credentials.hive.enabled``."""
_SWITCHES = frozenset({"true", "false"})
"""Values never taken for a secret, whatever their setting: masking every "true" in a log
would hide more than it keeps."""
_SECRET_ANYWAY = re.compile(r"user\.info|oauthbearer\.config|\.pem$", re.IGNORECASE)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
"""The words of a setting's name: split at dots, dashes and underscores and in camelCase
(``spark.ssl.keyPassword``: spark, ssl, key, password)."""
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
_SHORTEST = 3
"""Values shorter than this are not masked: masking every "1" or "ab" in a log would mangle
it and hide nothing worth hiding."""

_lock = threading.Lock()
_secrets: set[str] = set()


def is_secret_key(key: str) -> bool:
    """Whether a setting's name says its value is a secret.

    Example:
        >>> [is_secret_key(k) for k in ("sasl.password", "fs.s3a.secret.key", "apiKey")]
        [True, True, True]
        >>> [is_secret_key(k) for k in ("ssl.key.location", "spark.io.encryption.keySizeBits")]
        [False, False]
    """
    if _SECRET_ANYWAY.search(key):
        return True
    words = [word.lower() for word in _WORD.findall(key)]
    for at, word in enumerate(words):
        if (word in _SECRET_WORDS or word.removesuffix("s") in _SECRET_WORDS) and (
            _NAMES_SOMETHING_ELSE.isdisjoint(words[at + 1 :])
        ):
            return True
    return False


def secret_values(settings: Mapping[str, Any]) -> list[str]:
    """The secret values among ``settings``, with the password half of ``user:password``."""
    found: list[str] = []
    for key, value in settings.items():
        if not isinstance(value, str) or not is_secret_key(key):
            continue
        if value.lower() in _SWITCHES:
            continue
        found.append(value)
        if key.endswith("user.info") and ":" in value:
            found.append(value.split(":", 1)[1])
    return found


def remember(settings: Mapping[str, Any], *, url: str | None = None) -> None:
    """Remember the secret values of ``settings`` (and of ``url``'s user info) for redaction."""
    values = secret_values(settings)
    if url is not None:
        userinfo = url_userinfo(url)
        if userinfo:
            values += [userinfo, userinfo.split(":", 1)[-1]]
    with _lock:
        _secrets.update(v for v in values if len(v) >= _SHORTEST)


def remember_nested(settings: Mapping[str, Any]) -> None:
    """:func:`remember` the secret values of nested tables and lists (``[pipeline.options]``).

    A value is secret by its own key's name, however deep; a list takes its key's name.
    """
    flat: list[tuple[str, Any]] = []

    def walk(key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for inner, item in value.items():
                walk(str(inner), item)
        elif isinstance(value, list):
            for item in value:
                walk(key, item)
        else:
            flat.append((key, value))

    walk("", settings)
    values = [v for key, v in flat for v in secret_values({key: v})]
    with _lock:
        _secrets.update(v for v in values if len(v) >= _SHORTEST)


CARRIED_MAX_CHARS = 64 * 1024
"""The longest value :func:`remembered` carries to another process. A secret file may hold
up to 1 MiB (:data:`daemon.model.environment.SECRET_FILE_MAX_BYTES`), but what the joiner
operator pickles goes with every task: over 1 MiB, Spark ships it as a broadcast variable,
which the Python ``transformWithState`` runner fails to load (``BROADCAST_VARIABLE_NOT_LOADED``).
Keys, passwords and tokens are far shorter; a longer value (a certificate bundle) is still
masked on the driver, in everything the daemon prints."""


def remembered() -> tuple[str, ...]:
    """What to carry to another process (:func:`remember_values`): every value but the longer.

    Those over :data:`CARRIED_MAX_CHARS` stay on this side.
    """
    with _lock:
        return tuple(sorted(v for v in _secrets if len(v) <= CARRIED_MAX_CHARS))


def remember_values(values: Iterable[str]) -> None:
    """Remember values another process remembered (:func:`remembered`)."""
    with _lock:
        _secrets.update(v for v in values if len(v) >= _SHORTEST)


def remember_value(value: str) -> None:
    """Remember one value as a secret whatever it is for (one read from a ``${file:...}``)."""
    if len(value) >= _SHORTEST:
        with _lock:
            _secrets.add(value)


def url_userinfo(url: str) -> str:
    """The ``user:password`` part of a URL, or empty."""
    match = _URL_USERINFO.match(url)
    return "" if match is None else match.group(0)[len(match.group("scheme")) : -1]


def redact(text: str) -> str:
    """``text`` with every remembered secret and every URL's user info masked."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)  # a longer one may contain a shorter
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def display_url(url: str) -> str:
    """A URL fit to print: its user info masked."""
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", url)
