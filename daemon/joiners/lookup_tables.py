"""``lookup`` as pipelines name it: one table, or several chained (``tables``).

A pipeline of one table (``[pipeline.inputs.table]``) gets :class:`~daemon.joiners.lookup.Lookup`
as before. With ``[[pipeline.options.tables]]``, each entry names a table's input and its
``lookup_key``, with that table's own options; :class:`LookupOfTables` orders them into
stages (:func:`~daemon.joiners.lookup_chain.plan_chain`) and gives the engine their chain
(:class:`~daemon.joiners.lookup_chain.LookupChain`). docs/semantics.md, "Several tables",
has the user's view.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import Field, model_validator

from daemon.joiners.aggregate import totals_value
from daemon.joiners.lookup import Lookup, LookupOptions, VersionedState
from daemon.joiners.lookup_chain import ChainTable, LookupChain, plan_chain
from daemon.plugin import (
    ConfigError,
    DeadLetter,
    Emit,
    InputRecord,
    JoinerContext,
    OutputValue,
    Register,
    Written,
    hookimpl,
)

SEVERAL_TABLES = """
    Several tables (``[[pipeline.options.tables]]``): one stream enriched from any number of
    tables in one pipeline, with no intermediate topic. Each entry names a table's ``input``
    (``[pipeline.inputs.NAME]``, its rows keyed by that input's ``key``), its ``lookup_key``
    (a dotted path into the stream's field or an earlier table's field, such as
    ``"order.customer_id"`` or ``"customer.region_id"``; a list for a composite key) and that
    table's options (``mode``, ``default``, ``versioned``, ``history_retention``,
    ``revisions``, ...). The inputs are then ``stream`` and the tables' inputs, and the
    stream's ``key`` is its key in the first table. Tables are applied in an order where each
    comes after the tables its key reads; a key that reads an unknown field, or tables that
    read each other in a cycle, are refused. Each table runs as one stage of a chain in one
    streaming query, grouped by its own key: a stage adds its table's answer under the table's
    field and passes the record on. With ``revisions`` on any table, a late row of any table
    revises exactly the outputs it changes, once each (numbered by ``revision``), and the last
    answer per stream record is the as-of join of all tables. ``aggregate`` is the whole
    lookup's (beside ``tables``, not in an entry), its paths into the output record
    (``"region.name"``): its running totals follow the revisions as with one table, each
    stream record counting once, in the group of its latest answer. Tables with
    ``bootstrap = true`` are read to their ends together, before any stream record, when a
    query starts without a checkpoint. ``grace`` and ``state_ttl`` mean what they mean with
    one table, at the table's own stage: an order is held at a table with a grace until its
    key there (the value at the table's ``lookup_key``) has reached the order's time plus the
    grace, is quiet for ``idle_timeout`` or its input ends, and then goes on to the next
    table; a row of a table with a ``state_ttl`` that has not changed for that long is
    forgotten, a tombstone to later orders at that stage (what the key holds for a grace goes
    on first, its kept answers are revised no more).
"""
"""What ``tables`` adds to :meth:`LookupOfTables.semantics` (``daemon plugins describe``)."""


class LookupTable(LookupOptions):
    """One entry of ``tables``: a table of a lookup of several, with its own options.

    ``input`` names the table's ``[pipeline.inputs.NAME]`` (its rows are keyed by that
    input's ``key``); ``lookup_key`` where a stream record's key in the table comes from: a
    dotted path whose first part is the stream's field or an earlier table's field
    (``"order.customer_id"``, ``"customer.region_id"``), or a list of them for a composite key.
    """

    input: str = Field(description="the table's input role")
    lookup_key: str | list[str] = Field(
        description="a path into the stream's or an earlier table's field, or a list of them"
    )

    @model_validator(mode="after")
    def _a_table_is_one_table(self) -> LookupTable:
        if self.aggregate is not None:
            raise ValueError("a table of `tables` takes no `aggregate`: totals are the lookup's")
        paths = [self.lookup_key] if isinstance(self.lookup_key, str) else self.lookup_key
        if not paths or any(not path for path in paths):
            raise ValueError("`lookup_key` needs a path, or a list of them")
        return self

    def one_table(self) -> LookupOptions:
        """The table's options as a one-table lookup's (its stage runs as one)."""
        given = self.model_dump(exclude_unset=True, exclude={"input", "lookup_key"})
        return LookupOptions.model_validate(given)


class LookupOfTablesOptions(LookupOptions):
    """Options of ``lookup``: a one-table lookup's, and ``tables`` for several."""

    tables: list[LookupTable] | None = Field(
        default=None,
        description=(
            "several tables: each entry names a table's `input` and its `lookup_key` (a path "
            "into the stream's or an earlier table's field, or a list of them) and takes the "
            "table options above"
        ),
    )

    @model_validator(mode="after")
    def _tables_own_their_options(self) -> LookupOfTablesOptions:
        if self.tables is None:
            return self
        if not self.tables:
            raise ValueError("`tables` needs at least one table")
        shared = sorted(self.model_fields_set - {"tables", "aggregate"})
        if shared:
            raise ValueError(
                f"with `tables`, `{shared[0]}` is each table's option: set it in its "
                "[[pipeline.options.tables]] entry"
            )
        inputs = [table.input for table in self.tables]
        twice = sorted({name for name in inputs if inputs.count(name) > 1})
        if twice:
            raise ValueError(f"`tables` names input {twice[0]!r} twice")
        if "stream" in inputs:
            raise ValueError("`tables`: input 'stream' is the stream, not a table")
        return self


class LookupOfTables(Lookup):
    """``lookup`` as pipelines name it: one table, or with ``tables`` several, chained.

    With one table (``[pipeline.inputs.table]``) it is :class:`~daemon.joiners.lookup.Lookup`.
    With ``tables``, the inputs are ``stream`` and each table's ``input``; the tables are
    ordered so that each comes after the tables its ``lookup_key`` reads (:func:`plan_chain`
    refuses unknown fields and cycles), and the engine runs them as the stages of
    :meth:`chain` (docs/semantics.md, "Several tables").
    """

    Options = LookupOfTablesOptions
    options: LookupOfTablesOptions

    def __init__(self, options: LookupOfTablesOptions, context: JoinerContext) -> None:
        super().__init__(options, context)
        self.tables: list[ChainTable] | None = None
        """With ``tables``: the tables in stage order."""
        if not options.tables:
            return
        self.order = "arrival"  # a chain applies in arrival order at every stage
        self.roles = ("stream", *(table.input for table in options.tables))  # type: ignore[misc,assignment]
        self.keyed_tombstones = frozenset(t.input for t in options.tables)  # type: ignore[misc]
        try:
            self.tables = plan_chain(
                context.fields.get("stream", "stream"),
                [_chained(t, context) for t in options.tables],
            )
        except ConfigError as exc:
            raise ConfigError(f"pipeline {context.pipeline!r}: options.tables: {exc}") from None
        fields = context.output_fields
        if any(t.options.revisions for t in self.tables) and fields and "revision" not in fields:
            raise ConfigError(
                f"pipeline {context.pipeline!r}: revisions = true numbers each answer in a "
                "`revision` field; add an int field `revision` to the output schema"
            )

    def process(
        self,
        key: str,
        state: dict[str, Any] | VersionedState,
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """One table's lookup; with ``tables`` the engine runs :meth:`chain`'s stages instead."""
        if self.tables is not None:
            raise ConfigError(
                "a lookup of several tables runs as the stages of its chain, not as one joiner"
            )
        return super().process(key, state, records, ctx)

    @classmethod
    def semantics(cls) -> str:
        """The one-table lookup's semantics, then what ``tables`` adds."""
        return f"{inspect.cleandoc(Lookup.semantics())}\n\n{inspect.cleandoc(SEVERAL_TABLES)}"

    @classmethod
    def roles_for(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        """``stream`` and ``table``; with ``tables``, ``stream`` and each table's input."""
        tables = options.get("tables")
        if isinstance(tables, list) and tables:
            named = [t.get("input") for t in tables if isinstance(t, Mapping)]
            return ("stream", *(name for name in named if isinstance(name, str)))
        return cls.roles

    def chain(self) -> LookupChain | None:
        """With ``tables``: the stages, in order, and the numbering with revisions."""
        if self.tables is None:
            return None
        inputs = {role: index for index, role in enumerate(self.roles)}
        return LookupChain(
            self.context.fields["stream"],
            self.tables,
            inputs,
            self.context.pipeline,
            headers_from=self.context.headers_from,
            retractions=self.options.aggregate is not None,
        )

    def retracts(self) -> bool:
        """With ``tables``: a revision of any table replaces an answer written."""
        if self.tables is None:
            return super().retracts()
        return any(table.options.revisions for table in self.tables)

    def bootstrap_roles(self) -> frozenset[str]:
        """Each table with ``bootstrap = true``, read to its end at start."""
        if self.tables is None:
            return super().bootstrap_roles()
        return frozenset(table.role for table in self.tables if table.options.bootstrap)

    def wakes_up(self) -> bool:
        """A table with a ``grace`` holds records back: then quiet keys are woken."""
        if self.tables is None:
            return super().wakes_up()
        return any(t.options.versioned and t.options.grace > 0 for t in self.tables)

    def state_ttl_ms(self) -> int | None:
        """The tables' shortest ``state_ttl``, if any has one."""
        if self.tables is None:
            return super().state_ttl_ms()
        ttls = [t.options.state_ttl for t in self.tables if t.options.state_ttl]
        return min(ttls) if ttls else None

    def writes(self) -> list[OutputValue]:
        """The stream record and each table's answer; ``revision`` when asked for."""
        if self.tables is None:
            return super().writes()
        written = [Written.record(self.context.fields["stream"], "stream", "the stream record")]
        for table in self.tables:
            options = table.options
            answer = f"the {table.role} row joined by {', '.join(table.paths)}"
            if options.mode == "left":
                answer += "; `default` or null without one" if options.default else "; or null"
            written.append(
                Written.record(
                    table.field,
                    table.role,
                    answer,
                    nullable=options.mode == "left" and options.default is None,
                )
            )
        if any(table.options.revisions for table in self.tables):
            written.append(
                Written.typed("revision", "int", "0 for the first answer, then 1, 2, ...")
            )
        values = [
            OutputValue(
                written,
                key="the stream record's Kafka key",
                tombstones="with revisions: an inner answer a late row withdrew",
                key_role="stream",
            )
        ]
        if self.options.aggregate is not None:
            values.append(totals_value(self.options.aggregate))
        return values


def _chained(table: LookupTable, context: JoinerContext) -> ChainTable:
    """A ``tables`` entry as a table of the chain: its field is its input's."""
    key = table.lookup_key
    return ChainTable(
        table.input,
        context.fields.get(table.input, table.input),
        key if isinstance(key, str) else tuple(key),
        table.one_table(),
    )


@hookimpl
def enrichd_register_joiners(register: Register) -> None:
    """Register the built-in ``lookup`` joiner."""
    register(LookupOfTables)
