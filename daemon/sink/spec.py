"""Where and how a pipeline writes: the output's settings, made on the driver.

An :class:`OutputSpec` is pickled into the joiner operator, which writes the records
(:mod:`daemon.sink.task_output`), and into the Spark sink's options
(:mod:`daemon.sink.spark_sink`), which counts them; both work from it.
"""

from __future__ import annotations

import base64
import pickle  # noqa: S403 - only our own driver-made spec travels through it
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.model.constants import DEFAULT_ID_PREFIX

if TYPE_CHECKING:
    from daemon.model.config import (
        Delivery,  # pydantic's module: Spark's workers need not load it
    )


@dataclass(frozen=True)
class OutputSpec:
    """Where and how a pipeline writes; pickled into the operator and the sink's options."""

    pipeline: str
    client_conf: dict[str, str]
    delivery: Delivery
    marker_topic: str
    """The topic whose partition 0 carries the committed-batch markers (the output topic)."""
    metrics_address: str | None = None
    """The daemon's report socket (:mod:`daemon.report_socket`), or None: counts go
    nowhere."""
    dead_letter_topic: str | None = None
    """Where a record the client refuses goes
    (:data:`~daemon.sink.refusals.OUTPUT_REJECTED`); None: the refusal fails the task."""
    id_prefix: str = DEFAULT_ID_PREFIX
    """What the transactional ids and marker groups start with (``[kafka] id_prefix``)."""
    commit_turn: bool = True
    """Whether transactions on one machine end one at a time (:mod:`daemon.sink.commit_turn`;
    the pipeline's plan decides, by its cluster). Taking turns is never wrong, only slower."""
    checkpoint: str | None = None
    """The query's checkpoint folder, where the sink's commit keeps the buckets' due times
    for the planner's clock (:mod:`daemon.checkpoint.due_times`); None: a query without one."""

    def encode(self) -> str:
        """The spec as an option string."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> OutputSpec:
        """The spec back from :meth:`encode`."""
        return pickle.loads(base64.b64decode(text))  # type: ignore[no-any-return]  # noqa: S301
