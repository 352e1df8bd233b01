"""A pipeline's ``select``: the output record's fields, each named from the joiner's value.

How it works: without a ``select`` a joiner's output value is written as it is (one field
per input's record, plus ``id``, ``revision``, ...: docs/semantics.md). A ``[pipeline.select]``
table instead names each field of the output record and where it comes from:

- a path into the joiner's value, ``"customer.name"`` (a field of a nested record: renamed
  and flattened at once), or a whole record, ``"customer"``;
- ``"kafka_key"`` or ``"kafka_key.FIELD"``: the output's Kafka key, as its input's
  ``key_format`` reads it; ``"timestamp"``: the output's Kafka timestamp;
- ``{ path = "...", default = ... }``: the same, with a value where the path finds null (a
  left join's missing side);
- ``{ value = ... }``: a constant;
- ``"PREFIX*" = "PATH.*"``: every field of the record at PATH, each named PREFIX and its
  own name (``"*" = "order.*"`` keeps the names; ``"*" = "*"`` every field of the value).

:class:`SelectField` is an entry as the file gives it; :class:`Pick` one output field as the
plan resolved it (spreads expanded, paths split); :func:`compile_select` makes the picks one
generated function, called once per output record: no interpretation of paths per record,
each shared prefix walked once.

Example:
    >>> picks = [Pick("order_id", "value", ("order", "id")),
    ...          Pick("name", "value", ("customer", "name"), default="?", has_default=True),
    ...          Pick("channel", "constant", constant="web")]
    >>> shape = compile_select(picks)
    >>> shape({"order": {"id": "o-1"}, "customer": None}, b"o-1", 5)
    {'order_id': 'o-1', 'name': '?', 'channel': 'web'}
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from daemon.model.keys import KAFKA_KEY

TIMESTAMP: Final = "timestamp"
"""A path spelled so is the output record's Kafka timestamp (epoch milliseconds)."""
SPREAD: Final = "*"
"""In an entry's name, where each spread field's name goes; ending its path, every field."""

Source = Literal["value", "kafka_key", "timestamp", "constant"]
"""Where a :class:`Pick` takes its field from."""

Shape = Callable[[dict[str, Any], "str | bytes | None", "int | None"], dict[str, Any]]
"""A compiled select: the joiner's value, the output's Kafka key as the joiner gave it and its
Kafka timestamp (None: the time of writing) in, the output record out."""


