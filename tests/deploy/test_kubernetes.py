"""deploy/kubernetes, rendered, validated and played: what a platform team would apply.

Deployment tests (``pytest -m deploy``, run by ``.ci/containers``, which installs kubectl,
promtool and podman). No Kubernetes cluster can run on these machines, so:

- every overlay is rendered by ``kubectl kustomize`` and each resource is checked against
  the Kubernetes schemas of the oldest and of kubectl's own supported version
  (kubernetes-validate, strict: an unknown field fails), the Prometheus Operator's kinds
  being checked by promtool and by the names they use;
- what the manifests promise is checked on the rendered output: one daemon per checkpoint,
  restricted pods, probes, budgets, and each overlay's pipeline file valid in the image at
  the paths where the pod mounts it;
- the demo overlay is played under podman (tests/kube.py says how podman 4.3 is made to
  behave as a cluster would): the daemon's pod turns ready, views flow on the embedded
  broker, stopping it as the kubelet does ends it with exit 0 within its grace period, and
  a second play on the same volume resumes without writing any view twice.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.kube import (
    KUBERNETES,
    OVERLAYS,
    Doc,
    Played,
    container,
    grace_period_s,
    named,
    of_kind,
    play,
    pod_of_statefulset,
    pod_template,
    remove_played,
    render,
    selects,
    stop_gracefully,
)
from tests.podman import ROOT, json_lines, podman
from tests.secure_cluster import Pki

pytestmark = pytest.mark.deploy

OVERLAY_NAMES = ["demo", "external", "spark-cluster"]
KUBERNETES_VERSIONS = ["1.29.0", "1.32.0"]
"""The oldest version the manifests are for, and kubectl's (the machines' kubectl is 1.32)."""
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
"""The Prometheus Operator's kinds, which have no schema in kubernetes-validate."""
WORKLOAD_KINDS = {"Deployment", "StatefulSet"}
MONITORING = KUBERNETES / "components" / "monitoring"
OPERATIONS = ROOT / "docs" / "operations.md"
HTTP_PORT = 9464
VIEW = re.compile(r"^tweet (\d+) 'tweet (\d+)' by 'user (\d+)( \(renamed \d+\))?'$")


def rendered(overlay: str) -> list[Doc]:
    return render(OVERLAYS / overlay)


def workloads(docs: list[Doc]) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] in WORKLOAD_KINDS]


def daemon_of(docs: list[Doc]) -> Doc:
    """The StatefulSet that runs ``daemon run``: the only workload doing so."""
    found = [
        w
        for w in workloads(docs)
        if pod_template(w)["spec"]["containers"][0].get("args", [""])[0] == "run"
    ]
    assert len(found) == 1, [w["metadata"]["name"] for w in found]
    return found[0]


def pipeline_file(docs: list[Doc], daemon: Doc) -> tuple[str, str]:
    """The pipeline file's text and the path it is mounted at in the daemon's container."""
    spec = pod_template(daemon)["spec"]
    path = spec["containers"][0]["args"][1]
    mount = next(
        m for m in spec["containers"][0]["volumeMounts"] if path.startswith(m["mountPath"] + "/")
    )
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    config_map = named(docs, "ConfigMap", volume["configMap"]["name"])
    return config_map["data"][Path(path).name], path


def toml(text: str) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(text)


# -- rendered and validated ------------------------------------------------------------------


def test_kubectl_and_promtool_are_installed() -> None:
    """.ci/containers installs both; without them every test here would fail less clearly."""
    assert shutil.which("kubectl"), "kubectl: apt-get install kubectl"
    assert shutil.which("promtool"), "promtool: apt-get install prometheus"


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_overlay_renders_and_passes_the_kubernetes_schemas(
    overlay: str, version: str
) -> None:
    docs = rendered(overlay)
    checked = []
    for doc in docs:
        if doc["kind"] in OPERATOR_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked.append(doc["kind"])
    expected = {"ServiceAccount", "Service", "StatefulSet", "PodDisruptionBudget", "ConfigMap"}
    assert expected <= set(checked)


