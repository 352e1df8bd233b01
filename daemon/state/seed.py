"""A new checkpoint's seed: where its query starts reading, and the state it starts with.

``daemon reset`` and ``daemon rescale`` do not edit Spark's checkpoint files: they move the
old checkpoint's contents aside and leave a seed in the folder, ``enrichd-seed/``
(:func:`~daemon.checkpoint.layout.seed_folder`):

- ``offsets.json``: ``{"offsets": {"topic/partition": offset}, "made_by": ..., "made_at":
  ...}``, where each input partition starts. The source's :meth:`initialOffset` (which Spark
  asks only of a query without a checkpoint) starts there instead of at the earliest offsets,
  checking them as it checks any batch's start (``on_missing_offsets``). Beside them,
  ``"topic_ids"``, the ids of the topics the offsets are of, when the broker gives ids (a
  topic created again before the start is then told by its id), and ``"to": "earliest"`` for
  a reset to the earliest offsets, which start at the earliest offsets there are at start:
  records removed meanwhile are no loss to such a reset.
- ``state/`` (only when state is kept): Parquet files of one row per state bucket,
  :data:`SEED_SCHEMA`, each key's entry portable
  (:func:`~daemon.operator.state_format.encode_portable`). The query hands them to
  ``transformWithState`` as its initial state, which Spark applies in the new checkpoint's
  first micro-batch only (the processor's ``handleInitialState``): this is Spark's own way
  to start a stateful query from existing state, and the state is written to the state
  store by Spark as any other. A query of several stateful operators (a chain: a lookup of
  several tables) has one such folder per operator, ``state/`` for Spark's operator 0 and
  ``state.N/`` for operator N (:func:`~daemon.checkpoint.layout.seed_state`): each
  operator's ``transformWithState`` takes its own (:meth:`Seed.of_operator`).

With state, the new checkpoint also gets its due-time map (:mod:`daemon.checkpoint.due_times`):
each bucket's timer is its earliest due key, as ``handleInitialState`` registers it (a
chain's operators each under their own labels, as their reports label them:
:func:`daemon.operator.chain_step.timer_label`), so the query's clock wakes the seeded
keys when they are due and runs no batch before.

Once a micro-batch has committed in the new checkpoint, the seed has done its work (Spark
keeps the offsets and the state from then on) and :func:`discard_if_applied` removes it.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.checkpoint.batch_logs import last_committed
from daemon.checkpoint.layout import SEED_OFFSETS, seed_folder, seed_state
from daemon.model.wire import TOPIC_IDS, Offsets
from daemon.operator.state_format import portable_due
from daemon.private_paths import private_folder, write_private_text
from daemon.state.render import iso_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, GroupedData, SparkSession

SEED_SCHEMA = "bucket int, keys array<struct<key: string, entry: binary>>"
"""A seed's state: a row per bucket, with every key moved into it and its portable entry."""


@dataclass(frozen=True)
class Seed:
    """The seed of a checkpoint that has not run a micro-batch since it was made."""

    folder: Path
    offsets: dict[str, int]
    topic_ids: dict[str, str] = field(default_factory=dict)
    """The ids of the topics ``offsets`` are of, as the broker gave them (none: no ids)."""
    to_earliest: bool = False
    """Made by a reset to the earliest offsets: it starts at the earliest offsets at start."""
    operator: int = 0
    """Which stateful operator's state it reads (Spark's numbering; see :meth:`of_operator`)."""

    @property
    def start(self) -> Offsets | None:
        """Where the query starts (``SourceSpec.start``); None: the earliest offsets."""
        if self.to_earliest:
            return None
        return {**self.offsets, **({TOPIC_IDS: self.topic_ids} if self.topic_ids else {})}

    def of_operator(self, operator: int) -> Seed:
        """The seed as stateful operator ``operator`` of the query takes it in.

        Numbered as Spark numbers them (:func:`daemon.state.reader.operator_ids`): 0 is a
        one-joiner query's only operator, and a chain's last.
        """
        return replace(self, operator=operator)

    @property
    def state_folder(self) -> Path:
        """Where the seed's state of its :attr:`operator` is (Parquet), if it has any."""
        return self.folder / seed_state(self.operator)

    @property
    def has_state(self) -> bool:
        """Whether the seed holds state for its operator (``reset --keep-state``, rescale)."""
        return self.state_folder.is_dir()

    def state_frame(self, spark: SparkSession) -> DataFrame:
        """The seed's state: :data:`SEED_SCHEMA` rows."""
        return spark.read.schema(SEED_SCHEMA).parquet(str(self.state_folder))

    def initial_state(self, spark: SparkSession) -> GroupedData:
        """The seed's state grouped by bucket, as ``transformWithState`` takes it."""
        return self.state_frame(spark).groupBy("bucket")


def seed_of(checkpoint: Path) -> Seed | None:
    """The checkpoint's seed, if it has one that no micro-batch has applied yet."""
    folder = seed_folder(checkpoint)
    path = folder / SEED_OFFSETS
    if not path.exists() or last_committed(checkpoint) is not None:
        return None
    written = json.loads(path.read_text(encoding="utf-8"))
    return Seed(
        folder,
        {str(name): int(offset) for name, offset in written["offsets"].items()},
        {str(topic): str(id_) for topic, id_ in (written.get("topic_ids") or {}).items()},
        written.get("to") == "earliest",
    )


def write_seed(
    folder: Path,
    offsets: dict[str, int],
    made_by: str,
    *,
    topic_ids: dict[str, str] | None = None,
    to_earliest: bool = False,
) -> None:
    """Write a seed's offsets into ``folder`` (its state, if any, is written apart)."""
    private_folder(folder, what="seed")
    record: dict[str, Any] = {
        "offsets": dict(sorted(offsets.items())),
        "made_by": made_by,
        "made_at": iso_ms(time.time_ns() // 1_000_000),
    }
    if topic_ids:
        record["topic_ids"] = dict(sorted(topic_ids.items()))
    if to_earliest:
        record["to"] = "earliest"
    write_private_text(folder / SEED_OFFSETS, json.dumps(record, indent=2) + "\n")


def discard_if_applied(checkpoint: Path) -> None:
    """Remove the checkpoint's seed once a micro-batch committed: Spark holds it all now."""
    folder = seed_folder(checkpoint)
    if folder.exists() and last_committed(checkpoint) is not None:
        shutil.rmtree(folder, ignore_errors=True)


def seed_timers(state: DataFrame) -> dict[int, int]:
    """The timer each bucket of a seed's state (:data:`SEED_SCHEMA`) gets in its first batch.

    A bucket's earliest due key, as the processor's ``handleInitialState`` registers it; a
    bucket without a due key gets none. Found on executors: a bucket's keys may be many.
    """
    found = state.rdd.map(_bucket_timer).collect()
    return {bucket: ms for bucket, ms in found if ms is not None}


def _bucket_timer(row: Any) -> tuple[int, int | None]:
    dues = (portable_due(bytes(item["entry"])) for item in row["keys"])
    return int(row["bucket"]), min((due for due in dues if due is not None), default=None)
