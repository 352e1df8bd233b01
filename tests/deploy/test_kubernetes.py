"""deploy/kubernetes, rendered, validated and played: what a platform team would apply.

Deployment tests (``pytest -m deploy``, run by ``.ci/containers``, which installs kubectl,
promtool and podman). No Kubernetes cluster can run on these machines, so:

- every overlay, the fleet's monitoring and two instances side by side in one namespace are
  rendered by ``kubectl kustomize`` and each resource is checked against the Kubernetes
  schemas of the oldest and of kubectl's own supported version (kubernetes-validate,
  strict: an unknown field fails), the Prometheus Operator's kinds being checked by promtool
  and by the names they use;
- what the manifests promise is checked on the rendered output: one daemon per checkpoint,
  restricted pods, probes, budgets, each instance selecting only its own pod, and each
  overlay's pipeline file valid in the image at the paths where the pod mounts it;
- every alert is checked by promtool and fires, in its unit tests, for the one instance
  whose series say so; each links to its runbook;
- the demo overlay is played under podman (tests/kube.py says how podman 4.3 is made to
  behave as a cluster would), following docs/operations.md's steps: the daemon's pod turns
  ready, views flow on the embedded broker, stopping it as the kubelet does ends it with
  exit 0 within its grace period, and a second play on the same volume resumes without
  writing any view twice.
"""

from __future__ import annotations

import json
import os
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
    kustomize,
    named,
    of_kind,
    play,
    pod_of_statefulset,
    pod_template,
    remove_played,
    render,
    selects,
    stop_gracefully,
    volume_sources,
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
FLEET = KUBERNETES / "fleet-monitoring"
OPERATIONS = ROOT / "docs" / "operations.md"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
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


def validated(docs: list[Doc], version: str) -> set[str]:
    """Check every resource but the operator's against the schemas; the kinds checked."""
    checked = set()
    for doc in docs:
        if doc["kind"] not in OPERATOR_KINDS:
            kubernetes_validate.validate(doc, version, strict=True)
            checked.add(doc["kind"])
    return checked


@pytest.mark.parametrize("overlay", OVERLAY_NAMES)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_overlay_renders_and_passes_the_kubernetes_schemas(
    overlay: str, version: str
) -> None:
    checked = validated(rendered(overlay), version)
    expected = {"ServiceAccount", "Service", "StatefulSet", "PodDisruptionBudget", "ConfigMap"}
    assert expected <= checked


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_fleets_monitoring_renders_and_passes_the_schemas(version: str) -> None:
    docs = render(FLEET)
    assert validated(docs, version) == {"ConfigMap"}
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "PrometheusRule"]


