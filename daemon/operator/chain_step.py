"""Which operator of a chain one is, and the numbers that tell a chain's operators apart.

A chain (:mod:`daemon.operator.chain_processor`) runs as several stateful operators in one
query. Each knows its place (:class:`ChainStep`); its timers are labelled apart from the
others' in the due-time map (:func:`timer_label`), and Spark numbers its state
(:func:`operator_id`), so that the commands that read or seed state find each operator's.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.plugin.joiner import Chain

TIMER_LABEL_BITS = 32
"""How far above a bucket's own label an earlier operator's timer label puts its place."""


@dataclass(frozen=True)
class ChainStep:
    """Which operator of a chain a processor is, and what it needs to route.

    Attributes:
        chain: the joiner's chain.
        index: the operator's place: ``0 .. len(stages) - 1`` a stage, ``len(stages)`` the
            chain's last joiner.
        buckets: the pipeline's ``state_buckets``, by which each operator groups.
        stream_input: the stream's place among the source's inputs.
        table_input: this stage's table's place among them (None: the last joiner).
    """

    chain: Chain
    index: int
    buckets: int
    stream_input: int
    table_input: int | None

    @property
    def stages(self) -> int:
        """How many stages the chain has."""
        return len(self.chain.stages)

    @property
    def writes(self) -> bool:
        """Whether this operator writes to Kafka: the last one of the query."""
        return self.index == self.stages - (self.chain.last is None)

    @property
    def last_joiner(self) -> bool:
        """Whether this operator runs the chain's last joiner, not a stage."""
        return self.index == self.stages

    def timer_label(self, bucket: int) -> int:
        """Bucket ``bucket``'s label in the due-time map (:func:`timer_label`)."""
        return timer_label(self.index, self.stages + (self.chain.last is not None), bucket)


def timer_label(place: int, operators: int, bucket: int) -> int:
    """Bucket ``bucket``'s label in the due-time map: apart for each operator of a chain.

    ``place``: the operator's place in query order, of ``operators``. The writing operator's
    (the last) are its buckets' own labels (small numbers, see
    :func:`~daemon.model.record_route.bucket_labels`); an earlier operator's are its buckets'
    with the operator's place above them (the first's bucket 3: ``2**32 + 3``), so no two
    operators' timers share one. A seed's timers are labelled so too
    (:func:`daemon.pipeline.reset.apply`), so that each operator's reports replace them.
    """
    if place == operators - 1:
        return bucket
    return ((place + 1) << TIMER_LABEL_BITS) + bucket


def timer_place(label: int, operators: int) -> tuple[int, int]:
    """The operator's place and the bucket of a :func:`timer_label` of ``operators``."""
    place = label >> TIMER_LABEL_BITS
    if place == 0:
        return operators - 1, label
    return place - 1, label - (place << TIMER_LABEL_BITS)


def operator_id(place: int, operators: int) -> int:
    """Spark's id of the stateful operator at ``place`` (query order) of ``operators``.

    Spark numbers a query's stateful operators as it plans them, from the sink back: the last
    one in data-flow order is 0 (seen in a chain of ``transformWithState`` operators).
    """
    return operators - 1 - place
