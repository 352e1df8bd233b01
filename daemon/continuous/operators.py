"""The operators a lease runs in each sub-batch: a joiner's one, or a chain's, one after another.

A micro-batch query runs a chain's operators (a lookup of several tables, one per table and
the numbering: :mod:`daemon.operator.chain_processor`) as chained ``transformWithState``
operators, with Spark's shuffle between them. A lease joins every state bucket of its
pipeline (a chain runs in one lease), so its task hands each operator's packs to the next in
the worker, by bucket, as the shuffle would: each operator's calls come in bucket order, its
due buckets' after them, and the last operator writes. Each operator holds its own buckets
for the long batch (:class:`~daemon.continuous.held_buckets.HeldBuckets`).

With every operator's buckets in the worker, a partial need not wait for the next operator's
call: where its key there only reads a state that none of the sub-batch's rows change, the
next operator answers it at once, and the last writes it
(:meth:`~daemon.operator.chain_processor.ChainProcessor.read_on`). Which keys the sub-batch
changes at each operator is known before the first call: the keys of its table's rows among
the packs (each operator gets the rows of its table from the earlier ones unchanged).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import Row as SparkRow

from daemon.continuous.held_buckets import HeldBuckets, Key
from daemon.model.wire import CONTROL_INPUT, unpack
from daemon.operator.chain_processor import ChainProcessor
from daemon.operator.chain_step import operator_id, timer_label, timer_place
from daemon.operator.processor import JoinerProcessor
from daemon.sink.task_output import TaskOutput


class LeaseOperators:
    """A lease's operators in query order, each made ready with its held buckets.

    Args:
        processors: the operators, in query order: one, or a chain's
            (:class:`ChainProcessor`), the last of which writes.
        buckets: each operator's held buckets, in the same order.
    """

    def __init__(
        self, processors: Sequence[JoinerProcessor], buckets: Sequence[HeldBuckets]
    ) -> None:
        if len(processors) != len(buckets) or not processors:
            raise ValueError("one held buckets per operator, and an operator at least")
        self.processors = tuple(processors)
        self.buckets = tuple(buckets)
        for processor, held in zip(self.processors, self.buckets, strict=True):
            processor.ready(held)
        self._chain = [p for p in self.processors if isinstance(p, ChainProcessor)]
        for this, after in zip(self._chain, self._chain[1:], strict=False):
            this.onward = after
        self._reads_on = any(operator.reads_state for operator in self._chain[1:])
        """Whether a later operator may answer at once (else nothing looks for moving keys)."""

    @property
    def answered_input(self) -> int | None:
        """The input a chain's first operator answers from its tables' state, if it can.

        The stream's place among the source's inputs; None for one joiner's operator.
        """
        first = self._chain[0] if self._chain else None
        return first.step.stream_input if first is not None and first.reads_state else None

    @property
    def held_bytes(self) -> int:
        """About how many bytes the operators' held buckets take."""
        return sum(held.held_bytes for held in self.buckets)

    def due(self, now: int) -> bool:
        """Whether a bucket of any operator is due at ``now``."""
        return any(held.due(now) for held in self.buckets)

    def write_to(self, output: TaskOutput) -> None:
        """The writing operator writes the coming calls' rows through ``output``."""
        self.processors[-1].write_to(output)

    def sub_batch(self, packs: dict[int, list[Any]], now: int) -> None:
        """A sub-batch's calls at processing time ``now``, ``packs`` by the first's buckets."""
        *before, writer = self.processors
        if self._reads_on:
            moving = _moving_keys(packs, self._chain[0].step.stream_input)
            for operator in self._chain:
                table = operator.step.table_input
                own = set() if table is None or moving is None else moving.get(table, set())
                operator.settle(None if moving is None else own)
        for processor, held in zip(before, self.buckets, strict=False):
            assert isinstance(processor, ChainProcessor)  # noqa: S101 - only a chain has several
            handed: dict[int, list[SparkRow]] = defaultdict(list)
            for bucket in sorted(packs):
                _take(handed, processor.hand_on((bucket,), iter(packs[bucket]), now))
            for key in held.due(now):
                _take(handed, processor.hand_on_woken(key, now))
            packs = handed
        for bucket in sorted(packs):
            writer.apply((bucket,), iter(packs[bucket]), now)
        for key in self.buckets[-1].due(now):
            writer.wake(key, now)

    def counts(self) -> list[SparkRow]:
        """The counts rows of the calls since the last ones: the writing operator's.

        They take in the earlier operators' counts, which come with what they hand on.
        """
        return self.processors[-1].counts()

    def changed(self) -> Iterator[tuple[int, Key, bytes | None]]:
        """Each bucket the long batch changed: its operator's id, key and blob (None: empty).

        Numbered as Spark numbers a query's (:func:`~daemon.operator.chain_step.operator_id`).
        """
        count = len(self.buckets)
        for place, held in enumerate(self.buckets):
            for key, blob in held.changed():
                yield operator_id(place, count), key, blob

    def timers(self) -> dict[int, int]:
        """Each held bucket's timer, under the label a chain's reports give it.

        :func:`~daemon.operator.chain_step.timer_label`: a bucket's own for one operator.
        """
        count = len(self.buckets)
        found: dict[int, int] = {}
        for place, held in enumerate(self.buckets):
            for bucket, at in held.timers().items():
                found[timer_label(place, count, bucket)] = at
        return dict(sorted(found.items()))


def timers_by_operator(timers: dict[int, int], operators: int) -> list[dict[int, int]]:
    """:meth:`LeaseOperators.timers` split again: each operator's, by its buckets' labels."""
    split: list[dict[int, int]] = [{} for _ in range(operators)]
    for label, at in timers.items():
        place, bucket = timer_place(label, operators)
        split[place][bucket] = at
    return split


def _moving_keys(packs: dict[int, list[Any]], stream: int) -> dict[int, set[str]] | None:
    """The keys of each table's rows among a sub-batch's packs, by input; None: an end of input.

    The stream's rows change no table's state; an end-of-input marker ends keys at every
    operator.
    """
    moving: dict[int, set[str]] = defaultdict(set)
    for its_packs in packs.values():
        for pack in its_packs:
            records = unpack(pack.records)
            inputs = records.column("input")
            others = pc.not_equal(inputs, stream)
            if not pc.any(others).as_py():
                continue
            tables = pc.filter(inputs, others).to_pylist()
            if CONTROL_INPUT in tables:
                return None
            keys = pc.filter(records.column("key"), others).to_pylist()
            for table, key in zip(tables, keys, strict=True):
                moving[table].add(key)
    return moving


def _take(handed: dict[int, list[SparkRow]], packs: Iterator[SparkRow]) -> None:
    for pack in packs:
        handed[pack.bucket].append(pack)
