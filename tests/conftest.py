"""Session fixtures of enrichd's own tests.

The real broker (``broker``), the Spark session (``spark``) and ``fresh_topic`` come from
enrichd's pytest plugin (:mod:`daemon.pytest_plugin`), the same fixtures plugin authors get;
``tweet_views`` makes the tweet-views ``comap`` pipeline on fresh topics of that broker.
The secured brokers (TLS, mutual TLS, SASL) are Tansu processes of their own, started only
when a test asks for them (tests/secure_cluster.py says why they cannot be the session's).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemon.broker import EmbeddedBroker
from daemon.spark.class_archive import SWITCH
from tests.kafka_helpers import TweetViews, fresh_tweet_views
from tests.ports import free_port
from tests.scram_proxy import ScramGate
from tests.secure_cluster import Pki, TlsBroker, make_pki, start_tansu, stop_process

# The files whose tests take longest, longest first. pytest-xdist hands out whole files
# (--dist loadfile) in collection order (--no-loadscope-reorder: its own order, by the count
# of tests, sends these one-or-few-test files last, and one worker then ran the 4-13 min
# benchmark smoke alone at the end). Starting them first lets the short files fill the gaps,
# so both workers end together. Measured with `pytest --durations=60`; a file that takes
# minutes belongs here.
LONGEST_FIRST = (
    "tests/joins/test_micro_batches.py",
    "tests/bench/test_bench_smoke.py",
    "tests/delivery/test_crash_recovery.py",
    "tests/service/test_service.py",
    "tests/commands/test_install.py",
    "tests/connecting/test_connecting_verify.py",
    "tests/service/test_nothing_lost.py",
    "tests/service/test_observability.py",
    "tests/service/test_hung_pipeline.py",
    "tests/delivery/test_output_rejected.py",
    "tests/service/test_task_failure.py",
    "tests/joins/test_lookup_versioned.py",
    "tests/commands/test_demos.py",
    "tests/joins/test_comap.py",
    "tests/service/test_spark_cluster.py",
    "tests/service/test_class_archive.py",
    "tests/connecting/test_connecting_service.py",
    "tests/state/test_state_commands.py",
    "tests/delivery/test_kafka_sink.py",
    "tests/commands/test_verify.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the items of :data:`LONGEST_FIRST`'s files first, in its order; keep the rest's."""
    root = config.rootpath
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    missing = [path for path in LONGEST_FIRST if not (root / path).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names no such file: {missing}")

    def place(item: pytest.Item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(rank))

    items.sort(key=place)  # stable: every other item keeps its collection order


# The suite's JVMs (its own, and those of the `daemon` commands it starts) map Spark's class
# archive if there is one (the README's demo command made it) but never record one:
# the first to record would run slower and wait 10-20 s at its exit, at a moment that depends
# on the order tests run in. tests/service/test_class_archive.py tests the recording.
os.environ.setdefault(SWITCH, "map")


@pytest.fixture
def tweet_views(
    broker: EmbeddedBroker, fresh_topic: Callable[[str], str], tmp_path: Path
) -> Callable[..., TweetViews]:
    """``tweet_views(stem, partitions=1, create=True)``: the tweet-views ``comap`` pipeline on
    fresh topics of the session's broker, its input topics created, its files in the test's
    ``tmp_path`` (:func:`tests.kafka_helpers.fresh_tweet_views`); ``.file(...)`` writes its
    pipeline file and loads it."""

    def make(stem: str = "views", *, partitions: int = 1, create: bool = True) -> TweetViews:
        servers = broker.bootstrap_servers
        return fresh_tweet_views(
            servers, fresh_topic, tmp_path, stem, partitions=partitions, create=create
        )

    return make


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA made for this session, with server and client certificates it signed."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def tls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """A broker that clients reach only through TLS (server authentication)."""
    running = TlsBroker(pki, tmp_path_factory.mktemp("tls"), mutual=False)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def mtls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """A broker that clients reach only through TLS with a client certificate of the CA."""
    running = TlsBroker(pki, tmp_path_factory.mktemp("mtls"), mutual=True)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def sasl_broker() -> Iterator[str]:
    """A broker that requires SASL authentication (``tansu broker --authentication``).

    Tansu 0.6 authenticates nobody here (docs/contributing.md says why): it serves the tests
    of a refused handshake.
    """
    port = free_port()
    process = start_tansu(port, port, "--authentication")
    yield f"127.0.0.1:{port}"
    stop_process(process)


@pytest.fixture(scope="session")
def scram_broker() -> Iterator[ScramGate]:
    """A broker reached only through SASL/SCRAM-SHA-512 (tests/scram_proxy.py says how)."""
    import secrets

    gate_port, tansu_port = free_port(), free_port()
    process = start_tansu(tansu_port, gate_port)
    gate = ScramGate(gate_port, tansu_port, "enrichd", secrets.token_urlsafe(12))
    yield gate
    gate.close()
    stop_process(process)


@pytest.fixture(scope="session")
def image() -> str:
    """The Dockerfile of this checkout built under podman (the deployment tests' image)."""
    from tests.podman import build_image

    return build_image()


@pytest.fixture(scope="session")
def dev_image(image: str) -> str:
    """The Dockerfile's development image (the runtime's layers, and the embedded broker)."""
    from tests.podman import build_image

    return build_image("dev")