class SelectField(BaseModel):
    """One entry of ``[pipeline.select]``: ``{ path = ..., default = ... }`` or ``{ value = ... }``.

    A plain string entry is its ``path``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = None
    default: Any = None
    value: Any = None

    @model_validator(mode="after")
    def _one_source(self) -> SelectField:
        given = self.model_fields_set
        if ("path" in given) == ("value" in given):
            raise ValueError(
                'give a path ("customer.name" or { path = ..., default = ... }) or a constant '
                "({ value = ... })"
            )
        if "value" in given and "default" in given:
            raise ValueError("a constant has no default: give `value` alone")
        if self.path is not None and (not self.path or "" in self.path.split(".")):
            raise ValueError(f"{self.path!r} is not a path: names joined by dots")
        return self

    @property
    def has_default(self) -> bool:
        """Whether the entry gives a ``default``."""
        return "default" in self.model_fields_set


def select_entries(raw: Any) -> dict[str, Any]:
    """``[pipeline.select]`` as the file gives it, with each string entry as its ``path``.

    Raises:
        ValueError: not a table, or an entry that is neither a string nor a table, or a
            spread whose name and path do not match (one ``*`` in each, the path's last).
    """
    if not isinstance(raw, dict) or not raw:
        raise ValueError("a table of output fields, each from a path or a constant")
    entries: dict[str, Any] = {}
    for name, entry in raw.items():
        spec = {"path": entry} if isinstance(entry, str) else entry
        if not isinstance(spec, dict):
            raise ValueError(
                f"{name}: {entry!r} is neither a path nor a table ({{ path = ..., default = ... "
                "}} or { value = ... })"
            )
        path = spec.get("path")
        if SPREAD in name or (isinstance(path, str) and SPREAD in path):
            spread = (
                name.count(SPREAD) == 1
                and isinstance(path, str)
                and path.count(SPREAD) == 1
                and (path == SPREAD or path.endswith("." + SPREAD))
                and set(spec) == {"path"}
            )
            if not spread:
                raise ValueError(
                    f'{name}: a spread names its fields with one * ("customer_*") and takes '
                    'them from "PATH.*", without a default; other names and paths hold no *'
                )
        entries[name] = spec
    return entries


@dataclass(frozen=True)
class Pick:
    """One output field of a select, resolved: where it comes from, and its fallback.

    Attributes:
        name: the output field's name.
        source: the joiner's value (``steps`` a path into it), the output's Kafka key (read
            in its input's key format; ``steps`` a path into it), its Kafka timestamp, or a
            ``constant``.
        steps: the path's names.
        default: the value where the path finds null, if ``has_default``.
        constant: a constant's value.
    """

    name: str
    source: Source
    steps: tuple[str, ...] = ()
    default: Any = None
    has_default: bool = False
    constant: Any = None

    @classmethod
    def of(cls, name: str, path: str, *, default: Any = None, has_default: bool = False) -> Pick:
        """The pick of a path as a select entry spells it (``kafka_key.id``, ``timestamp``)."""
        head, *rest = path.split(".")
        source: Source = "value"
        if head == KAFKA_KEY:
            source = "kafka_key"
        elif head == TIMESTAMP and not rest:
            source = "timestamp"
        steps = tuple(rest) if source != "value" else (head, *rest)
        return cls(name, source, steps, default, has_default)


@dataclass
class SelectFunction:
    """A select as one generated function (:func:`compile_select`); picklable.

    Pickled with the operator's plan, it travels as its picks and is compiled again where it
    runs (a generated function does not pickle).

    Attributes:
        picks: the output fields, in order.
        read_key: reads the output's Kafka key bytes as its input's ``key_format`` does, when
            they are an input record's Kafka key (``lookup``: the stream record's); None: a
            key the joiner made, text.
    """

    picks: Sequence[Pick]
    read_key: Callable[[bytes], Any] | None = None
    _shape: Shape | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def shape(self) -> Shape:
        """The compiled function (made on first use)."""
        if self._shape is None:
            self._shape = compile_select(self.picks, self.read_key)
        return self._shape

    def __getstate__(self) -> dict[str, Any]:
        """The picks and key reader, without the compiled function."""
        return {"picks": self.picks, "read_key": self.read_key, "_shape": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Back from :meth:`__getstate__`."""
        self.__dict__.update(state)


def compile_select(
    picks: Sequence[Pick], read_key: Callable[[bytes], Any] | None = None
) -> Shape:
    """The picks as one Python function (see :data:`Shape`).

    Each prefix of a path is read once, and a null along it makes the field null (or its
    default): a ``left`` join's missing side flattens to nulls. A step into something that is
    not a record raises, which the operator turns into an ``UnencodableOutput`` dead letter.
    """
    names: dict[Any, str] = {}
    constants: dict[str, Any] = {"read_key": read_key, "now_ms": _now_ms}
    lines: list[str] = []

    def reach(source: Source, steps: tuple[str, ...]) -> str:
        if not steps:
            return {"value": "value", "kafka_key": "key_value", "timestamp": "stamp"}[source]
        found = names.get((source, steps))
        if found is not None:
            return found
        parent = reach(source, steps[:-1])
        name = names[(source, steps)] = f"v{len(names)}"
        if parent == "value":  # the joiner's value itself is never null: a tombstone has none
            lines.append(f"{name} = value.get({steps[-1]!r})")
        else:
            lines.append(f"{name} = None if {parent} is None else {parent}.get({steps[-1]!r})")
        return name

    if any(pick.source == "kafka_key" for pick in picks):
        lines.append(
            "key_value = key.decode('utf-8') if isinstance(key, bytes) else key"
            if read_key is None
            else "key_value = read_key(key) if isinstance(key, bytes) else key"
        )
    if any(pick.source == "timestamp" for pick in picks):
        lines.append("stamp = now_ms() if timestamp is None else timestamp")
    fields = []
    for index, pick in enumerate(picks):
        if pick.source == "constant":
            constants[f"c{index}"] = pick.constant
            expression = f"c{index}"
        else:
            expression = reach(pick.source, pick.steps)
            if pick.has_default:
                constants[f"d{index}"] = pick.default
                expression = f"d{index} if {expression} is None else {expression}"
        fields.append(f"{pick.name!r}: {expression}")
    lines.append("return {" + ", ".join(fields) + "}")
    source = "def select(value, key, timestamp):\n" + "\n".join(f"    {line}" for line in lines)
    namespace = dict(constants)
    exec(compile(source, "<enrichd select>", "exec"), namespace)  # noqa: S102 - our own text
    shape: Shape = namespace["select"]
    return shape


def _now_ms() -> int:
    """The time of writing, for an output that no input record timed (a wake-up's)."""
    return time.time_ns() // 1_000_000
