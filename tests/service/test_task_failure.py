"""An error enrichd did not foresee, raised in a Spark task, as the operator sees it.

The joiner here is comap, except that while a flag file exists, a tweet saying "leak" makes
it raise :class:`Unforeseen`, which is no ``Exception``: the engine makes whatever else a
joiner call raises a ``JoinerFailed`` dead letter, so this is what fails the task, as an
error in enrichd's own code would. Every retry of that micro-batch fails the same way, until
the flag is removed.

Through the real broker and the session's Spark: ``daemon replay`` ends with one line naming
the pipeline, the joiner and the exception; ``daemon run``'s service (in a thread, on the
session's Spark) logs each failure as one JSON line with the traceback in its own field, and
after ``stuck_after_failures`` failures in a row says *stuck* on ``/readyz`` and in
``enrichd_pipeline_stuck``, until the batch goes through.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from daemon.broker import EmbeddedBroker
from daemon.errors import PipelineFailedError
from daemon.joiners.comap import CoMap
from daemon.model.config import ServiceConfig
from daemon.plugin.host import Plugin, registry
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, JoinerContext
from daemon.service.logs import JsonFormatter
from tests.kafka_helpers import In, TweetViews, produce, read_topic
from tests.ports import free_port
from tests.state_helpers import TWEETS, USERS, VIEWS


class Unforeseen(BaseException):  # noqa: N818 - named for what it stands for
    """What no joiner call is caught for: an error enrichd did not foresee."""


FAILURE = f"{Unforeseen.__module__}.Unforeseen: the state leaked"
"""The line of the task's exception: Python names a class outside ``builtins`` with its
module."""


class Leaky(CoMap):
    """comap that, while ``flag`` exists, fails the task on a tweet saying leak."""

    name = "leaky-comap"
    description = "comap that fails its task while its flag file exists."
    flag: ClassVar[str] = ""

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        yield from super().process(key, state, records, ctx)
        if os.path.exists(type(self).flag) and any(
            record.value and record.value.get("content") == "leak" for record in records
        ):
            raise Unforeseen("the state leaked")


@pytest.fixture
def leaky(tmp_path: Path) -> Iterator[Path]:
    """The leaky joiner registered; its flag file, which exists until the test removes it."""
    from pyspark import cloudpickle

    # Spark's workers cannot import this test module: ship the class by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    flag = tmp_path / "leak.flag"
    flag.write_text("")
    Leaky.flag = str(flag)
    registry().add(Leaky, Plugin("leaky-plugin", "leaky-dist", "0.0.1"))
    try:
        yield flag
    finally:
        registry().joiners.pop(Leaky.name)  # other tests list the installed joiners


def line(key: int, value: dict[str, Any], timestamp: int) -> str:
    return json.dumps({"key": key, "value": value, "timestamp": timestamp}) + "\n"


def test_replay_ends_with_one_line_naming_pipeline_joiner_and_exception(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, leaky: Path
) -> None:
    from daemon.replay import replay

    users, tweets = tmp_path / "users.jsonl", tmp_path / "tweets.jsonl"
    users.write_text(line(1, {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}, 1))
    tweets.write_text(line(10, {"id": 10, "author_id": 1, "content": "leak"}, 2))
    # Replay makes topics of its own: these names are the file's alone.
    names = {"users": "users", "tweets": "tweets", "output": "views", "dead_letters": "views.dlq"}
    file = TweetViews(broker.bootstrap_servers, tmp_path, "leaky", **names).file(joiner=Leaky.name)
    with pytest.raises(PipelineFailedError) as failed:
        replay(file, {"one": users, "many": tweets}, bootstrap_servers=broker.bootstrap_servers)
    assert (
        str(failed.value)
        == f"pipeline leaky (joiner leaky-comap of plugin leaky-plugin) failed: {FAILURE}"
    )
    traceback = failed.value.traceback or ""
    assert traceback.startswith("Traceback (most recent call last):")
    assert traceback.endswith(FAILURE)
    assert "in process" in traceback  # the joiner's frame, where it was raised
    assert "org.apache.spark" not in traceback


class JsonLines(logging.Handler):
    """The service's log records as the JSON lines ``--log-format json`` writes."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def get(url: str) -> tuple[int, str]:
    """Status and body; (0, "") while the service is not serving yet."""
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:  # noqa: S310 - loopback
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError:
        return 0, ""


