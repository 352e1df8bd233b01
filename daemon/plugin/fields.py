"""What a joiner reads and writes, declared so that ``daemon validate`` can check a pipeline.

Both declarations are optional: a joiner that declares nothing runs as before, and validate
checks only what is declared.

Options that name a field: mark the option with :class:`FieldOf` in its annotation, naming
the role whose records hold the field. ``daemon validate`` then looks the option's value up
in that input's schema (a dotted path walks into nested records), and ``daemon plugins
describe`` says which input it names. A ``None`` value (an option left unset) is not checked.

The output value: :meth:`daemon.plugin.joiner.Joiner.writes` returns an :class:`OutputValue`
per output the joiner writes, each a list of :class:`Written` fields. ``daemon validate``
checks the output's schema against it: every written field is in the schema and can hold
what is written there, and every other field of the schema has a default (enrichd writes
records strictly, so a field nobody writes and without a default fails every record).
``daemon plugins describe`` shows the fields.

Example:
    An option naming a field of the left records, and an output of the left record, its id
    and a count::

        class MineOptions(JoinerOptions):
            left_id: Annotated[str, FieldOf("left")] = Field(default="id")

        class Mine(Joiner[MineOptions, dict[str, int]]):
            ...
            def writes(self) -> list[OutputValue]:
                left = self.context.fields["left"]
                return [
                    OutputValue(
                        [
                            Written.value_of("id", "left", self.options.left_id, "the left id"),
                            Written.record(left, "left", "the left record"),
                            Written.typed("n", "long", "left records of the key so far"),
                        ],
                        key="the left record's id",
                    )
                ]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

MAIN_OUTPUT: Final = "output"
"""The role :class:`FieldOf` and :meth:`Written.value_of` give to mean the joiner's main output
record (for options of a second stage that reads it, such as ``lookup``'s ``group_by``)."""

NUMBERS: Final = ("int", "long", "float", "double")
"""The Avro types of a number, for :attr:`FieldOf.types`."""


@dataclass(frozen=True)
class FieldOf:
    """Marks an option whose value names a field of ``role``'s records (in ``Annotated``).

    ``left_id: Annotated[str, FieldOf("left")] = Field(...)``; for an option that may be
    unset, ``Annotated[str | None, FieldOf("left")]``. ``types``: the Avro types the field
    may have (``("boolean",)``, :data:`NUMBERS`); empty: any.
    """

    role: str
    types: tuple[str, ...] = ()


@dataclass(frozen=True)
class Written:
    """One field of an output value: its name, what it holds, and whether it may be null.

    Make one with :meth:`record`, :meth:`value_of` or :meth:`typed`.

    Attributes:
        name: the field's name in the output record.
        doc: what it holds, in words (``daemon plugins describe`` shows it).
        role: it holds the records of this input (:meth:`record`) or a field of them
            (:meth:`value_of`, with ``path``).
        path: the dotted path of the field of ``role``'s records it holds.
        avro: the Avro type of what it holds (:meth:`typed`).
        nullable: it may be null.
        many: it holds a list of them (an Avro array).
    """

    name: str
    doc: str
    role: str | None = None
    path: str | None = None
    avro: Any = None
    nullable: bool = False
    many: bool = False

    @classmethod
    def record(
        cls, name: str, role: str, doc: str, *, nullable: bool = False, many: bool = False
    ) -> Written:
        """A field holding the records of input ``role`` as they were read (or a list of them)."""
        return cls(name, doc, role=role, nullable=nullable, many=many)

    @classmethod
    def value_of(
        cls, name: str, role: str, path: str, doc: str, *, nullable: bool = False
    ) -> Written:
        """A field holding the value of field ``path`` of input ``role``'s records."""
        return cls(name, doc, role=role, path=path, nullable=nullable)

    @classmethod
    def typed(cls, name: str, avro: Any, doc: str, *, nullable: bool = False) -> Written:
        """A field holding values of the Avro type ``avro`` (``"int"``, ``"long"``, ...)."""
        return cls(name, doc, avro=avro, nullable=nullable)

    def type_text(self) -> str:
        """What the field holds as a type, in words: ``one record``, ``long | null``, ..."""
        if self.avro is not None:
            text = self.avro if isinstance(self.avro, str) else "Avro " + str(self.avro)
        elif self.path is not None:
            text = f"{self.role} field {self.path!r}"
        else:
            text = f"{self.role} record"
        if self.many:
            text = f"list of {text}"
        return f"{text} | null" if self.nullable else text


@dataclass(frozen=True)
class OutputValue:
    """The value records one output of a joiner holds.

    Attributes:
        fields: every field the joiner writes, in order.
        output: the secondary output's name (``[pipeline.outputs.NAME]``); None: the main one.
        key: what the output's Kafka key is, in words.
        tombstones: when the joiner writes a null value (a tombstone) instead, in words.
        key_role: the input whose Kafka key, as it came, is the output's key (``lookup``:
            the stream's), so that a pipeline's ``select`` reads it in that input's
            ``key_format`` (``kafka_key.id``); None: a text the joiner makes.
    """

    fields: Sequence[Written]
    output: str | None = None
    key: str = ""
    tombstones: str = ""
    key_role: str | None = None
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "names", tuple(written.name for written in self.fields))


__all__ = ["MAIN_OUTPUT", "NUMBERS", "FieldOf", "OutputValue", "Written"]
