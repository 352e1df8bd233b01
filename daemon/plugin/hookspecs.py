"""Every hook a plugin can implement, typed and documented.

A plugin is a module or object listed in the ``enrichd`` entry-point group. The built-in
joiners come in through the same group and the same hooks (see ``pyproject.toml``), so
anything a built-in can do, a third-party plugin can do. Importing this module starts no JVM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from daemon.plugin.joiner import Joiner

PROJECT = "enrichd"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Decorate a plugin's hook functions with this."""


class Register(Protocol):
    """What :func:`enrichd_register_joiners` gets: call it with each joiner class.

    Type a hook's argument with it (``def enrichd_register_joiners(register: Register)``),
    so that mypy checks what the plugin registers.
    """

    def __call__(self, joiner: type[Joiner[Any, Any]], /) -> None:
        """Register ``joiner``, a subclass of :class:`daemon.plugin.joiner.Joiner`.

        Raises:
            daemon.errors.PluginError: it is no usable joiner, or its name is taken.
        """


@hookspec
def enrichd_register_joiners(register: Register) -> None:
    """Register the joiner classes a plugin provides.

    Runs once per process when the plugin host loads plugins, before any pipeline file is
    validated or run. Call ``register(JoinerClass)`` once per joiner; the host rejects a
    name another plugin already registered, naming both plugins.

    Args:
        register: takes a subclass of :class:`daemon.plugin.joiner.Joiner`.
    """
