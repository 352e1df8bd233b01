"""Change-data-capture envelopes: a Debezium change event's row, or the delete it stands for.

A Debezium connector writes each change of a table row as an envelope record: ``op`` says
what happened (``c`` create, ``u`` update, ``r`` a snapshot read, ``d`` delete, ``t``
truncate), ``after`` holds the row after the change (null for a delete), ``before`` the
row before it (kept only with full replica identity, so it is not relied on), beside
``source`` and ``ts_ms`` metadata. An input with ``envelope = "debezium"`` reads such a
topic as the table it describes: the row is the record, a delete is a tombstone.
"""

from __future__ import annotations

from typing import Any, Literal

Envelope = Literal["debezium"]
"""The value envelope of an input: ``debezium`` change events (unset: the value is the row)."""

ROW_OPS = frozenset({"c", "u", "r"})
"""The ops whose ``after`` is the row: create, update and snapshot read."""
DELETE_OP = "d"


def debezium_row(event: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The row of a Debezium change event, None for a delete; or why it is no usable event.

    Returns:
        ``(row, None)`` for a create, update or snapshot read; ``(None, None)`` for a
        delete; ``(None, "InvalidEnvelope: ...")`` for a value that is no such event.
    """
    op = event.get("op")
    if op in ROW_OPS:
        row = event.get("after")
        if not isinstance(row, dict):
            return None, f"InvalidEnvelope: a Debezium {op!r} event without its 'after' row"
        return row, None
    if op == DELETE_OP:
        return None, None
    if op is None:
        return None, "InvalidEnvelope: no 'op' field: not a Debezium change event"
    if op == "t":
        return None, (
            "InvalidEnvelope: a Debezium truncate ('t') names no row; delete the rows one by "
            "one, or start the pipeline over"
        )
    return None, f"InvalidEnvelope: Debezium op {op!r} is none of c, u, r, d"


def unwrap(event: dict[str, Any]) -> dict[str, Any] | None:
    """The row of a change event the source routed (so a usable one), None for a delete.

    Raises:
        ValueError: the event is no usable change event (see :func:`debezium_row`).
    """
    row, error = debezium_row(event)
    if error is not None:
        raise ValueError(error.partition(": ")[2])
    return row


def row_schema(schema: Any) -> Any:
    """The row's record schema in a Debezium envelope schema (its ``after`` field), or None."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    fields = {f["name"]: f["type"] for f in schema.get("fields", [])}
    if "op" not in fields:
        return None
    after = fields.get("after")
    named = schema.get("__named_schemas", {})  # fastavro's: a later use names its type
    for branch in after if isinstance(after, list) else [after]:
        found = named.get(branch) if isinstance(branch, str) else branch
        if isinstance(found, dict) and found.get("type") == "record":
            return found
    return None
