"""Every hook a plugin can implement, typed and documented.

A plugin is a module or object listed in the ``enrichd`` entry-point group. The built-in
joiners come in through the same group and the same hooks (see ``pyproject.toml``), so
anything a built-in can do, a third-party plugin can do. Importing this module starts no JVM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from daemon.joiners.base import Joiner

PROJECT = "enrichd"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Decorate a plugin's hook functions with this."""


@hookspec
def enrichd_register_joiners(register: Callable[[type[Joiner]], None]) -> None:
    """Register the joiner classes a plugin provides.

    Runs once per process when the plugin host loads plugins, before any pipeline file is
    validated or run. Call ``register(JoinerClass)`` once per joiner; the host rejects a
    name another plugin already registered, naming both plugins.

    Args:
        register: takes a subclass of :class:`daemon.joiners.base.Joiner`.
    """
