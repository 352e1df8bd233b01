"""The plan of a one-input pipeline ``views``, as much of it as the monitor reads."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def views_plan() -> Any:
    """Pipeline ``views``: input ``stream`` from topic ``clicks``, output ``views``."""
    return SimpleNamespace(
        config=SimpleNamespace(name="views"),
        source=SimpleNamespace(inputs=[SimpleNamespace(role="stream", topic="clicks")]),
        operator=SimpleNamespace(output_topic="views", outputs=None, dead_letter_topic="dlq"),
    )
