"""The names of a checkpoint folder's files and folders, Spark's and enrichd's, in one place.

A pipeline's ``checkpoint`` folder holds what Spark writes for the pipeline's streaming query
and what enrichd keeps beside it. Every module that opens one of them asks here for its
path, so the whole folder reads on one page (each enrichd entry with the module of
``daemon`` that writes it):

.. code-block:: text

    <checkpoint>/
      metadata                Spark: the query's id              (metadata_file)
      offsets/N               Spark: micro-batch N as planned    (OFFSET_LOG)
      commits/N               Spark: micro-batch N done          (COMMIT_LOG)
      sources/                Spark: a source's first offsets, if it writes them (SOURCES)
      state/                  Spark: the operator's state store  (state_folder)
        OPERATOR/_metadata/     its metadata, per batch that changed it
        OPERATOR/_stateSchema/  its state variables' schemas
        OPERATOR/PARTITION/     RocksDB's N.zip, N.changelog, SSTs/, logs/ per partition
      enrichd.lock            one daemon at a time               (pipeline.lock)
      enrichd-pipeline.json   the pipeline's shape, state format,
                              and the enrichd and pyspark that made it
                                                                 (pipeline.checkpoint_shape)
      enrichd-due-times.json  when each bucket is next due       (checkpoint.due_times)
      enrichd-seed/           where a reset or rescale starts    (state.seed)
        offsets.json            each input partition's start
        state/                  the state it starts with, if kept (seed_state):
        state.N/                  Spark's operator 0's in state/, operator N's in state.N/
      enrichd-seed.new/       the seeds' state being written     (pipeline.reset)
      enrichd-restore.new/    a snapshot being restored          (pipeline.snapshot)
      downstream/OUTPUT/      a joiner's second stage: a checkpoint of this same layout
    <checkpoint>.before-reset-TIME/  beside it: what a reset, rescale or restore moved aside

    <snapshot>/               ``daemon snapshot``'s copy of what the last committed
      enrichd-snapshot.json   micro-batch needs (checkpoint.committed_files), and its
      ...                     manifest: every file's size and checksum (pipeline.snapshot)

Spark writes its entries and enrichd only reads them (a reset or rescale moves them aside
whole; a restore makes a copy name its own path and query: checkpoint.copied); enrichd's own
entries all start with ``enrichd``, but for ``downstream``.
"""

from __future__ import annotations

from pathlib import Path

# Spark's entries.
METADATA = "metadata"
"""The query's metadata: its id, which names the exactly-once markers' groups."""
OFFSET_LOG = "offsets"
"""Spark's offset log: an entry per micro-batch, written when it is planned."""
COMMIT_LOG = "commits"
"""Spark's commit log: an entry per micro-batch, written once it is done."""
STATE = "state"
"""Spark's state store: the operator's buckets, every version it keeps."""
SOURCES = "sources"
"""Spark's record of where each source began (sources of Spark's older API write one)."""
STATE_METADATA = "_metadata"
"""In an operator's state folder: the operator's metadata (its state variables, schemas)."""
STATE_SCHEMA = "_stateSchema"
"""In an operator's state folder: the schemas of its state variables."""

# enrichd's entries.
LOCK = "enrichd.lock"
"""The lock file ``daemon run``, ``daemon reset`` and ``daemon rescale`` hold."""
SHAPE = "enrichd-pipeline.json"
"""What the checkpoint was written by: the pipeline's shape."""
DUE_TIMES = "enrichd-due-times.json"
"""Each state bucket's next timer, for the planner's clock."""
STOPPING = "enrichd-stopping"
"""There while ``daemon run`` stops a continuous pipeline: its long batch ends early, and no
other is planned (:mod:`daemon.continuous`)."""
SEED = "enrichd-seed"
"""A new checkpoint's seed, left by ``daemon reset`` or ``daemon rescale``."""
SEED_OFFSETS = "offsets.json"
"""In a seed: where each input partition starts."""
SEED_STATE = "state"
"""In a seed (and in each stage's staging folder): the state it starts with, as Parquet; of
a query of several stateful operators, the state of Spark's operator 0 (:func:`seed_state`)."""
SEED_STAGING = "enrichd-seed.new"
"""Where a reset or rescale writes the new seeds' state before the old contents move."""
RESTORE_STAGING = "enrichd-restore.new"
"""Where ``daemon restore`` copies a snapshot before the old contents move."""
DOWNSTREAM = "downstream"
"""The folder of the checkpoints of a joiner's second stages, one per output."""

