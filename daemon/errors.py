"""The one exception root of enrichd and its operator-facing subclasses.

Every error a user can cause derives from :class:`EnrichdError`. Its message is one line that
names the file, field or record at fault and says what to do. The command line turns it into
that line and exit code 1 in exactly one place (``daemon.cli.main``).
"""

from __future__ import annotations


class EnrichdError(Exception):
    """Something the operator can fix; the message says what and how."""


class ConfigError(EnrichdError):
    """The pipeline file is broken: fix the named field."""


class PluginError(EnrichdError):
    """A plugin failed to load or broke the plugin contract: fix or uninstall the named plugin."""


class UnknownJoinerError(ConfigError):
    """No installed plugin provides the joiner: pick one of `daemon plugins list`."""


class SchemaError(ConfigError):
    """An Avro schema is missing or invalid: fix the named .avsc file or registry subject."""


class KafkaUnavailableError(EnrichdError):
    """The broker cannot be reached or lacks a topic: check `[kafka] bootstrap_servers`."""


class KafkaUnreachableError(KafkaUnavailableError):
    """No broker answered: check `[kafka] bootstrap_servers`; `daemon run` keeps retrying."""


class ReplayInputError(EnrichdError):
    """A replay input file is malformed: fix the named line."""


class BrokerError(EnrichdError):
    """The embedded development broker could not start."""