def test_the_base_renders_alone_and_overlays_add_only_what_they_say() -> None:
    base = render(KUBERNETES / "base")
    assert sorted(d["kind"] for d in base) == [
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    assert {d["kind"] for d in rendered("external")} & OPERATOR_KINDS == OPERATOR_KINDS
    for overlay in ("demo", "spark-cluster"):  # runnable without the Prometheus Operator
        assert not {d["kind"] for d in rendered(overlay)} & OPERATOR_KINDS


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_one_daemon_per_checkpoint_a_statefulset_of_one(overlay: str) -> None:
    """A StatefulSet recreates its pod only once the old one is gone: no overlap on a rollout,
    an eviction or a node failure. Every pipeline's checkpoint is on the state volume."""
    docs = rendered(overlay)
    daemon = daemon_of(docs)
    spec = daemon["spec"]
    assert daemon["kind"] == "StatefulSet"
    assert spec["replicas"] == 1
    assert spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
    assert spec["updateStrategy"] == {"type": "RollingUpdate"}
    text, _ = pipeline_file(docs, daemon)
    pod = pod_template(daemon)["spec"]
    state = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "state")
    claims = [c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "state" in claims or "persistentVolumeClaim" in volumes.get("state", {})
    for pipeline in toml(text)["pipeline"]:
        assert Path(pipeline["checkpoint"]).is_relative_to(state["mountPath"]), pipeline
    args = pod["containers"][0]["args"]
    assert pod["terminationGracePeriodSeconds"] > int(args[args.index("--stop-timeout") + 1])
    if overlay == "spark-cluster":  # executors write the state: a volume they all share
        claim = named(
            docs, "PersistentVolumeClaim", volumes["state"]["persistentVolumeClaim"]["claimName"]
        )
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
        worker = named(docs, "Deployment", "enrichd-spark-worker")
        mounts = pod_template(worker)["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "state", "mountPath": state["mountPath"]} in mounts
    else:
        assert claims == ["state"]


def test_every_spark_process_of_the_cluster_authenticates_with_a_secret_on_no_command_line(
    tmp_path: Path,
) -> None:
    """The spark-cluster overlay turns on Spark's RPC authentication and encryption on the
    master, the workers and the daemon (the executors get it from their worker), each taking
    the one Secret's value from its environment. The master's and workers' shell, run here
    with a stand-in ``spark-class``, writes it into a 0600 properties file it passes on."""
    docs = rendered("spark-cluster")
    secret = named(docs, "Secret", "enrichd-spark-auth")["stringData"]["secret"]
    daemon = daemon_of(docs)
    conf = toml(pipeline_file(docs, daemon)[0])["spark"]["conf"]
    assert conf["spark.authenticate"] == conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.authenticate.secret"] == "${SPARK_AUTHENTICATE_SECRET}"
    spark_class = tmp_path / "bin" / "spark-class"
    spark_class.parent.mkdir()
    spark_class.write_text('#!/bin/sh\necho "$@"\n', encoding="utf-8")
    spark_class.chmod(0o755)
    master = named(docs, "StatefulSet", "enrichd-spark-master")
    worker = named(docs, "Deployment", "enrichd-spark-worker")
    for workload in (daemon, master, worker):
        box = pod_template(workload)["spec"]["containers"][0]
        env = {e["name"]: e for e in box.get("env", [])}
        source = env["SPARK_AUTHENTICATE_SECRET"]["valueFrom"]["secretKeyRef"]
        assert source == {"name": "enrichd-spark-auth", "key": "secret"}
        command = box.get("command", []) + box.get("args", [])
        assert not any(secret in part for part in command)
        if workload is daemon:
            continue
        properties = tmp_path / f"{workload['kind']}.properties"
        tini, dashes, sh, c, script, *rest = command  # rest: $0, then the class and its args
        assert (tini, dashes, sh, c) == ("tini", "--", "sh", "-c")
        script = script.replace("/tmp/spark-secured.properties", str(properties))  # noqa: S108
        done = subprocess.run(
            ["sh", "-c", script, *rest],
            env={"PATH": f"{spark_class.parent}:/usr/bin:/bin", "SPARK_AUTHENTICATE_SECRET": "s3"},
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.split()[-2:] == ["--properties-file", str(properties)]
        assert done.stdout.split()[0] == rest[1]  # the Spark class, then its own arguments
        assert properties.stat().st_mode & 0o777 == 0o600
        assert properties.read_text(encoding="utf-8").splitlines() == [
            "spark.authenticate=true",
            "spark.network.crypto.enabled=true",
            "spark.authenticate.secret=s3",
        ]


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_every_pod_is_restricted_and_writes_only_to_its_volumes(overlay: str) -> None:
    docs = rendered(overlay)
    for workload in workloads(docs):
        name = workload["metadata"]["name"]
        pod = pod_template(workload)["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name  # the image's user
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        for box in pod["containers"]:
            context = box["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["privileged"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            for mount in box.get("volumeMounts", []):
                volume = volumes.get(mount["name"], {})
                if mount.get("readOnly"):
                    continue
                writable = "emptyDir" in volume or "persistentVolumeClaim" in volume
                assert writable or mount["name"] in claims, (name, mount)
            assert "memory" in box["resources"]["limits"], name
            assert box["resources"]["requests"]["cpu"], name


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_probes_service_and_disruption_budget_of_the_daemon(overlay: str) -> None:
    docs = rendered(overlay)
    daemon = daemon_of(docs)
    pod = pod_template(daemon)
    box = pod["spec"]["containers"][0]
    assert box["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": HTTP_PORT}
    assert box["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": HTTP_PORT}
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert f"ENRICHD_HTTP=0.0.0.0:{HTTP_PORT}" in dockerfile  # where the image serves them
    requests, limits = box["resources"]["requests"], box["resources"]["limits"]
    gib = {"Gi": 1.0, "Mi": 1 / 1024}
    assert (
        float(requests["memory"][:-2]) * gib[requests["memory"][-2:]]
        <= float(limits["memory"][:-2]) * gib[limits["memory"][-2:]]
    )
    labels = pod["metadata"]["labels"]
    (service,) = [s for s in of_kind(docs, "Service") if selects(s, labels)]
    assert service["metadata"]["name"] == daemon["spec"]["serviceName"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    (budget,) = of_kind(docs, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert all(labels[k] == v for k, v in budget["spec"]["selector"]["matchLabels"].items())


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
def test_the_pipeline_file_is_valid_in_the_image_where_the_pod_mounts_it(
    overlay: str, image: str, pki: Pki, tmp_path: Path
) -> None:
    """``daemon validate --offline`` in a container of the image, with the ConfigMap's files
    and, for the secured cluster, stand-ins for each file of the Secret mounted where the
    pod mounts them (the registry is not asked: no registry here)."""
    docs = rendered(overlay)
    daemon = daemon_of(docs)
    text, path = pipeline_file(docs, daemon)
    config = tmp_path / "pipeline"
    config.mkdir()
    (config / Path(path).name).write_text(text, encoding="utf-8")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    keys = sorted(set(re.findall(r"/etc/enrichd/secrets/([A-Za-z0-9._-]+)", text)))
    for key in keys:
        stand_in = pki.ca.read_text() if key.endswith(".crt") else "enrichd:stand-in\n"
        (secrets / key).write_text(stand_in, encoding="utf-8")
    for folder in (config, secrets):
        folder.chmod(0o755)
        for file in folder.iterdir():
            file.chmod(0o644)  # read by the image's user
    environment = [  # what the pod takes from Secrets into its environment
        f"--env={name}=enrichd-stand-in"
        for name in sorted(set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text)))
    ]
    done = podman(
        "run", "--rm", "--network", "none", "--read-only", *environment,
        "-v", f"{config}:{str(Path(path).parent)}:ro",
        "-v", f"{secrets}:/etc/enrichd/secrets:ro",
        image, "validate", "--offline", path,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 1 pipeline: tweet-views"), done.stdout
    assert "stand-in" not in done.stdout + done.stderr
    if overlay == "external":
        assert keys == ["ca.crt", "kafka-password", "kafka-username", "registry-user-info"]
        # The Secret the docs and the overlay say to create has exactly these keys.
        for source in (OPERATIONS, OVERLAYS / "external" / "kustomization.yaml"):
            page = source.read_text(encoding="utf-8")
            assert sorted(set(re.findall(r"--from-file=([a-z.-]+)=", page))) == keys, source


# -- monitoring ------------------------------------------------------------------------------


def prometheus_rule() -> Doc:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text(encoding="utf-8"))


def test_promtool_checks_the_rules_and_each_alert_fires_only_when_it_should(
    tmp_path: Path,
) -> None:
    """``promtool check rules`` on the PrometheusRule's groups, then its unit tests
    (tests/fixtures/prometheus) on the same rules less their annotations, which those tests
    would otherwise have to repeat word for word."""
    groups = prometheus_rule()["spec"]["groups"]
    rules = tmp_path / "check" / "rules.yaml"
    rules.parent.mkdir()
    rules.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    done = subprocess.run(
        ["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = [rule["alert"] for group in groups for rule in group["rules"]]
    assert f"SUCCESS: {len(alerts)} rules found" in done.stdout
    assert set(alerts) == {
        "EnrichdDown",
        "EnrichdNotReady",
        "EnrichdPipelineStuck",
        "EnrichdInputLagGrowing",
        "EnrichdDeadLettersRising",
        "EnrichdEndToEndLatencyHigh",
    }
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    unit = ROOT / "tests" / "fixtures" / "prometheus" / "enrichd-alerts.test.yaml"
    shutil.copy(unit, tmp_path / unit.name)
    done = subprocess.run(
        ["promtool", "test", "rules", unit.name],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", unit.read_text(encoding="utf-8")))
    assert tested == set(alerts)  # every alert has its test


def served_metric_names() -> set[str]:
    """Every series name the daemon's /metrics can have, whether observed yet or not."""
    import os

    from daemon.service.observability import Metrics

    metrics = Metrics()
    metrics.jvm_pid = os.getpid()  # so that the JVM's collector reports
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_count", "_sum"],
        "gauge": [""],
        "info": ["_info"],
        "unknown": [""],
    }
    names = set()
    for family in metrics.registry.collect():
        names |= {family.name + suffix for suffix in suffixes[family.type]}
    return names


def test_alerts_and_dashboard_name_only_metrics_that_exist() -> None:
    """Every ``enrichd_*``/``process_*`` name they use is one the daemon serves; the others
    are kube-state-metrics', the kubelet's and Prometheus' own."""
    served = served_metric_names()
    others = {
        "up",
        "kube_pod_status_ready",
        "kube_pod_container_resource_limits",
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
    }
    dashboard = json.loads((MONITORING / "enrichd-dashboard.json").read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    exprs += [rule["expr"] for g in prometheus_rule()["spec"]["groups"] for rule in g["rules"]]
    used = {
        name
        for expr in exprs
        for name in re.findall(r"\b([a-z_]+)(?=\{|\[|\)| |$)", expr)
        if name.startswith(("enrichd_", "process_", "kube_", "container_")) or name == "up"
    }
    assert used - served - others == set()
    for name in ("enrichd_build_info", "process_cpu_seconds_total", "process_open_fds"):
        assert name in used and name in served, name
    assert "enrichd_jvm_process_resident_memory_bytes" in used


def test_the_service_monitor_scrapes_the_daemons_metrics_port() -> None:
    docs = rendered("external")
    (monitor,) = of_kind(docs, "ServiceMonitor")
    daemon = daemon_of(docs)
    (service,) = [
        s for s in of_kind(docs, "Service")
        if all(s["metadata"]["labels"].get(k) == v
               for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    ]  # fmt: skip
    assert service["metadata"]["name"] == daemon["spec"]["serviceName"]
    (endpoint,) = monitor["spec"]["endpoints"]
    port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
    assert port["port"] == HTTP_PORT and endpoint["path"] == "/metrics"
    (dashboard,) = [
        c for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"] == "enrichd-dashboard"
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["enrichd-dashboard.json"])["uid"] == "enrichd"


# -- the demo overlay under podman -----------------------------------------------------------


@dataclass
class DemoRun:
    """The demo overlay played, the daemon stopped, played again on its volume, stopped."""

    daemon: Doc
    first_ready: tuple[int, str]
    first_health: tuple[int, str]
    metrics: str
    inspected: dict[str, Any]
    processes: str
    exits: list[int]
    logs: list[str]
    views_before: list[str]
    views: list[str]


def probe(box: str, path: str, port: int) -> tuple[int, str]:
    """An HTTP probe from inside the pod, as the kubelet's would reach it: status and body."""
    source = (
        "import urllib.request, urllib.error\n"
        "try:\n"
        f"    r = urllib.request.urlopen('http://127.0.0.1:{port}{path}', timeout=5)\n"
        "    print(r.status); print(r.read().decode(), end='')\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code); print(e.read().decode(), end='')\n"
        "except OSError:\n"
        "    print(0)\n"
    )
    done = podman("exec", box, "python", "-c", source, check=False, timeout=60)
    if done.returncode != 0:
        return 0, done.stderr
    status, _, body = done.stdout.partition("\n")
    return int(status), body


def logs(box: str) -> str:
    done = podman("logs", box, check=False)
    return done.stdout + done.stderr


def views_shown(box: str) -> list[str]:
    lines = [line for line in logs(box).splitlines() if line.startswith("tweet ")]
    assert all(VIEW.match(line) for line in lines), lines
    return lines


def wait_until(what: str, done: Any, log: Any, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"no {what}:\n{log()[-3000:]}"
        time.sleep(2)


@pytest.fixture(scope="module")
def demo(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    docs = render(OVERLAYS / "demo", image)
    folder = tmp_path_factory.mktemp("kube-play")
    network = f"enrichd-kube-{uuid.uuid4().hex[:8]}"
    daemon = named(docs, "StatefulSet", "enrichd")
    pod, claims = pod_of_statefulset(daemon)
    name, box_name = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]
    box = container(name, box_name)
    readiness = pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    liveness = pod["spec"]["containers"][0]["livenessProbe"]["httpGet"]
    views_box = container("enrichd-views-pod-0", "views")
    claim_volumes = [c["metadata"]["name"] for c in claims]
    for volume in claim_volumes:  # a checkpoint left by an earlier run would not fit the new broker
        podman("volume", "rm", "--force", volume, check=False)
    podman("network", "create", network)
    played: list[Played] = []
    try:
        for deployment in ("enrichd-broker", "enrichd-sample-data", "enrichd-views"):
            played.append(play(docs, named(docs, "Deployment", deployment), folder, network))
        sample = container("enrichd-sample-data-pod-0", "sample-data")
        # The daemon refuses to start on missing input topics: the sample data makes them.
        wait_until(
            "input topics", lambda: "produced 20 users" in logs(sample), lambda: logs(sample)
        )

        def ready() -> bool:
            return probe(box, readiness["path"], readiness["port"])[0] == 200

        def flowing(at_least: int) -> bool:
            shown = views_shown(views_box)
            # Beyond the first load: a profile update fanned out to the author's tweets.
            return len(shown) >= at_least and any("(renamed" in line for line in shown)

        first = play(docs, pod, folder, network, claims=claims)
        played.append(first)
        wait_until("ready daemon and views", lambda: ready() and flowing(201), lambda: logs(box))
        first_ready = probe(box, readiness["path"], readiness["port"])
        first_health = probe(box, liveness["path"], liveness["port"])
        metrics = probe(box, "/metrics", readiness["port"])[1]
        inspected = json.loads(podman("inspect", box).stdout)[0]
        processes = podman("top", box, "user", "args").stdout
        grace = grace_period_s(pod)
        exits, daemon_logs = [], []
        stop_gracefully(name, grace)
        exits.append(int(podman("inspect", "--format", "{{.State.ExitCode}}", box).stdout))
        daemon_logs.append(logs(box))
        remove_played(first)
        played.remove(first)
        views_before = views_shown(views_box)
        tweets_before = {VIEW.match(line)[1] for line in views_before}  # type: ignore[index]

        # Played again: its claim's volume is still there (a StatefulSet's claim outlives
        # its pod), and the sample data has written more tweets meanwhile.
        second = play(docs, pod, folder, network)
        played.append(second)

        def resumed() -> bool:
            tweets = {VIEW.match(line)[1] for line in views_shown(views_box)}  # type: ignore[index]
            return ready() and len(tweets - tweets_before) >= 5

        wait_until("views after the second play", resumed, lambda: logs(box))
        stop_gracefully(name, grace)
        exits.append(int(podman("inspect", "--format", "{{.State.ExitCode}}", box).stdout))
        daemon_logs.append(logs(box))
        yield DemoRun(
            daemon, first_ready, first_health, metrics, inspected, processes, exits,
            daemon_logs, views_before, views_shown(views_box),
        )  # fmt: skip
    finally:
        for each in played:
            remove_played(each)
        for volume in claim_volumes:
            podman("volume", "rm", "--force", volume, check=False)
        podman("network", "rm", "--force", network, check=False)


def test_the_daemons_pod_turns_ready_and_views_flow_on_the_embedded_broker(
    demo: DemoRun,
) -> None:
    assert demo.first_ready == (200, "tweet-views: progressing\n")
    assert demo.first_health == (200, "ok\n")
    assert len(demo.views_before) > 200  # the sample's 200 tweets and the updates' fan-outs
    for line in demo.views:
        match = VIEW.match(line)
        assert match is not None
        assert int(match[3]) == 1 + int(match[2]) % 20, line  # each tweet with its author


def test_the_pod_runs_as_the_images_user_on_a_read_only_root(demo: DemoRun) -> None:
    config = demo.inspected["HostConfig"]
    assert config["ReadonlyRootfs"] is True
    assert config["CapDrop"] and not config["CapAdd"]
    assert demo.inspected["Config"]["User"] == "10001:10001"
    lines = demo.processes.strip().splitlines()[1:]
    assert any("daemon run" in line for line in lines), demo.processes
    assert {line.split()[0] for line in lines} == {"enrichd"}, demo.processes


def test_its_metrics_carry_the_build_and_the_processes(demo: DemoRun) -> None:
    assert re.search(r'^enrichd_build_info\{.*version="[^"]+".*\} 1\.0$', demo.metrics, re.M)
    for name in ("process_open_fds", "enrichd_jvm_process_resident_memory_bytes"):
        assert re.search(rf"^{name} [0-9.e+]+$", demo.metrics, re.M), name


def test_stopping_it_as_the_kubelet_does_ends_it_with_exit_0_within_the_grace(
    demo: DemoRun,
) -> None:
    """SIGTERM, SIGKILL only after terminationGracePeriodSeconds: exit 0 means the daemon
    finished its micro-batch and stopped Spark itself before the kill (which gives 137)."""
    assert demo.exits == [0, 0]
    for text in demo.logs:
        messages = [str(line["message"]) for line in json_lines(text)]
        assert "stopped" in messages
        assert "stop timeout reached; exiting without waiting for Spark" not in messages


def test_a_second_play_on_the_same_volume_resumes_and_writes_no_view_twice(
    demo: DemoRun,
) -> None:
    """Every view line names a tweet and its author's version (each profile update is
    renamed anew), so a view written twice, as a pipeline starting over or replaying a
    committed batch would, shows as the same line twice."""
    assert demo.views[: len(demo.views_before)] == demo.views_before
    assert len(demo.views) > len(demo.views_before)
    repeated = [line for line in set(demo.views) if demo.views.count(line) > 1]
    assert repeated == []
