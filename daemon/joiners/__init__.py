"""The built-in joiners: ``comap``, ``asof``, ``lookup``, ``window`` and ``table``.

Each implements :class:`daemon.plugin.Joiner` and registers through the ``enrichd``
entry-point group, as a third-party plugin does. :mod:`daemon.joiners.versions` holds what
``asof`` and a versioned ``lookup`` share. Their module paths stay where they are: a
checkpoint's state names their state classes by module (docs/plugins.md).
"""
