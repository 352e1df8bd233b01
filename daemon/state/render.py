"""A joiner's state as JSON: what ``daemon state --key`` prints.

A joiner keeps any picklable Python object per key; this turns the usual ones into JSON:
mappings (a :class:`~daemon.plugin.stash.Stash` too, its values read from the bucket's
log), sequences and sets, dataclasses (input records, the joiner's own state classes) as
their fields, bytes as text (or base64 when they are not UTF-8), dates as ISO 8601. Anything
else shows as its ``repr``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import math
from collections.abc import Mapping
from typing import Any


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data (see the module docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _bytes(bytes(value))
    if isinstance(value, Mapping):
        return {_key(key): to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((to_json(item) for item in value), key=repr)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: to_json(getattr(value, field.name)) for field in dataclasses.fields(value)
        }
    if hasattr(value, "__dict__"):
        return {_key(key): to_json(item) for key, item in vars(value).items()}
    return repr(value)


def _key(key: Any) -> str:
    return key if isinstance(key, str) else str(to_json(key))


def _bytes(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode("ascii")


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as an ISO 8601 UTC time; None for None, digits past year 9999."""
    if ms is None:
        return None
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
