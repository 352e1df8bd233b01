"""The one exception root of enrichd and its operator-facing subclasses.

Every error a user can cause derives from :class:`EnrichdError`. Its message is one line that
names the file, field or record at fault and says what to do. The command line turns it into
that line and exit code 1 in exactly one place (``daemon.cli.main``).
"""

from __future__ import annotations

import re

from daemon.secrets import redact


class EnrichdError(Exception):
    """Something the operator can fix; the message says what and how."""


class ConfigError(EnrichdError):
    """The pipeline file is broken: fix the named field."""


class HeadersFromRefused(ConfigError):
    """The joiner cannot carry what the pipeline's ``headers_from`` asks: fix that setting."""


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


class MissingOffsetsError(EnrichdError):
    """An input partition no longer has the offset a pipeline is to read next.

    Retention or DeleteRecords removed the records, or the topic was deleted and created
    again. With ``on_missing_offsets = "fail"`` (the default) the pipeline stops: set it to
    "earliest" or "latest" to go on from there, or move the pipeline's start with
    `daemon reset`, then start the daemon again.
    """


class CheckpointDivergedError(EnrichdError):
    """The checkpoint no longer says what the output holds: a batch's marker disagrees with it.

    Each task of a micro-batch commits, with its output, a marker naming the batch and the
    input ranges it covered. Spark writes its offset and commit logs without syncing them
    to disk, so a host crash, a volume snapshot restored or a checkpoint copied from
    elsewhere can lose a batch whose output is already in Kafka. Started again, the
    pipeline would plan that batch anew over other ranges: records of the new ranges would
    never be written and others written twice. It stops instead; the message names the
    batch, the ranges the marker records and what the checkpoint says now. To go on, decide
    what the gap means for the output, then move the pipeline's start past what was written
    with `daemon reset --to` (or `--keep-state`), or restore the checkpoint that wrote the
    marker (docs/operations.md, "When the checkpoint and the output disagree").
    """


class RecordsRemovedWhileReadingError(EnrichdError):
    """Records were removed from an input partition while a micro-batch was reading them.

    The micro-batch fails and runs again after the restart, when the source plans its ranges
    again as ``on_missing_offsets`` says.
    """


class KafkaReadError(EnrichdError):
    """A partition's records could not be read, and waiting will not help.

    The principal may not read the topic, the records there are corrupt, or the client failed
    for good: the line names the partition, the offset and the client's error. A micro-batch
    that meets it fails, and is retried and reported as stuck until the cause is mended.
    """


class SchemaRegistryUnavailableError(EnrichdError):
    """The Schema Registry refused the credentials, failed the TLS handshake or did not answer.

    Check `[schema_registry]`: its url, credentials and `ssl.*` settings. A running pipeline
    fails its micro-batch instead of dead-lettering records it could not decode, and the
    service retries it with backoff.
    """


class PipelineFailedError(EnrichdError):
    """A pipeline's query failed: the message names the pipeline, its joiner and the error.

    ``traceback`` holds the Python traceback of the Spark task that failed, when there is
    one; ``ENRICHD_DEBUG=1`` prints it.
    """

    def __init__(self, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.traceback = traceback


def failure_reason(text: str) -> str:
    """The one line that says why a query failed, from the text of its exception.

    A failure that enrichd raised in a Spark task (a registry that refused the credentials,
    ...) arrives wrapped in Spark's and the Python worker's text, its own line deep inside:
    that line is the reason. So is, for any other Python exception raised in a task, its
    class and message: the last line of the worker's traceback, not Spark's
    ``[PYTHON_EXCEPTION]`` preamble. Otherwise the text's first line is.
    """
    match = _enrichd_error().search(text)
    if match is not None:
        return redact(match.group("message").strip())
    raised = _python_exception(text)
    if raised is not None:
        return redact(raised[1])
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return redact(first)


def task_traceback(text: str) -> str | None:
    """The Python traceback inside the text of a failed query, or None when it has none.

    From its first ``Traceback (most recent call last):`` line (so chained exceptions are
    kept) to the exception's own line, without the JVM's stack around it.
    """
    raised = _python_exception(text)
    return None if raised is None else redact(raised[0])


_TRACEBACK_START = "Traceback (most recent call last):"


def _python_exception(text: str) -> tuple[str, str] | None:
    """A Python traceback in ``text`` and its exception's line (``Class: message``); None.

    A traceback's frames are indented; the exception's line is the first one after the last
    ``Traceback`` header that is not. Spark appends its JVM stack after a blank line.
    """
    start = text.find(_TRACEBACK_START)
    if start < 0:
        return None
    lines = text[start:].splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith(_TRACEBACK_START))
    for index in range(last + 1, len(lines)):
        line = lines[index]
        if line.strip() and not line[0].isspace():
            return "\n".join(lines[: index + 1]), line.strip()
    return None


OPERATOR_ONLY = (MissingOffsetsError, CheckpointDivergedError)
"""The errors only the operator can mend: a restart would fail the same way for ever."""


def stops_the_pipeline(text: str) -> bool:
    """Whether a query failed for a reason that restarting cannot mend (the operator must act).

    That is one of :data:`OPERATOR_ONLY`, wherever in the text of its exception it is.
    """
    names = "|".join(error.__name__ for error in OPERATOR_ONLY)
    return re.search(rf"(?:^|[\s.])(?:{names}): ", text) is not None


def _error_names(root: type[BaseException]) -> set[str]:
    return {root.__name__}.union(*(_error_names(sub) for sub in root.__subclasses__()))


def _enrichd_error() -> re.Pattern[str]:
    """Where an enrichd error's message starts in a traceback, by the error's class name.

    Made when asked, not at import: the subclasses of other modules exist only by then.
    """
    names = "|".join(sorted(_error_names(EnrichdError)))
    return re.compile(rf"(?:^|[\s.])(?:{names}): (?P<message>[^\n]+)", re.MULTILINE)
