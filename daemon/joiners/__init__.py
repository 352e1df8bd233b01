"""Joiners: the base class plugins implement, and the built-ins, which implement it too."""

from daemon.joiners.base import (
    END_OF_TIME,
    DeadLetter,
    Downstream,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    apply_order,
)
from daemon.joiners.stash import Stash

__all__ = [
    "END_OF_TIME",
    "DeadLetter",
    "Downstream",
    "Emit",
    "InputRecord",
    "Joiner",
    "JoinerContext",
    "JoinerOptions",
    "Stash",
    "apply_order",
]