def metric(url: str, name: str, pipeline: str) -> float | None:
    for text in get(f"{url}/metrics")[1].splitlines():
        if text.startswith(f'{name}{{pipeline="{pipeline}"}} '):
            return float(text.rsplit(" ", 1)[1])
    return None


def wait_until(
    what: str, done: Callable[[], bool], service: threading.Thread, seen: Callable[[], str]
) -> None:
    deadline = time.monotonic() + 300
    while not done():
        assert service.is_alive(), f"the service ended; {seen()}"
        assert time.monotonic() < deadline, f"no {what}; {seen()}"
        time.sleep(0.3)


def test_a_batch_failing_the_same_way_is_stuck_until_it_goes_through(
    broker: EmbeddedBroker, spark: Any, tweet_views: Callable[..., TweetViews], leaky: Path
) -> None:
    from daemon.service.supervisor import restart_delay, run_service

    setup = tweet_views("stuck")
    conf, users, tweets = setup.conf, setup.users, setup.tweets
    views, name = setup.output, setup.name
    produce(
        conf,
        users,
        [In(USERS.encode({"id": 1, "name": "ada", "avatar": None, "updated_at": 1}), b"1")],
    )
    produce(conf, tweets, [In(TWEETS.encode({"id": 10, "author_id": 1, "content": "leak"}), b"10")])
    file = setup.file(joiner=Leaky.name)
    file = file.model_copy(update={"service": ServiceConfig(stuck_after_failures=2)})
    url = f"http://127.0.0.1:{free_port()}"
    logs, logger = JsonLines(), logging.getLogger("enrichd")
    level = logger.level
    logger.addHandler(logs)
    logger.setLevel(logging.INFO)
    stop = threading.Event()
    service = threading.Thread(
        target=run_service,
        args=(file,),
        kwargs={"stop": stop, "stop_timeout_s": 10.0, "http": url.removeprefix("http://")},
        daemon=True,
    )
    service.start()

    def seen() -> str:
        messages = "\n".join(entry["message"] for entry in logs.lines)
        return f"/readyz: {get(f'{url}/readyz')}; the log:\n{messages}"

    try:
        wait_until(
            "stuck on /readyz and in its gauge",
            lambda: (
                "stuck" in get(f"{url}/readyz")[1]
                and metric(url, "enrichd_pipeline_stuck", name) == 1
            ),
            service,
            seen,
        )
        status, ready = get(f"{url}/readyz")
        assert status == 503
        # Stuck after the second failure; a third may have come by now, with a longer delay.
        stuck = re.fullmatch(
            rf"{name}: stuck: micro-batch 0 failed (\d+) times in a row with the same error "
            rf"\(joiner leaky-comap of plugin leaky-plugin\): {re.escape(FAILURE)}; "
            r"retried every (\d+) s\n",
            ready,
        )
        assert stuck is not None, ready
        failed, every = int(stuck[1]), int(stuck[2])
        assert failed >= 2 and every == restart_delay(failed)
        failures = [entry for entry in logs.lines if "failed:" in entry["message"]]
        assert failures[0]["message"] == (
            f"pipeline {name} (joiner leaky-comap of plugin leaky-plugin) failed: {FAILURE}; "
            "restarting in 1 s"
        )
        assert failures[0]["pipeline"] == name
        assert failures[0]["traceback"].startswith("Traceback (most recent call last):")
        assert failures[0]["traceback"].endswith(FAILURE)
        assert [entry["message"] for entry in logs.lines if "is stuck" in entry["message"]] == [
            f"pipeline {name} is stuck: micro-batch 0 failed 2 times in a row with the same "
            "error; it is retried, but needs the operator"
        ]

        leaky.unlink()  # what the operator fixes: the next retry goes through
        wait_until(
            "ready again, the gauge back at 0",
            lambda: (
                get(f"{url}/readyz")[0] == 200 and metric(url, "enrichd_pipeline_stuck", name) == 0
            ),
            service,
            seen,
        )
        (view,) = read_topic(conf, views)
        assert VIEWS.decode(view.value or b"")["tweet"]["content"] == "leak"
        assert any("is no longer stuck" in entry["message"] for entry in logs.lines)
    finally:
        stop.set()
        service.join(60)
        logger.removeHandler(logs)
        logger.setLevel(level)
    assert not service.is_alive()
    assert spark.sparkContext._jsc is not None  # the session's Spark is left running
