"""A pipeline's state from outside the engine: looking at it, moving it, starting over.

``daemon state`` reads a checkpoint's join state (:mod:`daemon.state.reader`) and shows it as
JSON (:mod:`daemon.state.render`); ``daemon reset`` and ``daemon rescale`` make a checkpoint
start again from chosen offsets, with or without the state it held
(:mod:`daemon.state.seed`, :mod:`daemon.state.reset`).
"""
