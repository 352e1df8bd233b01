"""What a checkpoint was written by: refuse to resume it with a pipeline it does not fit.

Spark's checkpoint holds per-partition offsets of the input topics and the joiner's keyed
state. Resumed by a pipeline with another joiner, other topics or other key fields, Spark
either fails deep inside the state store or, worse, carries on with offsets and state that
mean something else. So a start writes ``<checkpoint>/enrichd-pipeline.json``
(:func:`~daemon.checkpoint.layout.shape_file`), once the pipeline has planned without fault:
the joiner, per role the topic and the key and time fields, and how the state is laid out
(:func:`state_layout`); every later start compares and refuses a mismatch with one line saying
what changed and how to start over, unless no micro-batch ever ran in the checkpoint
(:func:`ran_a_batch`). Options are left out: most can change between runs (a cap, a
timeout), and the joiner's own state carries what it needs.

The state's layout records the version of the state format
(:data:`~daemon.operator.state_format.STATE_FORMAT`) and the number of state buckets: an
enrichd refuses a checkpoint of a newer format with one line rather than misread it, and
reads every older format it knows. ``daemon run`` takes an older format up to its own as it
starts (:func:`check_checkpoint`): from then on the checkpoint may hold what only the newer
format has, so an older enrichd must refuse it. The file also records the versions of enrichd
and pyspark that made the checkpoint, and ``daemon run`` refuses another pyspark minor
version (:mod:`daemon.pipeline.written_by`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from daemon.checkpoint.batch_logs import last_planned, planned_past_commit
from daemon.checkpoint.layout import SHAPE, shape_file
from daemon.errors import ConfigError
from daemon.model.config import InputConfig, PipelineConfig
from daemon.operator.state_format import OLDEST_FORMAT, STATE_FORMAT, readable
from daemon.pipeline import written_by
from daemon.private_paths import private_folder, write_private_text
from daemon.state.seed import seed_of

log = logging.getLogger("enrichd.checkpoint")


def state_layout(buckets: int) -> dict[str, int]:
    """How the operator's state is laid out: the state format, and ``state_buckets``.

    Pre-release builds wrote a text here (``"pickled keys in 32 buckets, ..."``) for state
    in a format that this enrichd does not read.
    """
    return {"format": STATE_FORMAT, "buckets": buckets}


class IncompatibleCheckpointError(ConfigError):
    """The checkpoint was written by a pipeline of another shape."""


class NewerCheckpointError(IncompatibleCheckpointError):
    """The checkpoint holds state in a newer format: run the enrichd that wrote it."""


class OtherSparkCheckpointError(IncompatibleCheckpointError):
    """The checkpoint was made by another pyspark minor version: pin it, or move the state."""


class NoCheckpointError(ConfigError):
    """The pipeline has not run yet: its checkpoint records no shape."""


def shape_of(pipe: PipelineConfig) -> dict[str, Any]:
    """The parts of a pipeline its checkpoint depends on.

    A lookup of several tables also records its ``operators``: one per table and its key,
    in the file's order, and the numbering one when a table revises. Spark numbers a query's
    stateful operators by their place, so another list would read each stage's state as
    another's. A pipeline without ``tables`` records none, as before.
    """
    chain = _operators(pipe)
    return {
        # Recorded only in continuous mode, so shape files written before it existed match.
        # Each lease holds the state of its share of the buckets: another count misreads it.
        **({"mode": pipe.mode, "leases": pipe.leases} if pipe.continuous else {}),
        **({"operators": chain} if chain else {}),
        "joiner": pipe.joiner,
        "state": state_layout(pipe.state_buckets),
        "inputs": {
            role: {
                "topic": spec.topic,
                "key": spec.key,
                "time": spec.time,
                **_routing_of(spec),
            }
            for role, spec in sorted(pipe.inputs.items())
        },
    }


def _operators(pipe: PipelineConfig) -> list[str]:
    """A chain's operators as the file lists its tables (no ``tables``: none)."""
    tables = pipe.options.get("tables") or []
    named = [
        f"{table.get('input')} by {table.get('lookup_key')}"
        for table in tables
        if isinstance(table, dict)
    ]
    if any(isinstance(table, dict) and table.get("revisions") for table in tables):
        named.append("numbering")
    return named