def test_the_base_renders_alone_and_overlays_add_only_what_they_say() -> None:
    """The base's Secret only names the one to make: it is never rendered, but the demo's."""
    base = render(KUBERNETES / "base")
    assert sorted(d["kind"] for d in base) == [
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    external = rendered("external")
    assert {d["kind"] for d in external} & OPERATOR_KINDS == {"ServiceMonitor"}
    assert not of_kind(external, "Secret")
    for overlay in ("demo", "spark-cluster"):  # runnable without the Prometheus Operator
        docs = rendered(overlay)
        assert not {d["kind"] for d in docs} & OPERATOR_KINDS
        credentials = named(docs, "Secret", "enrichd-credentials")
        assert "data" not in credentials and "stringData" not in credentials


def test_every_release_reference_names_the_projects_version() -> None:
    """The base's version label, the overlays' image tags, the remote bases' refs, the alerts'
    runbook links and the docs' commands all name pyproject.toml's version: a team that pins
    one release gets the manifests, images and runbooks of that release."""
    version = toml((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    for doc in render(KUBERNETES / "base"):
        assert doc["metadata"]["labels"]["app.kubernetes.io/version"] == version
    files = [*KUBERNETES.rglob("*.yaml"), OPERATIONS, ROOT / "docs" / "contributing.md"]
    text = "\n".join(f.read_text(encoding="utf-8") for f in files)
    # Concrete versions only: the docs also say vX.Y.Z where they mean any release.
    refs = set(re.findall(r"\?ref=v(\d[\w.]*)", text))
    refs |= set(re.findall(r"/blob/v(\d[\w.]*)/docs/", text))
    assert refs == {version}
    for overlay in OVERLAY_NAMES:
        for workload in workloads(rendered(overlay)):
            spec = pod_template(workload)["spec"]
            for box in [*spec.get("initContainers", []), *spec["containers"]]:
                assert box["image"].rsplit(":", 1)[1] == version, (overlay, box["image"])
    page = OPERATIONS.read_text(encoding="utf-8")
    assert set(re.findall(r"\benrichd(?:-dev)?:(\d[\w.]*)", page)) == {version}


# -- many instances in one namespace ---------------------------------------------------------


def instance_copy(folder: Path, name: str) -> Path:
    """overlays/external copied and named as a team names a service of its own: the prefix
    and the instance label of its kustomization.yaml, nothing else."""
    copy = folder / name
    shutil.copytree(OVERLAYS / "external", copy)
    path = copy / "kustomization.yaml"
    text = path.read_text(encoding="utf-8")
    text = text.replace("../../", f"{os.path.relpath(KUBERNETES, copy)}/")
    for old, new in (
        ("namePrefix: tweet-views-", f"namePrefix: {name}-"),
        ("app.kubernetes.io/instance: tweet-views", f"app.kubernetes.io/instance: {name}"),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return copy


@pytest.fixture(scope="module")
def two_instances(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    """Two services, `orders` and `clicks`, rendered into one namespace."""
    folder = tmp_path_factory.mktemp("instances")
    for name in ("orders", "clicks"):
        instance_copy(folder, name)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump({"namespace": "shop", "resources": ["orders", "clicks"]}), encoding="utf-8"
    )
    return kustomize(folder)


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_two_instances_render_side_by_side_and_pass_the_schemas(
    two_instances: list[Doc], version: str
) -> None:
    ids = [(d["kind"], d["metadata"]["name"]) for d in two_instances]
    assert len(ids) == len(set(ids)), "two objects of one name"
    assert {d["metadata"]["namespace"] for d in two_instances} == {"shop"}
    validated(two_instances, version)


def test_each_instance_selects_only_its_own_pod(two_instances: list[Doc]) -> None:
    """The StatefulSet, the Service, the PodDisruptionBudget and the ServiceMonitor of each
    instance match its pod and not the other's: a drain sees one budget per pod, each pod
    is scraped once. Each mounts its own ConfigMap and Secret, and claims its own volume."""
    daemons = of_kind(two_instances, "StatefulSet")
    assert sorted(d["metadata"]["name"] for d in daemons) == ["clicks-enrichd", "orders-enrichd"]
    for daemon in daemons:
        name = daemon["metadata"]["name"]
        instance = name.removesuffix("-enrichd")
        pod = pod_template(daemon)
        labels = pod["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == instance

        def selecting(kind: str, labels: dict[str, str] = labels) -> list[str]:
            found = []
            for doc in of_kind(two_instances, kind):
                spec = doc["spec"]
                selector = spec["selector"].get("matchLabels", spec["selector"])
                if matches(selector, labels):
                    found.append(doc["metadata"]["name"])
            return found

        assert selecting("StatefulSet") == [name]
        assert selecting("Service") == [daemon["spec"]["serviceName"]] == [name]
        assert selecting("PodDisruptionBudget") == [name]
        service = named(two_instances, "Service", name)
        assert selecting("ServiceMonitor", service["metadata"]["labels"]) == [name]
        monitor = named(two_instances, "ServiceMonitor", name)
        assert monitor["spec"]["podTargetLabels"] == ["app.kubernetes.io/instance"]
        config_maps, secrets = volume_sources(pod["spec"])
        assert all(n.startswith(f"{instance}-enrichd-") for n in config_maps | secrets)
        assert secrets == {f"{instance}-enrichd-credentials"}
        (claim,) = daemon["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["labels"]["app.kubernetes.io/instance"] == instance


def test_every_alert_and_the_dashboard_are_keyed_by_the_instance() -> None:
    """Applied once for the fleet, the alerts fire per instance (their unit tests show it on
    two instances side by side) and the dashboard shows one instance at a time."""
    for group in prometheus_rule()["spec"]["groups"]:
        for rule in group["rules"]:
            expr = " ".join(rule["expr"].split())
            if rule["alert"] == "EnrichdAbsent":  # no instance to name: none is there
                assert expr == 'absent(up{job="enrichd"})'
                continue
            assert "app_kubernetes_io_instance" in expr, rule["alert"]
            for selector in re.findall(r"\b(enrichd_\w+|up)\{([^}]*)\}", expr):
                assert 'job="enrichd"' in selector[1], (rule["alert"], selector)
    for expr in dashboard_exprs():
        for name, labels in re.findall(r"\b([a-z_]+)\{([^}]*)\}", expr):
            if name.startswith(("enrichd_", "process_")):
                assert 'app_kubernetes_io_instance="$instance"' in labels, expr
            else:
                assert 'pod=~"$pod"' in labels, expr


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
        boxes = [*pod.get("initContainers", []), *pod["containers"]]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name  # the image's user
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        for box in boxes:
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
    assert box["startupProbe"]["httpGet"] == {"path": "/livez", "port": HTTP_PORT}
    assert box["livenessProbe"]["httpGet"] == {"path": "/livez", "port": HTTP_PORT}
    assert box["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": HTTP_PORT}
    # The kubelet restarts a hung daemon within a minute of its own verdict, and gives a
    # first start minutes before the liveness probe counts.
    liveness, startup = box["livenessProbe"], box["startupProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] <= 60
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
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


def quantity(text: str) -> float:
    """A CPU or memory quantity of a manifest: cores, or GiB."""
    units = {"m": 1e-3, "Mi": 1 / 1024, "Gi": 1.0}
    for unit, factor in units.items():
        if text.endswith(unit):
            return float(text.removesuffix(unit)) * factor
    return float(text)


def test_the_demo_fits_a_node_of_2_vcpus_and_4_gib() -> None:
    """What docs/operations.md says of the demo: its pods request 0.7 CPU and 1.9 GiB,
    which leaves a 2-vCPU, 4 GiB node room for the cluster's own pods (a one-node
    minikube's control plane requests 0.75 CPU)."""
    cpu = memory = 0.0
    for workload in workloads(rendered("demo")):
        spec = pod_template(workload)["spec"]
        requests = [box["resources"]["requests"] for box in spec["containers"]]
        cpu += sum(quantity(r["cpu"]) for r in requests)
        memory += sum(quantity(r["memory"]) for r in requests)
    assert (round(cpu, 2), round(memory, 2)) == (0.7, 1.88)
    page = " ".join(OPERATIONS.read_text(encoding="utf-8").split())
    assert "its pods request 0.7 of a CPU and 1.9 GiB in all" in page


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
        # The Secret the docs and the overlay say to create is the one the pod mounts, with
        # exactly these keys.
        (secret,) = volume_sources(pod_template(daemon)["spec"])[1]
        for source in (OPERATIONS, OVERLAYS / "external" / "kustomization.yaml"):
            page = source.read_text(encoding="utf-8")
            assert sorted(set(re.findall(r"--from-file=([a-z.-]+)=", page))) == keys, source
            assert f"kubectl create secret generic {secret} -n NAMESPACE" in page, source


# -- monitoring ------------------------------------------------------------------------------


def prometheus_rule() -> Doc:
    return yaml.safe_load((FLEET / "prometheusrule.yaml").read_text(encoding="utf-8"))


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((FLEET / "enrichd-dashboard.json").read_text(encoding="utf-8"))
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


ALERTS = {
    "EnrichdAbsent",
    "EnrichdTargetMissing",
    "EnrichdDown",
    "EnrichdNotReady",
    "EnrichdRestarted",
    "EnrichdFlapping",
    "EnrichdOOMKilled",
    "EnrichdVolumeFillingUp",
    "EnrichdVolumeFull",
    "EnrichdPipelineStuck",
    "EnrichdPipelineRestarting",
    "EnrichdInputLagGrowing",
    "EnrichdEventTimeLagHigh",
    "EnrichdDeadLetterRatioHigh",
    "EnrichdOffsetReset",
    "EnrichdEndToEndLatencyHigh",
}


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
    assert set(alerts) == ALERTS
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
    tests = yaml.safe_load(unit.read_text(encoding="utf-8"))["tests"]
    expected = [
        (case["alertname"], alert["exp_labels"].get("app_kubernetes_io_instance"))
        for test in tests
        for case in test.get("alert_rule_test", [])
        for alert in case["exp_alerts"]
    ]
    assert {alert for alert, _ in expected} == set(alerts)  # every alert fires in a test ...
    assert {instance for alert, instance in expected if alert != "EnrichdAbsent"} == {"orders"}
    # ... for the instance whose series say so, beside `clicks`, whose series do not.


LAG_RULES_HEADING = "### Lag in Kafka's own tools: the pipeline's group"


def test_the_docs_rules_on_kafka_lag_exporters_series_fire_for_a_pipelines_group_only(
    tmp_path: Path,
) -> None:
    """docs/operations.md's sample rules: promtool checks them, and they fire for a lagging
    pipeline's group, never for its exactly-once markers (groups too, with offsets on the
    output topic that kafka-lag-exporter reports as lag)."""
    section = OPERATIONS.read_text(encoding="utf-8").split(LAG_RULES_HEADING, 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    (tmp_path / "rules.yaml").write_text(block.group(1), encoding="utf-8")
    done = subprocess.run(
        ["promtool", "check", "rules", "rules.yaml"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lagging = 'cluster_name="prod", group="enrichd.views"'
    markers = 'cluster_name="prod", group="enrichd.views.sink.5f0c.0"'
    unit = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"kafka_consumergroup_group_max_lag_seconds{{{lagging}}}",
                     "values": "600x40"},
                    {"series": f"kafka_consumergroup_group_max_lag_seconds{{{markers}}}",
                     "values": "99999x40"},
                    {"series": f'kafka_consumergroup_group_lag{{{lagging}, partition="0"}}',
                     "values": "2000+100x40"},
                    {"series": f'kafka_consumergroup_group_lag{{{markers}, partition="0"}}',
                     "values": "2000+100x40"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "35m",
                        "alertname": name,
                        "exp_alerts": [
                            {"exp_labels": {"severity": "warning", "cluster_name": "prod",
                                            "group": "enrichd.views"}}
                        ],
                    }
                    for name in ("EnrichdConsumerGroupLagHigh", "EnrichdConsumerGroupLagGrowing")
                ],
            }
        ],
    }  # fmt: skip
    (tmp_path / "unit.yaml").write_text(yaml.safe_dump(unit), encoding="utf-8")
    rules = yaml.safe_load(block.group(1))
    for rule in rules["groups"][0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules), encoding="utf-8")
    done = subprocess.run(
        ["promtool", "test", "rules", "unit.yaml"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation gone, - for space."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_alert_links_to_its_runbook_in_the_docs() -> None:
    """A section of docs/runbooks.md per alert, at the release's tag; and the sections on the
    situations behind them (a lost node, a stuck rollout, a full volume, a wedged StatefulSet
    after a bad ConfigMap)."""
    version = toml((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    page = RUNBOOKS.read_text(encoding="utf-8")
    anchors = heading_anchors(page)
    prefix = re.escape(f"/enrichd/blob/v{version}/docs/runbooks.md#")
    for group in prometheus_rule()["spec"]["groups"]:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            match = re.fullmatch(rf"https://github\.com/[\w.-]+{prefix}([\w-]+)", url)
            assert match, url
            assert match[1] == rule["alert"].lower() and match[1] in anchors, url
    for situation in ("a-lost-node", "a-stuck-rollout", "a-full-volume"):
        assert situation in anchors, situation
    assert "a-wedged-statefulset-after-a-bad-configmap" in anchors


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
        "kube_pod_container_resource_limits",
        "kube_pod_container_status_restarts_total",
        "kube_pod_container_status_last_terminated_reason",
        "kube_statefulset_replicas",
        "kube_statefulset_status_replicas_ready",
        "kubelet_volume_stats_available_bytes",
        "kubelet_volume_stats_capacity_bytes",
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
    }
    exprs = dashboard_exprs()
    exprs += [rule["expr"] for g in prometheus_rule()["spec"]["groups"] for rule in g["rules"]]
    used = {
        name
        for expr in exprs
        for name in re.findall(r"\b([a-z_]+)(?=\{|\[|\)| |$)", expr)
        if name.startswith(("enrichd_", "process_", "kube_", "kubelet_", "container_"))
        or name == "up"
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
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"  # job="enrichd"
    assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "enrichd"
    dashboard = named(render(FLEET), "ConfigMap", "enrichd-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["enrichd-dashboard.json"])["uid"] == "enrichd"


# -- the demo overlay under podman, as docs/operations.md says ----------------------------------


@dataclass(frozen=True)
class DemoSteps:
    """What docs/operations.md's steps for the demo name, for the play to follow."""

    commands: list[str]
    builds: dict[str, str]
    """Image name -> the tag and the Dockerfile target its `docker build` makes."""
    namespace: str
    overlay: str
    pod: str
    init_container: str
    views: str
    port: int
    paths: list[str]


def demo_steps() -> DemoSteps:
    """The commands of "From an empty namespace: the demo", each of the shape the play uses."""
    page = OPERATIONS.read_text(encoding="utf-8")
    section = page.split("### From an empty namespace: the demo", 1)[1].split("\n### ", 1)[0]
    commands = [" ".join(c.split()) for c in re.findall(r"`([^`]+)`", section)]
    builds = {}
    for command in commands:
        if found := re.fullmatch(
            r"docker build (--target (\w+) )?-t ([\w-]+):([\w.]+) \.", command
        ):
            builds[found[3]] = f"{found[4]} {found[2] or 'runtime'}"
    (apply,) = [c for c in commands if c.startswith("kubectl apply")]
    namespace, overlay = re.fullmatch(r"kubectl apply -n ([\w-]+) -k (\S+)", apply).groups()  # type: ignore[union-attr]
    (logs,) = [c for c in commands if c.startswith("kubectl logs") and "-f deploy/" in c]
    (forward,) = [c for c in commands if c.startswith("kubectl port-forward")]
    pod, port = re.fullmatch(
        rf"kubectl port-forward -n {namespace} pod/(\S+) (\d+)", forward
    ).groups()  # type: ignore[union-attr]
    (init,) = [c for c in commands if c.startswith(f"kubectl logs -n {namespace} {pod} -c ")]
    return DemoSteps(
        commands=commands,
        builds=builds,
        namespace=namespace,
        overlay=overlay,
        pod=pod,
        init_container=init.rsplit(" ", 1)[1],
        views=logs.rsplit("deploy/", 1)[1],
        port=int(port),
        paths=[
            *(c.split(f":{port}", 1)[1] for c in commands if c.startswith("curl ")),
            *(c for c in commands if c.startswith("/")),
        ],
    )


def test_the_docs_demo_steps_name_what_the_overlay_renders() -> None:
    """Each command of the steps, checked against what `kubectl apply -k` would create: the
    images it builds are the ones the overlay names, the pods, containers, Deployments,
    ports and paths it names exist. The play below follows the same steps."""
    steps = demo_steps()
    assert steps.commands[:2] == [
        "docker build -t enrichd:0.1.0 .",
        "docker build --target dev -t enrichd-dev:0.1.0 .",
    ]
    assert (ROOT / steps.overlay / "kustomization.yaml").is_file()
    overlay = yaml.safe_load((ROOT / steps.overlay / "kustomization.yaml").read_text("utf-8"))
    tags = {image["name"]: image["newTag"] for image in overlay["images"]}
    assert {name: build.split()[0] for name, build in steps.builds.items()} == tags
    assert re.search(r"^FROM \S+ AS dev$", (ROOT / "Dockerfile").read_text(), re.M)
    docs = render(ROOT / steps.overlay)
    daemon = daemon_of(docs)
    pod = pod_template(daemon)["spec"]
    assert steps.pod == f"{daemon['metadata']['name']}-0"
    assert [box["name"] for box in pod["initContainers"]] == [steps.init_container]
    assert named(docs, "Deployment", steps.views)
    assert {"containerPort": steps.port, "name": "http"} in pod["containers"][0]["ports"]
    assert set(steps.paths) == {"/readyz", "/livez", "/metrics"}
    (claim,) = daemon["spec"]["volumeClaimTemplates"]
    start_over = f"kubectl delete -n {steps.namespace} statefulset/{daemon['metadata']['name']}"
    assert f"{start_over} pvc/{claim['metadata']['name']}-{steps.pod}" in steps.commands
    images = {
        box["image"] for w in workloads(docs) for box in pod_template(w)["spec"]["containers"]
    }
    assert images == {f"{name}:{build.split()[0]}" for name, build in steps.builds.items()}


@dataclass
class DemoRun:
    """The demo overlay played, the daemon stopped, played again on its volume, stopped."""

    daemon: Doc
    first_ready: tuple[int, str]
    first_live: tuple[int, str]
    metrics: str
    inspected: dict[str, Any]
    processes: str
    exits: list[int]
    logs: list[str]
    memory: list[str]
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


def memory_used(box: str) -> str:
    """What `podman stats` says the container uses now (for BENCHMARKS.md's demo sizing)."""
    done = podman("stats", "--no-stream", "--format", "{{.MemUsage}}", box, check=False)
    return done.stdout.strip()


def wait_until(what: str, done: Any, log: Any, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"no {what}:\n{log()[-3000:]}"
        time.sleep(2)


@pytest.fixture(scope="module")
def demo(image: str, dev_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    """Steps 1 to 7 of docs/operations.md's demo, under podman: the images built (the
    fixtures), the overlay applied (played), the pod waited for, the views and the
    daemon's endpoints read, the pod deleted, and applied again on its claim."""
    steps = demo_steps()
    docs = render(ROOT / steps.overlay, {"enrichd": image, "enrichd-dev": dev_image})
    folder = tmp_path_factory.mktemp("kube-play")
    network = f"enrichd-kube-{uuid.uuid4().hex[:8]}"
    daemon = daemon_of(docs)
    pod, claims = pod_of_statefulset(daemon)
    name, box_name = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]
    assert name == steps.pod
    box = container(name, box_name)
    readiness = pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    liveness = pod["spec"]["containers"][0]["livenessProbe"]["httpGet"]
    views_box = container(f"{steps.views}-pod-0", "views")
    claim_volumes = [c["metadata"]["name"] for c in claims]
    for volume in claim_volumes:  # a checkpoint left by an earlier run would not fit the new broker
        podman("volume", "rm", "--force", volume, check=False)
    podman("network", "create", network)
    played: list[Played] = []
    try:
        # `kubectl apply`: every workload at once. The daemon's init container waits for the
        # sample data's topics, which a start without them would end with exit 1.
        for deployment in of_kind(docs, "Deployment"):
            played.append(play(docs, deployment, folder, network))
        first = play(docs, pod, folder, network, claims=claims)
        played.append(first)
        memory: list[str] = []

        def ready() -> bool:
            return probe(box, readiness["path"], readiness["port"])[0] == 200

        def flowing(at_least: int) -> bool:
            memory.append(memory_used(box))
            shown = views_shown(views_box)
            # Beyond the first load: a profile update fanned out to the author's tweets.
            return len(shown) >= at_least and any("(renamed" in line for line in shown)

        wait_until("ready daemon and views", lambda: ready() and flowing(201), lambda: logs(box))
        first_ready = probe(box, readiness["path"], steps.port)
        first_live = probe(box, liveness["path"], steps.port)
        metrics = probe(box, "/metrics", steps.port)[1]
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
        print(f"the demo daemon's container, `podman stats` while views flowed: {memory}")
        yield DemoRun(
            daemon, first_ready, first_live, metrics, inspected, processes, exits,
            daemon_logs, memory, views_before, views_shown(views_box),
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
    assert demo.first_live == (200, "ok\n")
    # Started once, after its init container saw the topics: no exit on a missing one.
    assert demo.inspected["RestartCount"] == 0
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
