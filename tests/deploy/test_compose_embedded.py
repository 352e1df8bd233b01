"""docker-compose.embedded.yml under podman-compose: tweet views flow from enrichd's images alone.

Deployment test (``pytest -m deploy``). podman-compose 1.0.3 (Debian 12) runs the file as a
user would run it with Docker Compose, on a network of its own where the services find each
other by name. It starts services in dependency order but does not wait for health checks,
which the services do not rely on: the sample data waits for the broker, the daemon retries
the broker and, through its restart policy, the input topics.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.podman import ROOT, STOP_TIMEOUT_S, http_get, podman
from tests.ports import free_port

pytestmark = pytest.mark.deploy

COMPOSE = ROOT / "docker-compose.embedded.yml"
SAMPLE_TWEETS = 200
SAMPLE_AUTHORS = 20
VIEW = re.compile(r"^tweet (\d+) 'tweet (\d+)' by 'user (\d+)( \(renamed \d+\))?'$")


@dataclass
class Stack:
    """A running project of the compose file and the port its daemon's endpoint is published on."""

    project: str
    http_port: int

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman-compose", "-f", str(COMPOSE), "-p", self.project, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "ENRICHD_HTTP_PORT": str(self.http_port)},
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def logs(self, service: str) -> str:
        done = podman("logs", self.container(service), check=False)
        return done.stdout + done.stderr


@pytest.fixture
def stack(image: str, dev_image: str) -> Iterator[Stack]:
    # The compose file's images, already built: podman-compose builds only a missing one.
    podman("tag", image, "localhost/enrichd:latest")
    podman("tag", dev_image, "localhost/enrichd-dev:latest")
    running = Stack(f"enrichd-test-{uuid.uuid4().hex[:8]}", free_port())
    try:
        running.compose("up", "-d")
        yield running
    finally:
        running.compose("down")
        podman("network", "rm", "--force", f"{running.project}_default", check=False)


def views_shown(stack: Stack) -> list[re.Match[str]]:
    lines = [line for line in stack.logs("views").splitlines() if line.startswith("tweet ")]
    matches = [VIEW.match(line) for line in lines]
    assert all(matches), lines
    return [match for match in matches if match is not None]


def test_views_flow_with_nothing_but_enrichds_image(stack: Stack) -> None:
    readyz = f"http://127.0.0.1:{stack.http_port}/readyz"  # published from the container
    deadline = time.monotonic() + 300

    def flowing() -> bool:
        shown = views_shown(stack)
        # Beyond the first load: a profile update fanned out to the author's earlier tweets.
        beyond = len(shown) > SAMPLE_TWEETS and any(match[4] for match in shown)
        return beyond and http_get(readyz) == (200, "tweet-views: progressing\n")

    while not flowing():
        assert time.monotonic() < deadline, stack.logs("enrichd")[-3000:]
        time.sleep(2)
    for match in views_shown(stack):
        n, author = int(match[2]), int(match[3])
        assert author == 1 + n % SAMPLE_AUTHORS, match[0]  # each tweet joined with its author
    stack.compose("stop", "-t", str(STOP_TIMEOUT_S), timeout=STOP_TIMEOUT_S + 120)
    for service in ("broker", "sample-data", "enrichd", "views"):
        state = podman("inspect", "--format", "{{.State.ExitCode}}", stack.container(service))
        assert state.stdout.strip() == "0", f"{service}:\n{stack.logs(service)[-3000:]}"