_ROUTING_DEFAULTS: dict[str, Any] = {"key_format": "string", "envelope": None}
"""How an input's records find their join keys, besides ``key``: a change makes other keys
of the same records. Recorded only where not the default, so shape files written before
these settings existed still match."""


def _routing_of(spec: InputConfig) -> dict[str, Any]:
    settings = {"key_format": spec.key_format, "envelope": spec.envelope}
    return {name: value for name, value in settings.items() if value != _ROUTING_DEFAULTS[name]}


def ran_a_batch(checkpoint: Path) -> bool:
    """Whether Spark planned a micro-batch in ``checkpoint`` (its offset log has an entry)."""
    return last_planned(checkpoint) is not None


def pending_batch(checkpoint: Path) -> int | None:
    """The micro-batch Spark planned in ``checkpoint`` and has not committed, if there is one.

    A restarted query runs that batch again, with the same offsets: a batch that fails for
    good fails as this one, again and again. None when every planned batch committed (the
    next one fails while it is being planned) or none was planned.
    """
    return planned_past_commit(checkpoint)


def check_checkpoint(pipe: PipelineConfig) -> None:
    """Record the pipeline's shape in a new checkpoint, or check it against an existing one.

    Called once the pipeline is fully planned, just before its query starts. A checkpoint in
    which no micro-batch ran holds no offsets and no state, whatever shape it recorded (a
    start that failed before its first batch): it takes the new shape. A seed left by
    ``daemon reset`` or ``daemon rescale`` counts as a batch: it holds offsets and may hold
    state laid out for the shape it recorded.

    A checkpoint of an older state format this enrichd reads is taken up to its own format,
    and one made before the versions were recorded gets them (:func:`write_shape`).

    Raises:
        IncompatibleCheckpointError: the checkpoint was written by a pipeline of another shape.
        NewerCheckpointError: its state is in a format this enrichd does not read.
        OtherSparkCheckpointError: it was made by another pyspark minor version.
    """
    path = shape_file(pipe.checkpoint)
    shape = shape_of(pipe)

    started = ran_a_batch(pipe.checkpoint) or seed_of(pipe.checkpoint) is not None
    if not path.exists() or not started:
        write_shape(pipe)
        return
    written = recorded_shape(pipe)
    refuse_mismatch(pipe, written, shape)
    refuse_other_spark(pipe, written)
    was = written["state"]["format"]
    if was != STATE_FORMAT or written_by.recorded(written) is None:
        # Format 1 reads as format 2 with no deltas yet (daemon.operator.state_format); the
        # record goes up before the query can write what an older enrichd would misread.
        write_shape(pipe)
        if was != STATE_FORMAT:
            log.info(
                "pipeline %r: checkpoint %s taken from state format %s to %s; an enrichd of "
                "format %s can no longer run on it",
                pipe.name,
                pipe.checkpoint,
                was,
                STATE_FORMAT,
                was,
            )


def recorded_shape(pipe: PipelineConfig) -> dict[str, Any]:
    """The shape the pipeline's checkpoint records, read only.

    Raises:
        NoCheckpointError: the checkpoint records no shape (the pipeline never ran).
        IncompatibleCheckpointError: the shape file cannot be read.
    """
    path = shape_file(pipe.checkpoint)
    if not path.exists():
        raise NoCheckpointError(
            f"pipeline {pipe.name!r}: checkpoint {pipe.checkpoint} holds nothing yet (no "
            f"{SHAPE}): the pipeline has not run there"
        )
    try:
        shape: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IncompatibleCheckpointError(
            f"pipeline {pipe.name!r}: cannot read {path} ({exc}); restore it, or delete the "
            f"checkpoint {pipe.checkpoint} to start over from the earliest offsets"
        ) from None
    return shape


