"""A checkpoint copied into place: made to name its own files, and to be a query of its own.

Spark records two things in a checkpoint that a copy must not keep as they were:

- **Absolute paths**: each operator's metadata (``state/OPERATOR/_metadata/``) names its
  state schema files by the path of the checkpoint that wrote them, and Spark opens them
  there. :func:`own_schema_paths` points them into the copy.
- **The query's id** (``metadata``), which names the exactly-once markers of its output
  (``daemon.sink.task_output``): each task's marker says which micro-batch it last
  committed. A copy of an earlier moment, put back after the query went on, would find
  markers past its own batches and skip writing them, though the records they read are
  read again: output lost. :func:`new_query_id` gives the copy an id of its own, so that its
  batches are written (the output of batches after the copy was taken is written again).

Both rewrite one small file of Spark's each and remove its Hadoop checksum file, without
which Hadoop reads a file unchecked.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from daemon.checkpoint.layout import STATE_METADATA, metadata_file, state_folder
from daemon.private_paths import write_private_text

_SCHEMA_PATH = re.compile(r'"file:[^"]*?(/state/\d+/_stateSchema/)')
"""A state schema file's path in an operator's metadata, up to the operator's folder."""


def own_schema_paths(checkpoint: Path) -> int:
    """Make the operators' metadata name the state schema files of ``checkpoint``.

    Returns:
        How many metadata files changed (none for a checkpoint in the place it was made).
    """
    changed = 0
    for metadata in sorted(state_folder(checkpoint).glob(f"*/{STATE_METADATA}/*/*")):
        if metadata.name.startswith(".") or not metadata.is_file():
            continue
        text = metadata.read_text(encoding="utf-8")
        moved = _SCHEMA_PATH.sub(lambda found: f'"file:{checkpoint}{found[1]}', text)
        if moved != text:
            write_private_text(metadata, moved)
            _checksum(metadata).unlink(missing_ok=True)
            changed += 1
    return changed


def new_query_id(checkpoint: Path) -> str:
    """Give the checkpoint's query a new id; the id.

    Raises:
        OSError: the checkpoint has no ``metadata`` (Spark never started a query in it).
    """
    path = metadata_file(checkpoint)
    recorded = json.loads(path.read_text(encoding="utf-8"))
    recorded["id"] = str(uuid.uuid4())
    write_private_text(path, json.dumps(recorded, separators=(",", ":")))
    _checksum(path).unlink(missing_ok=True)
    return str(recorded["id"])


def _checksum(path: Path) -> Path:
    return path.with_name(f".{path.name}.crc")
