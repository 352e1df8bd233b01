"""Session fixtures: one real broker and one real Spark session for the whole test run."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from daemon.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One embedded Tansu broker process for the test session."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def fresh_topic() -> Callable[[str], str]:
    """Make topic names no other test uses (the broker is shared by the session)."""

    def make(stem: str = "t") -> str:
        return f"{stem}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local Spark session for the test session (replay and pipelines reuse it)."""
    from daemon.config import SparkConfig
    from daemon.engine.session import spark_session

    session = spark_session(SparkConfig(master="local[2]"))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def image() -> str:
    """The Dockerfile of this checkout built under podman (the deployment tests' image)."""
    from tests.podman import build_image

    return build_image()