# A snapshot's entry.
MANIFEST = "enrichd-snapshot.json"
"""In a snapshot's folder: what it holds, each file's size and checksum."""


def metadata_file(checkpoint: str | Path) -> Path:
    """Spark's metadata file of the checkpoint's query."""
    return Path(checkpoint) / METADATA


def log_folder(checkpoint: str | Path, log: str) -> Path:
    """One of Spark's logs, :data:`OFFSET_LOG` or :data:`COMMIT_LOG`."""
    return Path(checkpoint) / log


def state_folder(checkpoint: str | Path) -> Path:
    """Spark's state store of the checkpoint's query."""
    return Path(checkpoint) / STATE


def lock_file(checkpoint: str | Path) -> Path:
    """The checkpoint's lock file."""
    return Path(checkpoint) / LOCK


def shape_file(checkpoint: str | Path) -> Path:
    """The file recording the shape of the pipeline that wrote the checkpoint."""
    return Path(checkpoint) / SHAPE


def stopping_file(checkpoint: str | Path) -> Path:
    """The file that asks a continuous pipeline's long batch to end (:data:`STOPPING`)."""
    return Path(checkpoint) / STOPPING


def due_times_file(checkpoint: str | Path) -> Path:
    """The file of the checkpoint's due-time map."""
    return Path(checkpoint) / DUE_TIMES


def seed_folder(checkpoint: str | Path) -> Path:
    """The checkpoint's seed folder (whether or not there is one)."""
    return Path(checkpoint) / SEED


def seed_state(operator: int = 0) -> str:
    """In a seed: the folder of the state of the query's stateful operator ``operator``.

    Numbered as Spark numbers a query's stateful operators (from the sink back, so a
    one-joiner query's only one is 0, as is a chain's last), so a seed of one operator is laid
    out as before there were chains: its state in :data:`SEED_STATE`.
    """
    return SEED_STATE if operator == 0 else f"{SEED_STATE}.{operator}"


def staging_folder(checkpoint: str | Path) -> Path:
    """Where a reset or rescale stages the new seeds' state inside the checkpoint."""
    return Path(checkpoint) / SEED_STAGING


def downstream(checkpoint: str | Path, output: str) -> Path:
    """The checkpoint of the joiner's second stage that writes ``output``."""
    return Path(checkpoint) / DOWNSTREAM / output


def restore_staging(checkpoint: str | Path) -> Path:
    """Where ``daemon restore`` copies a snapshot inside the checkpoint."""
    return Path(checkpoint) / RESTORE_STAGING


def stage_checkpoints(checkpoint: str | Path) -> list[Path]:
    """The checkpoint and those of its second stages (``downstream/OUTPUT``) that are there."""
    stages = Path(checkpoint) / DOWNSTREAM
    found = sorted(entry for entry in stages.iterdir() if entry.is_dir()) if stages.is_dir() else []
    return [Path(checkpoint), *found]


def manifest_file(snapshot: str | Path) -> Path:
    """A snapshot's manifest."""
    return Path(snapshot) / MANIFEST


def backup_folder(checkpoint: str | Path, verb: str, stamp: str) -> Path:
    """Where ``daemon reset``, ``rescale`` or ``restore`` (``verb``) moves the old contents to.

    Beside the checkpoint, not in it: ``<checkpoint>.before-<verb>-<stamp>``.
    """
    folder = Path(checkpoint)
    return folder.with_name(f"{folder.name}.before-{verb}-{stamp}")
