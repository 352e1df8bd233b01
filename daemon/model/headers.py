"""Kafka headers carried from input records to outputs and dead letters.

How it works: a pipeline's ``headers`` policy (:data:`HeaderPolicy`) names the input headers
its outputs carry. Unless it is ``"none"``, the source reads every record's headers into
its row (:attr:`daemon.model.wire.InputRow.headers`, :func:`pack`), so that a dead letter
keeps its record's headers as they came; the operator keeps only the policy's in the
:class:`~daemon.plugin.joiner.InputRecord` it hands the joiner (:func:`carrier`), so a
record held in state keeps no more than its outputs will carry. An output carries them as
its row's ``headers`` (:attr:`daemon.model.wire.OutputRow.headers`), written before
enrichd's own (``enrichd.source.*``, ``enrichd.error.*``). Headers named ``enrichd.*`` are
never carried: each pipeline writes its own.

Headers travel in rows as one binary column, null when a record has none (or the policy is
``"none"``): a flat column costs little per record, where a list of structs would cost a
conversion per header between Arrow and Python. The blob is :mod:`marshal`'s form of the
list of ``(name, value)`` pairs the Kafka client gives: made and read in C, and read only
by enrichd's own processes, which run the same Python.

Whose headers (``headers_from`` of ``[[pipeline]]``, :data:`HeadersFrom`): under
``"record"`` (the default) an output carries the headers of the one record it is about (the one
its ``enrichd.source.*`` headers name); under ``"inputs"`` those of every input record that
made it, merged by :func:`merge_headers`: the other inputs' first, the record it is about last,
so that a consumer reading the last header of a name (Kafka's ``Headers.lastHeader``) reads
the value it would read under ``"record"`` whenever that record has the name.

A dead letter also carries why, under the names Kafka Streams' dead-letter handler (KIP-1034)
gives them (:func:`error_headers`), beside enrichd's ``enrichd.error.*``.

Example:
    >>> carry = carrier(["traceparent"])
    >>> blob = pack([("traceparent", b"00-ab-cd-01"), ("tenant", b"acme")])
    >>> carry(blob)
    (('traceparent', b'00-ab-cd-01'),)
    >>> unpack(pack(carry(blob)))
    [('traceparent', b'00-ab-cd-01')]
"""

from __future__ import annotations

import marshal
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

from daemon import secrets

Header = tuple[str, bytes | None]
"""One Kafka header: its name and value (None: a header without a value)."""
Headers = tuple[Header, ...]
"""A record's headers, in order; a name may occur more than once, as Kafka allows."""

HeaderPolicy = Literal["trace", "none", "all"] | list[str]
"""Which input headers a pipeline's outputs carry (``headers`` of ``[[pipeline]]``):
``"trace"`` (the default) the W3C Trace Context headers (:data:`TRACE_CONTEXT`), ``"none"``
no header (and the source reads none), ``"all"`` every header, or a list of header names."""

HeadersFrom = Literal["record", "inputs"]
"""Whose headers an output carries (``headers_from`` of ``[[pipeline]]``): ``"record"`` (the
default) the record it is about, ``"inputs"`` every input record that made it
(:func:`merge_headers`)."""

DEFAULT_FROM: Final = "record"
"""A pipeline's ``headers_from`` unless set: one record's headers, as enrichd always carried."""

DEFAULT_POLICY: Final = "trace"
"""A pipeline's ``headers`` unless set: trace context only, so that a trace goes on through
enrichd and nothing else leaks from input to output unasked."""

TRACE_CONTEXT: Final = ("traceparent", "tracestate")
"""The headers of W3C Trace Context, as OpenTelemetry's Kafka instrumentations write them."""

OWN_PREFIX: Final = "enrichd."
"""The prefix of the headers enrichd writes itself, which no policy carries over."""

ERROR_EXCEPTION: Final = "__streams.errors.exception"
ERROR_MESSAGE: Final = "__streams.errors.message"
ERROR_STACKTRACE: Final = "__streams.errors.stacktrace"
"""The dead-letter headers of Kafka Streams' KIP-1034: the exception's class, its message and
its stack trace (see :func:`error_headers`)."""

Carrier = Callable[[bytes], Headers | None]
"""Takes a record's packed headers (:func:`pack`), returns those it carries (None: none)."""


def pack(headers: Sequence[Header] | None) -> bytes | None:
    """Headers as a row's blob (None when there are none)."""
    if not headers:
        return None
    return marshal.dumps(tuple(headers))


def unpack(blob: bytes | None) -> list[Header]:
    """The headers of a blob :func:`pack` made (none for None)."""
    if blob is None:
        return []
    return list(marshal.loads(blob))  # noqa: S302 - a blob enrichd's own source made


