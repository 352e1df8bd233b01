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
reads every older format it knows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.checkpoint.batch_logs import last_planned, planned_past_commit
from daemon.checkpoint.layout import SHAPE, shape_file
from daemon.errors import ConfigError
from daemon.model.config import InputConfig, PipelineConfig
from daemon.operator.state_format import STATE_FORMAT
from daemon.private_paths import private_folder, write_private_text
from daemon.state.seed import seed_of


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


class NoCheckpointError(ConfigError):
    """The pipeline has not run yet: its checkpoint records no shape."""


def shape_of(pipe: PipelineConfig) -> dict[str, Any]:
    """The parts of a pipeline its checkpoint depends on."""
    return {
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

    Raises:
        IncompatibleCheckpointError: the checkpoint was written by a pipeline of another shape.
    """
    path = shape_file(pipe.checkpoint)
    shape = shape_of(pipe)

    started = ran_a_batch(pipe.checkpoint) or seed_of(pipe.checkpoint) is not None
    if not path.exists() or not started:
        write_shape(pipe)
        return
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IncompatibleCheckpointError(
            f"pipeline {pipe.name!r}: cannot read {path} ({exc}); restore it, or delete the "
            f"checkpoint {pipe.checkpoint} to start over from the earliest offsets"
        ) from None
    refuse_mismatch(pipe, written, shape)


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


def verify_checkpoint(pipe: PipelineConfig, *, any_buckets: bool = False) -> dict[str, Any]:
    """Check, without writing anything, that the checkpoint fits the pipeline; its shape.

    Args:
        pipe: the pipeline.
        any_buckets: accept another ``state_buckets`` count (``daemon rescale``'s case).

    Raises:
        NoCheckpointError: the pipeline never ran in the checkpoint.
        IncompatibleCheckpointError: the checkpoint was written by a pipeline of another shape.
    """
    written = recorded_shape(pipe)
    shape = shape_of(pipe)
    if any_buckets and isinstance(written.get("state"), dict):
        shape["state"] = {**shape["state"], "buckets": written["state"].get("buckets")}
    refuse_mismatch(pipe, written, shape)
    return written


def buckets_of_shape(shape: dict[str, Any]) -> int:
    """The ``state_buckets`` count a checkpoint's shape records."""
    return int(shape["state"]["buckets"])


def write_shape(pipe: PipelineConfig) -> None:
    """Record the pipeline's shape in its checkpoint, replacing what was there."""
    path = shape_file(pipe.checkpoint)
    private_folder(path.parent, what=f"pipeline {pipe.name!r}: checkpoint")
    write_private_text(path, json.dumps(shape_of(pipe), indent=2) + "\n")


def refuse_mismatch(pipe: PipelineConfig, written: dict[str, Any], shape: dict[str, Any]) -> None:
    """Raise if the recorded shape ``written`` does not fit the pipeline's ``shape``.

    Raises:
        NewerCheckpointError: the state is in a format newer than this enrichd's.
        IncompatibleCheckpointError: anything else differs.
    """
    layout = written.get("state")
    if isinstance(layout, dict) and int(layout.get("format", 0)) > STATE_FORMAT:
        raise NewerCheckpointError(
            f"pipeline {pipe.name!r}: checkpoint {pipe.checkpoint} holds state in format "
            f"{layout['format']}, written by a newer enrichd (this one reads formats up to "
            f"{STATE_FORMAT}); run that enrichd, or point `checkpoint` at a new folder to start "
            "over"
        )
    changes = _differences(written, shape)
    if changes:
        raise IncompatibleCheckpointError(
            f"pipeline {pipe.name!r}: checkpoint {pipe.checkpoint} was written by another "
            f"pipeline shape ({'; '.join(changes)}); undo the change, or point `checkpoint` "
            "at a new folder (or delete this one) to start over from the earliest offsets "
            "with empty state"
        )


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    changes = []
    if old.get("joiner") != new["joiner"]:
        changes.append(f"joiner {old.get('joiner')!r} is now {new['joiner']!r}")
    written = old.get("state", "one value per key")
    if not isinstance(written, dict):
        changes.append(
            f"state layout {written!r} of a pre-release enrichd, which this one cannot read"
        )
    elif written != new["state"]:
        was, now = written.get("buckets"), new["state"]["buckets"]
        if was != now:
            changes.append(f"state_buckets {was} is now {now} (`daemon rescale` moves the state)")
        if written.get("format") != new["state"]["format"]:
            changes.append(f"state format {written.get('format')} is now {STATE_FORMAT}")
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
