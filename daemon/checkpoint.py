"""What a checkpoint was written by: refuse to resume it with a pipeline it does not fit.

Spark's checkpoint holds per-partition offsets of the input topics and the joiner's keyed
state. Resumed by a pipeline with another joiner, other topics or other key fields, Spark
either fails deep inside the state store or, worse, carries on with offsets and state that
mean something else. So a start writes ``<checkpoint>/enrichd-pipeline.json``, once the
pipeline has planned without fault: the joiner, per role the topic and the key and time
fields, and how the state is laid out (:func:`state_layout`); every later start compares and
refuses a mismatch with one line saying what changed and how to start over, unless no
micro-batch ever ran in the checkpoint (:func:`ran_a_batch`). Options are left
out: most can change between runs (a cap, a timeout), and the joiner's own state carries
what it needs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from daemon.config import PipelineConfig
from daemon.errors import ConfigError

SHAPE_FILE = "enrichd-pipeline.json"


def state_layout(buckets: int) -> str:
    """How the operator's state is laid out, with ``buckets`` buckets (``state_buckets``).

    Checkpoints without a layout kept one value per key. Checkpoints of ``"pickled keys in
    128 buckets"`` predate :class:`~daemon.joiners.Stash` (which changed how comap keeps its
    many side) and the setting.
    """
    return f"pickled keys in {buckets} buckets, stashes in a log per bucket"


_BUCKETS_OF_LAYOUT = re.compile(r"^pickled keys in (\d+) buckets, stashes in a log per bucket$")


class IncompatibleCheckpointError(ConfigError):
    """The checkpoint was written by a pipeline of another shape."""


def shape_of(pipe: PipelineConfig) -> dict[str, Any]:
    """The parts of a pipeline its checkpoint depends on."""
    return {
        "joiner": pipe.joiner,
        "state": state_layout(pipe.state_buckets),
        "inputs": {
            role: {"topic": spec.topic, "key": spec.key, "time": spec.time}
            for role, spec in sorted(pipe.inputs.items())
        },
    }


def ran_a_batch(checkpoint: Path) -> bool:
    """Whether Spark planned a micro-batch in ``checkpoint`` (its offset log has an entry)."""
    offsets = Path(checkpoint) / "offsets"
    return offsets.is_dir() and any(entry.name.isdigit() for entry in offsets.iterdir())


def check_checkpoint(pipe: PipelineConfig) -> None:
    """Record the pipeline's shape in a new checkpoint, or check it against an existing one.

    Called once the pipeline is fully planned, just before its query starts. A checkpoint in
    which no micro-batch ran holds no offsets and no state, whatever shape it recorded (a
    start that failed before its first batch): it takes the new shape.

    Raises:
        IncompatibleCheckpointError: the checkpoint was written by a pipeline of another shape.
    """
    path = Path(pipe.checkpoint) / SHAPE_FILE
    shape = shape_of(pipe)
    if not path.exists() or not ran_a_batch(pipe.checkpoint):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(shape, indent=2) + "\n", encoding="utf-8")
        return
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IncompatibleCheckpointError(
            f"pipeline {pipe.name!r}: cannot read {path} ({exc}); restore it, or delete the "
            f"checkpoint {pipe.checkpoint} to start over from the earliest offsets"
        ) from None
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
    if written != new["state"]:
        counts = [_BUCKETS_OF_LAYOUT.match(layout) for layout in (written, new["state"])]
        if all(counts):
            was, now = (int(match.group(1)) for match in counts if match)
            changes.append(f"state_buckets {was} is now {now}")
        else:
            changes.append(f"state layout {written!r} is now {new['state']!r} (an enrichd upgrade)")
    old_inputs: dict[str, Any] = old.get("inputs") or {}
    for role in sorted(set(old_inputs) | set(new["inputs"])):
        before, after = old_inputs.get(role), new["inputs"].get(role)
        if before is None:
            changes.append(f"input {role!r} is new")
        elif after is None:
            changes.append(f"input {role!r} is gone")
        else:
            for part in ("topic", "key", "time"):
                if before.get(part) != after[part]:
                    changes.append(
                        f"input {role!r} {part} {before.get(part)!r} is now {after[part]!r}"
                    )
    return changes
