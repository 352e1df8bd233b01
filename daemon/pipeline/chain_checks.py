"""The checks of a lookup of several tables that need the pipeline's inputs, not only options.

The joiner (``lookup`` with ``tables``, whose :meth:`~daemon.plugin.Joiner.chain` gives its
stages) orders its tables and refuses unknown fields and cycles itself; what it cannot see
is each input's ``key``: the stream's key is its key in the first table it meets, and a
table's ``lookup_key`` must have as many parts as that table's own key.
"""

from __future__ import annotations

from daemon.model.config import PipelineConfig
from daemon.plugin.joiner import Joiner


def chain_problems(pipe: PipelineConfig, joiner: Joiner) -> list[str]:
    """Why the inputs' keys do not fit the joiner's chain of tables (no chain: none)."""
    chain = joiner.chain()
    if chain is None:
        return []
    problems = []
    stream_field = pipe.field_of("stream")
    first = chain.stages[0]
    wanted = [path.removeprefix(f"{stream_field}.") for path in first.paths]
    given = list(pipe.inputs["stream"].key_fields)
    if given != wanted:
        shown = f'"{wanted[0]}"' if len(wanted) == 1 else str(wanted)
        problems.append(
            f"inputs.stream.key: the stream's key is its key in the first table, "
            f"{first.table!r} (lookup_key {', '.join(first.paths)}): set key = {shown}"
        )
    for stage in chain.stages:
        parts = len(pipe.inputs[stage.table].key_fields)
        if len(stage.paths) != parts:
            problems.append(
                f"options.tables ({stage.table}): lookup_key has {len(stage.paths)} part(s) and "
                f"input {stage.table!r}'s key {parts}; a row matches only when every part does"
            )
    return problems