def verify_checkpoint(pipe: PipelineConfig, *, any_layout: bool = False) -> dict[str, Any]:
    """Check, without writing anything, that the checkpoint fits the pipeline; its shape.

    Args:
        pipe: the pipeline.
        any_layout: accept another layout of the state: ``state_buckets``, ``mode`` and
            ``leases`` (``daemon rescale``'s case).

    Raises:
        NoCheckpointError: the pipeline never ran in the checkpoint.
        IncompatibleCheckpointError: the checkpoint was written by a pipeline of another shape.
    """
    written = recorded_shape(pipe)
    shape = shape_of(pipe)
    if any_layout:
        if isinstance(written.get("state"), dict):
            shape["state"] = {**shape["state"], "buckets": written["state"].get("buckets")}
        for part in LAYOUT_PARTS:
            shape.pop(part, None)
            if part in written:
                shape[part] = written[part]
    refuse_mismatch(pipe, written, shape)
    return written


LAYOUT_PARTS = ("mode", "leases")
"""What a shape records of a continuous pipeline's layout, beside ``state_buckets``."""


def ran_continuous(shape: dict[str, Any]) -> bool:
    """Whether a checkpoint of recorded ``shape`` ran in continuous mode (its leases)."""
    return shape.get("mode") == "continuous"


def buckets_of_shape(shape: dict[str, Any]) -> int:
    """The ``state_buckets`` count a checkpoint's shape records."""
    return int(shape["state"]["buckets"])


def write_shape(pipe: PipelineConfig) -> None:
    """Record the pipeline's shape and this enrichd's and pyspark's versions in its checkpoint.

    Replaces what was there.
    """
    path = shape_file(pipe.checkpoint)
    private_folder(path.parent, what=f"pipeline {pipe.name!r}: checkpoint")
    recorded = {**shape_of(pipe), written_by.WRITTEN_BY: written_by.running()}
    write_private_text(path, json.dumps(recorded, indent=2) + "\n")


def refuse_mismatch(pipe: PipelineConfig, written: dict[str, Any], shape: dict[str, Any]) -> None:
    """Raise if the recorded shape ``written`` does not fit the pipeline's ``shape``.

    An older state format that this enrichd reads fits.

    Raises:
        NewerCheckpointError: the state is in a format this enrichd does not read.
        IncompatibleCheckpointError: anything else differs.
    """
    layout = written.get("state")
    if isinstance(layout, dict):
        refuse_format(pipe, layout.get("format"), written)
    was, now = written.get("mode", "micro_batch"), shape.get("mode", "micro_batch")
    if was != now:
        raise IncompatibleCheckpointError(
            f"pipeline {pipe.name!r}: checkpoint {pipe.checkpoint} was run in mode = {was!r}, "
            f"and the file now says mode = {now!r}: each mode lays its state out its own "
            "way; `daemon rescale` moves the state into the mode the file says, or set mode "
            "back"
        )
    changes = differences(written, shape)
    if changes:
        raise IncompatibleCheckpointError(
            f"pipeline {pipe.name!r}: checkpoint {pipe.checkpoint} was written by another "
            f"pipeline shape ({'; '.join(changes)}); undo the change, or point `checkpoint` "
            "at a new folder (or delete this one) to start over from the earliest offsets "
            "with empty state"
        )


