"""A test kit for joiner authors: run a joiner over ordered inputs, with or without the engine.

How it works: inputs are given per role in the format of ``daemon replay`` input files, one
dict per record: ``{"key": ..., "value": {...} or None, "timestamp": epoch_ms}``, and
optionally its Kafka ``"headers"`` (``{"traceparent": "00-..."}``). The ``key`` is the Kafka
key, as text (it routes tombstones of roles in ``Joiner.keyed_tombstones``); the join key
comes from the value's field named in ``keys``, as in a pipeline file: a field, a list of
fields for a composite key, or ``kafka_key`` for the Kafka key.

- :func:`run_joiner` runs the joiner through the engine's own apply loop
  (:class:`daemon.operator.core.EngineCore`, the one the Spark operator runs) in plain Python:
  records arrive in timestamp order across all inputs (ties: the joiner's role order, then
  list order; the roles of :meth:`Joiner.bootstrap_roles` first, all of them, as a new
  pipeline reads them), are cut into micro-batches of ``batch_size`` and grouped by join key;
  the core puts each key's records in apply order (:func:`daemon.plugin.joiner.apply_order`),
  keeps each key's state pickled between micro-batches (stashes in a stash log, as in the
  state store) and drops it when :meth:`Joiner.is_empty` says so; at the end, every join key
  seen gets its end of input, as replay sends. Tombstones that cannot be routed, records
  without a join key or event time, and outputs the output schema rejects become dead
  letters, with the engine's ``kind``. No broker, no Spark: milliseconds per test.
- :class:`JoinerHarness` does the same step by step, with a processing-time clock a test
  moves by hand (:meth:`JoinerHarness.wait`), for joiners that act when keys go quiet or that
  have a ``state_ttl``.
- :func:`replay_joiner` runs the same inputs through the real engine (broker, Spark, Avro),
  via :func:`pipeline_file` and :func:`daemon.replay.replay`. The joiner must be installed
  (registered through the ``enrichd`` entry points), since Spark's workers load it by name.
- :func:`installed` shows a plugin's joiner as enrichd loads it, and :func:`validate` what
  ``daemon validate`` says of a pipeline file that uses it.

The kit's parts live in :mod:`daemon.testing.harness` (the joiner in plain Python) and
:mod:`daemon.testing.engine` (what the installed enrichd does with it); import them from
here.

A joiner call that fails (raises, yields what is no :class:`Emit` or :class:`DeadLetter`, an
unknown output, a key that is no text, or leaves a state that does not pickle) fails as in
the engine: nothing it yielded is kept, the key's state stays as it was, its records become
``JoinerFailed`` dead letters, and :attr:`JoinerRun.failures` holds each failure with its
exception (``raise run.failures[0].error`` shows the traceback).

Differences from the engine, on purpose: offsets are positions in each role's list (the
engine's are per Kafka partition), so records of one role with equal event times keep list
order here; every key shares one state bucket; and processing time moves only when the test
says so (:meth:`JoinerHarness.wait`), so :func:`run_joiner`, which never waits, runs its
micro-batches at one instant: no wake-up fires and no ``state_ttl`` runs out in it. A record's
``InputRecord.headers`` are all those its line gives (the engine keeps those the pipeline's
``headers`` policy names).

Example:
    The built-in ``comap`` joiner, a user and then a tweet of that user::

        >>> from daemon.joiners.comap import CoMap
        >>> from daemon.testing import run_joiner
        >>> run = run_joiner(
        ...     CoMap,
        ...     {
        ...         "one": [{"key": 1, "value": {"id": 1, "name": "ada"}, "timestamp": 1}],
        ...         "many": [{"key": 7, "value": {"id": 7, "author_id": 1}, "timestamp": 2}],
        ...     },
        ...     keys={"one": "id", "many": "author_id"},
        ...     options={"many_id": "id"},
        ...     fields={"one": "author", "many": "tweet"},
        ... )
        >>> [(out.key, out.value["author"]["name"]) for out in run.outputs]
        [('7', 'ada')]
        >>> run.batches, run.dead_letters
        (1, [])
"""

from __future__ import annotations

from daemon.testing.engine import installed, pipeline_file, replay_joiner, validate
from daemon.testing.harness import Inputs, JoinerHarness, JoinerRun, by_key, run_joiner

__all__ = [
    "Inputs",
    "JoinerHarness",
    "JoinerRun",
    "by_key",
    "installed",
    "pipeline_file",
    "replay_joiner",
    "run_joiner",
    "validate",
]
