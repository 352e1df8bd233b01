"""The plugin host: loads the ``enrichd`` entry points and collects their joiners.

A plugin that fails to import or to register is recorded as a failure and reported by
``daemon plugins list``; it does not stop the host or the other plugins. Setting
``ENRICHD_DISABLE_PLUGIN_AUTOLOAD=1`` loads only the plugins that ship with enrichd itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from daemon.errors import PluginError, UnknownJoinerError
from daemon.plugin import hookspecs
from daemon.plugin.joiner import Joiner, JoinerOptions

ENTRY_POINT_GROUP = "enrichd"
DISABLE_AUTOLOAD_ENV = "ENRICHD_DISABLE_PLUGIN_AUTOLOAD"
BUILTIN_DISTRIBUTION = "enrichd"


@dataclass(frozen=True)
class Plugin:
    """Where a plugin comes from."""

    name: str
    distribution: str
    version: str


@dataclass(frozen=True)
class RegisteredJoiner:
    """A joiner class and the plugin that registered it."""

    cls: type[Joiner]
    plugin: Plugin

    @property
    def name(self) -> str:
        """The joiner's name."""
        return self.cls.name


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded or registered, and why."""

    plugin: Plugin
    error: str


@dataclass
class JoinerRegistry:
    """Every joiner the installed plugins registered, and every plugin that failed."""

    joiners: dict[str, RegisteredJoiner] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)

    def add(self, cls: Any, plugin: Plugin) -> None:
        """Register one joiner class for ``plugin``.

        Raises:
            PluginError: the class is not a usable joiner or its name is taken.
        """
        if not (isinstance(cls, type) and issubclass(cls, Joiner)):
            raise PluginError(f"plugin {plugin.name!r} registered {cls!r}, not a Joiner subclass")
        for attribute in ("name", "description", "roles"):
            if not getattr(cls, attribute, None):
                raise PluginError(
                    f"plugin {plugin.name!r}: joiner {cls.__name__} lacks `{attribute}`"
                )
        if not (isinstance(cls.Options, type) and issubclass(cls.Options, JoinerOptions)):
            raise PluginError(
                f"plugin {plugin.name!r}: joiner {cls.name!r} declares Options "
                f"{cls.Options!r}, which is not a subclass of JoinerOptions"
            )
        taken = self.joiners.get(cls.name)
        if taken is not None:
            raise PluginError(
                f"joiner name {cls.name!r} is registered by both plugin {taken.plugin.name!r} "
                f"({taken.plugin.distribution}) and plugin {plugin.name!r} "
                f"({plugin.distribution}); uninstall one of them"
            )
        self.joiners[cls.name] = RegisteredJoiner(cls, plugin)

    def get(self, name: str) -> RegisteredJoiner:
        """The joiner called ``name``.

        Raises:
            UnknownJoinerError: no plugin registered it; the message lists the choices.
        """
        try:
            return self.joiners[name]
        except KeyError:
            choices = ", ".join(sorted(self.joiners)) or "none installed"
            raise UnknownJoinerError(
                f"unknown joiner {name!r}; installed joiners: {choices}"
            ) from None


def _plugin_of(entry: EntryPoint) -> Plugin:
    dist = entry.dist
    return Plugin(
        name=entry.name,
        distribution=dist.name if dist else "?",
        version=dist.version if dist else "?",
    )


def _autoload_disabled() -> bool:
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in ("", "0", "false")


def build_registry(entries: Iterable[EntryPoint] | None = None) -> JoinerRegistry:
    """Load plugins from entry points and let each register its joiners.

    Args:
        entries: the entry points to load; by default the installed ``enrichd`` group.

    Returns:
        The registry; plugins that failed are in ``failures``, not raised.
    """
    if entries is None:
        entries = entry_points(group=ENTRY_POINT_GROUP)
        if _autoload_disabled():
            entries = [e for e in entries if _plugin_of(e).distribution == BUILTIN_DISTRIBUTION]
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    registry = JoinerRegistry()
    plugins: dict[str, Plugin] = {}
    for entry in sorted(entries, key=lambda e: (_plugin_of(e).distribution != "enrichd", e.name)):
        plugin = _plugin_of(entry)
        try:
            manager.register(entry.load(), name=entry.name)
            plugins[entry.name] = plugin
        except Exception as exc:  # a broken plugin must not take the host down
            registry.failures.append(PluginFailure(plugin, f"{type(exc).__name__}: {exc}"))
    while True:  # check_pending reports one plugin at a time; report every one
        try:
            manager.check_pending()
            break
        except pluggy.PluginValidationError as exc:
            name = manager.get_name(exc.plugin) or "?"
            registry.failures.append(PluginFailure(plugins.pop(name), str(exc)))
            manager.unregister(exc.plugin)
    # Registration order (built-ins first, then by name), so that a third-party plugin can
    # never take over a built-in name: the later registrant is the one refused. pluggy lists
    # hookimpls in registration order (it calls them in reverse).
    for impl in manager.hook.enrichd_register_joiners.get_hookimpls():
        plugin = plugins[impl.plugin_name]
        try:
            impl.function(register=lambda cls, plugin=plugin: registry.add(cls, plugin))
        except Exception as exc:
            registry.failures.append(PluginFailure(plugin, f"{type(exc).__name__}: {exc}"))
    return registry


@cache
def registry() -> JoinerRegistry:
    """The process-wide registry, built on first use."""
    return build_registry()