def refuse_format(
    pipe: PipelineConfig, version: object, written: dict[str, Any], *, where: str = ""
) -> None:
    """Raise unless this enrichd reads state format ``version``, which ``written`` records.

    ``where``: what holds the state, for the message (the pipeline's checkpoint if not given).

    Raises:
        NewerCheckpointError: one line naming both formats, both enrichd versions where
            known, and what to do.
    """
    if readable(version):
        return
    where = where or f"checkpoint {pipe.checkpoint}"
    maker = (written_by.recorded(written) or {}).get("enrichd")
    this = written_by.running()["enrichd"]
    by = f" (made by enrichd {maker})" if maker else ""
    if isinstance(version, int) and version > STATE_FORMAT:
        way = f"run enrichd {maker} or newer" if maker else "run the enrichd that wrote it"
        raise NewerCheckpointError(
            f"pipeline {pipe.name!r}: {where} holds state in format {version}{by}, newer "
            f"than this enrichd {this} reads (state formats {OLDEST_FORMAT} to "
            f"{STATE_FORMAT}); {way}, restore a snapshot taken before the upgrade "
            "(`daemon restore`), or point `checkpoint` at a new folder to start over"
        )
    raise NewerCheckpointError(
        f"pipeline {pipe.name!r}: {where} holds state in format "
        f"{version!r}{by}, which this enrichd {this} no longer reads (state formats "
        f"{OLDEST_FORMAT} to {STATE_FORMAT}); run an older enrichd on it, or point "
        "`checkpoint` at a new folder to start over"
    )


def refuse_other_spark(pipe: PipelineConfig, written: dict[str, Any]) -> None:
    """Raise if the checkpoint ``written`` describes was made by another pyspark minor version.

    Raises:
        OtherSparkCheckpointError: one line naming both versions and the ways on.
    """
    mismatch = written_by.spark_mismatch(written)
    if mismatch is None:
        return
    was, now = mismatch
    raise OtherSparkCheckpointError(
        f"pipeline {pipe.name!r}: checkpoint {pipe.checkpoint} was made by pyspark {was}, "
        f"and this is pyspark {now}: Spark's files in it need not read across minor "
        f"versions; install pyspark {written_by.minor(was)} (pip install "
        f"'{written_by.pin(was)}'), or take a snapshot (`daemon snapshot`) and move the state "
        f"into a checkpoint of pyspark {written_by.minor(now)} with `daemon rescale`"
    )


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between a recorded shape ``old`` and a pipeline's ``new``, in words.

    The state format is not among them: :func:`refuse_format` judges it.
    """
    changes = []
    if old.get("joiner") != new["joiner"]:
        changes.append(f"joiner {old.get('joiner')!r} is now {new['joiner']!r}")
    written = old.get("state", "one value per key")
    if not isinstance(written, dict):
        changes.append(
            f"state layout {written!r} of a pre-release enrichd, which this one cannot read"
        )
    elif written.get("buckets") != new["state"]["buckets"]:
        was, now = written.get("buckets"), new["state"]["buckets"]
        changes.append(f"state_buckets {was} is now {now} (`daemon rescale` moves the state)")
    if old.get("leases", 1) != new.get("leases", 1):
        was, now = old.get("leases", 1), new.get("leases", 1)
        changes.append(f"leases {was} are now {now} (`daemon rescale` moves the state)")
    if old.get("operators", []) != new.get("operators", []):
        was, now = old.get("operators") or ["one"], new.get("operators") or ["one"]
        changes.append(f"operators {', '.join(was)} are now {', '.join(now)}")
    old_inputs: dict[str, Any] = old.get("inputs") or {}
    for role in sorted(set(old_inputs) | set(new["inputs"])):
        before, after = old_inputs.get(role), new["inputs"].get(role)
        if before is None:
            changes.append(f"input {role!r} is new")
        elif after is None:
            changes.append(f"input {role!r} is gone")
        else:
            for part in ("topic", "key", "time", *_ROUTING_DEFAULTS):
                was = before.get(part, _ROUTING_DEFAULTS.get(part))
                now = after.get(part, _ROUTING_DEFAULTS.get(part))
                if was != now:
                    changes.append(f"input {role!r} {part} {was!r} is now {now!r}")
    return changes