def reads_headers(policy: HeaderPolicy) -> bool:
    """Whether the source reads input headers under ``policy`` (not under ``"none"``)."""
    return policy != "none"


def policy_names(policy: HeaderPolicy) -> frozenset[str] | None:
    """The header names ``policy`` carries; None: every name (``"all"``)."""
    if policy == "all":
        return None
    if policy == "none":
        return frozenset()
    if policy == "trace":
        return frozenset(TRACE_CONTEXT)
    return frozenset(policy)


def carrier(policy: HeaderPolicy) -> Carrier:
    """What an input record keeps of its headers under ``policy``, for its outputs.

    Returns:
        A function of a packed blob (:func:`pack`) to the headers carried, in their order,
        None when none is; never one named ``enrichd.*``.
    """
    names = policy_names(policy)
    if names is None:
        return _every_header
    kept = frozenset(name for name in names if not name.startswith(OWN_PREFIX))
    return lambda blob: _named(blob, kept)


def _every_header(blob: bytes) -> Headers | None:
    headers = marshal.loads(blob)  # noqa: S302 - a blob enrichd's own source made
    return tuple(header for header in headers if not header[0].startswith(OWN_PREFIX)) or None


def _named(blob: bytes, names: frozenset[str]) -> Headers | None:
    headers = marshal.loads(blob)  # noqa: S302 - a blob enrichd's own source made
    return tuple(header for header in headers if header[0] in names) or None


def merge_headers(*inputs: Headers | None) -> Headers:
    """The headers of an output made of several input records, under ``headers_from = "inputs"``.

    Args:
        inputs: each input record's carried headers (None: it has none), the record the
            output is about last.

    Returns:
        Every input's headers in the order given, each record's in its own order; a
        ``(name, value)`` pair that occurs more than once is kept at its last place only. So
        the last header of a name is the about-record's whenever that record has the name, as
        under ``"record"``. Empty when no input has any (an output with no header, rather
        than the headers of its source).

    Example:
        >>> merge_headers((("tenant", b"row"), ("traceparent", b"t1")), None,
        ...               (("traceparent", b"t1"), ("tenant", b"order")))
        (('tenant', b'row'), ('traceparent', b't1'), ('tenant', b'order'))
    """
    pairs = [header for headers in inputs if headers for header in headers]
    if len(pairs) < 2:
        return tuple(pairs)
    # Walk back from the end, keeping each pair's last place, then turn it round again.
    seen: set[Header] = set()
    kept = []
    for header in reversed(pairs):
        if header not in seen:
            seen.add(header)
            kept.append(header)
    kept.reverse()
    return tuple(kept)


def pickled_fields(fields: tuple[Any, ...], headers: object) -> tuple[Any, ...]:
    """What a held value pickles as: ``fields``, then its ``headers`` only when it has some.

    The arguments its ``__reduce__`` returns. A value without headers so keeps the bytes it
    had before values carried headers, and one pickled then loads with none (the headers
    field, last, defaults to None).
    """
    return fields if headers is None else (*fields, headers)


def error_headers(kind: str, reason: str, error: BaseException | None = None) -> list[Header]:
    """A dead letter's headers in Kafka Streams' names (KIP-1034): why it was refused.

    Args:
        kind: enrichd's class of the refusal (``enrichd.error.class``).
        reason: enrichd's message (``enrichd.error.message``).
        error: the exception that made it, when one did (a joiner that raised, a value
            that did not decode or encode in the operator).

    Returns:
        The exception's class (qualified by its module, as Java names a class by its
        package), message and stack trace; without an exception, enrichd's class and message,
        and no stack trace. Messages and the trace are redacted: they may quote a secret.
    """
    if error is None:
        message = secrets.redact(reason).encode("utf-8")
        return [(ERROR_EXCEPTION, kind.encode("utf-8")), (ERROR_MESSAGE, message)]
    kind_of = type(error)
    module = kind_of.__module__
    name = kind_of.__qualname__ if module == "builtins" else f"{module}.{kind_of.__qualname__}"
    trace = "".join(traceback.format_exception(error))
    return [
        (ERROR_EXCEPTION, name.encode("utf-8")),
        (ERROR_MESSAGE, secrets.redact(str(error)).encode("utf-8")),
        (ERROR_STACKTRACE, secrets.redact(trace).encode("utf-8")),
    ]


def dead_letter_headers(
    original: bytes | None, kind: str, reason: str, error: BaseException | None = None
) -> bytes:
    """A dead letter's packed headers: its record's (``original``, packed), then why."""
    return marshal.dumps((*unpack(original), *error_headers(kind, reason, error)))
