"""The plugin contract: everything a joiner plugin may import, in one place.

A plugin author imports from here, from :mod:`daemon.testing` (the test kit) and uses the
fixtures of :mod:`daemon.pytest_plugin`; every other module of enrichd is internal and may
move between releases (docs/plugins.md). The modules behind these names:
:mod:`~daemon.plugin.joiner` (the :class:`Joiner` base and the records it handles),
:mod:`~daemon.plugin.stash` (:class:`Stash`), :mod:`~daemon.plugin.fields` (what a joiner
declares it reads and writes: :class:`FieldOf`, :class:`OutputValue`, :class:`Written`),
:mod:`~daemon.plugin.hookspecs` (the hook and its marker), :mod:`~daemon.plugin.host`
(the plugin host that loads the ``enrichd`` entry points) and :mod:`~daemon.plugin.describe`
(what ``daemon plugins describe`` shows);
:data:`DurationMs` is the type of an option written as a duration (``"5m"``),
:func:`field_at` reads a field named by a dotted path (as :class:`FieldOf` options name
them), :func:`input_record` and :func:`emit_record` make an :class:`InputRecord` and an
:class:`Emit` faster than their constructors (for a joiner that makes one per record),
:func:`recast` makes a record anew under another role, join key and value (as a chain's
stage hands it on), :func:`merge_headers` merges the headers of the records that made an
output as ``headers_from = "inputs"`` documents (for :attr:`Emit.headers`),
:func:`pickled_fields` is what a held value's ``__reduce__`` pickles (its headers only when
it has some), and
:class:`ConfigError` is what a joiner raises when the pipeline's configuration cannot work
(an output schema without a field it needs).

The built-in joiners import from here and nothing else of enrichd, as a third-party plugin
does (a meta-test holds them to it).
"""

from daemon.errors import ConfigError
from daemon.model.durations import DurationMs
from daemon.model.headers import Headers, HeadersFrom, merge_headers, pickled_fields
from daemon.model.record_route import field_at
from daemon.plugin.fields import MAIN_OUTPUT, NUMBERS, FieldOf, OutputValue, Written
from daemon.plugin.hookspecs import Register, hookimpl
from daemon.plugin.joiner import (
    END_OF_TIME,
    JOINED,
    RETRACTED,
    Answer,
    Chain,
    ChainStage,
    DeadLetter,
    Downstream,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    RowAnswer,
    StateReader,
    apply_order,
    emit_record,
    input_record,
    recast,
)
from daemon.plugin.stash import Stash

__all__ = [
    "END_OF_TIME",
    "JOINED",
    "MAIN_OUTPUT",
    "NUMBERS",
    "RETRACTED",
    "Answer",
    "Chain",
    "ChainStage",
    "ConfigError",
    "DeadLetter",
    "Downstream",
    "DurationMs",
    "Emit",
    "FieldOf",
    "Headers",
    "HeadersFrom",
    "InputRecord",
    "Joiner",
    "JoinerContext",
    "JoinerOptions",
    "OutputValue",
    "Register",
    "Stash",
    "RowAnswer",
    "StateReader",
    "Written",
    "apply_order",
    "emit_record",
    "field_at",
    "hookimpl",
    "input_record",
    "merge_headers",
    "pickled_fields",
    "recast",
]
