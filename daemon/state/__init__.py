"""A pipeline's state from outside the engine: looking at it, moving it, seeding a start.

:mod:`~daemon.state.reader` reads a checkpoint's join state with Spark's state data source,
:mod:`~daemon.state.show` and :mod:`~daemon.state.render` make ``daemon state``'s JSON of it;
:mod:`~daemon.state.export` makes a checkpoint's state portable and deals it into another
number of buckets, :mod:`~daemon.state.positions` finds where each input partition starts for
``daemon reset --to``, and :mod:`~daemon.state.seed` is what a new checkpoint starts with
(its offsets and state), which a pipeline's start reads (:mod:`daemon.pipeline.reset` writes
it).
"""
