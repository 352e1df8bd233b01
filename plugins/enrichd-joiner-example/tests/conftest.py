"""Fixtures for the engine test: a real broker and the Spark session, once per test run.

These live here, not in enrichd's own ``tests/conftest.py``, because a plugin's tests must run
on their own (``pytest plugins/enrichd-joiner-example/tests``) as well as from enrichd's root.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """An embedded broker for the session; a fresh, empty cluster."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The process's Spark session (shared with enrichd's own tests when run together)."""
    from daemon.engine.session import spark_session
    from daemon.pipeline.config import SparkConfig

    session = spark_session(SparkConfig(master="local[2]"))
    yield session
    session.stop()
