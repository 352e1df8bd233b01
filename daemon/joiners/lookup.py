"""``lookup``: registered so it is listed and validated; its join logic has not landed yet."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from daemon.hookspecs import hookimpl
from daemon.joiners.base import DeadLetter, Emit, InputRecord, Joiner, JoinerContext


class Lookup(Joiner):
    """Stream-table enrichment lookup with foreign keys and aggregation.

    Not implemented yet: `daemon validate` and `daemon run` refuse pipelines that use it.
    """

    name = "lookup"
    description = (
        "(not implemented yet) Stream-table enrichment lookup with foreign keys and aggregation."
    )
    roles = ("stream", "table")
    implemented = False

    def initial_state(self) -> Any:
        """Never called: pipelines using an unimplemented joiner are refused."""
        raise NotImplementedError(self.name)

    def process(
        self, key: str, state: Any, records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        """Never called: pipelines using an unimplemented joiner are refused."""
        raise NotImplementedError(self.name)


@hookimpl
def enrichd_register_joiners(register: Any) -> None:
    """Register the built-in ``lookup`` joiner (listed as not implemented)."""
    register(Lookup)
