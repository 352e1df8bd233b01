"""Kubernetes manifests for the tests: rendering overlays, and playing them under podman.

``kubectl kustomize`` renders an overlay as a cluster would receive it (kubectl's built-in
kustomize; no cluster needed). :func:`render` can pin the image the way a platform team
does, with an overlay of its own that names the one to test in ``images:``.

``podman kube play`` (Debian 12's podman, 4.3.1) runs Pods and Deployments with their
ConfigMaps, Secrets and PersistentVolumeClaims, but not the rest, and it differs from a
cluster in ways measured here, each handled as a cluster would behave:

- It cannot play a StatefulSet ("YAML document does not contain any supported kube kind"):
  :func:`pod_of_statefulset` makes the Pod its controller would make, ``NAME-0`` from its
  template, with a PersistentVolumeClaim ``CLAIM-NAME-0`` per claim template.
- It has no Services: a pod is known on the network by its pod name only (a Deployment's
  as ``NAME-pod-0``). :func:`play` gives each played workload, as a network alias, the name
  of every Service that selects it, as cluster DNS would.
- A claim's volume outlives its pod (``kube down`` leaves it), but playing the claim again
  fails ("volume already exists"): a second play leaves out the claims already there, as a
  StatefulSet's claims stay bound across its pods.
- ``kube down`` stops pods with no grace at all (SIGKILL at once: exit 137, measured), and
  ``terminationGracePeriodSeconds`` is not read. :func:`stop_gracefully` stops a pod as the
  kubelet deletes one: SIGTERM, then SIGKILL only after the pod's grace period.
- A ConfigMap or Secret volume is kept as a podman volume of its name, reused by later
  plays, and an emptyDir volume becomes a podman volume of the volume's name, shared by
  every pod that names one alike (measured: the broker's files showed in the daemon's
  ``/tmp``). :func:`play` names each emptyDir after its pod, as a cluster gives every pod
  its own, and :func:`remove_played` removes them all, and the secrets, with the pods.
- An init container is started, then removed at once while it still runs ("failed to
  remove once init container ... as it is running", podman 4.3.1, measured): :func:`play`
  runs each to its end first, as a pod of its own with the volumes it mounts, and plays
  the pod without it once it has exited 0, as the kubelet starts a pod's containers only
  after its init containers succeeded.
- Readiness probes are not run (a liveness probe becomes a healthcheck that needs systemd's
  timers): the tests probe the pod themselves, inside it, at the probe's path and port.
- A Secret's ``data`` reaches its files base64-encoded, not decoded, and ``stringData`` not
  at all (podman 4.3.1, measured): the demo's Secret is empty, and the secrets from files
  are tested outside podman (tests/test_connecting.py).
"""

from __future__ import annotations

import copy
import os
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.podman import podman

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = KUBERNETES / "overlays"
Doc = dict[str, Any]


def kustomize(folder: Path) -> list[Doc]:
    """``kubectl kustomize FOLDER``, parsed: every document of the rendered output."""
    done = subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render(overlay: Path, images: dict[str, str] | None = None) -> list[Doc]:
    """An overlay rendered; with ``images`` (``enrichd`` and ``enrichd-dev`` to the images to
    use), through an overlay of it that pins them, as a platform team does."""
    if not images:
        return kustomize(overlay)
    with tempfile.TemporaryDirectory() as tmp:
        pinned = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            # kustomize takes resources by relative path only.
            "resources": [os.path.relpath(overlay, tmp)],
            "images": [
                {
                    "name": name,
                    "newName": image.rsplit(":", 1)[0],
                    "newTag": image.rsplit(":", 1)[1],
                }
                for name, image in images.items()
            ],
        }
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(pinned), encoding="utf-8")
        return kustomize(Path(tmp))


def of_kind(docs: Iterable[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def named(docs: Iterable[Doc], kind: str, name: str) -> Doc:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def pod_template(workload: Doc) -> Doc:
    return workload["spec"]["template"]  # type: ignore[no-any-return]


def selects(service: Doc, labels: dict[str, str]) -> bool:
    selector = service["spec"].get("selector") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_names(docs: Iterable[Doc], workload: Doc) -> list[str]:
    """The Services whose selector matches the workload's pods: their names resolve to it."""
    pod = workload if workload["kind"] == "Pod" else pod_template(workload)
    labels = pod["metadata"].get("labels", {})
    return [s["metadata"]["name"] for s in of_kind(docs, "Service") if selects(s, labels)]


def pod_of_statefulset(statefulset: Doc) -> tuple[Doc, list[Doc]]:
    """The pod ``NAME-0`` a StatefulSet's controller makes, and its claims ``CLAIM-NAME-0``."""
    name = statefulset["metadata"]["name"]
    template = copy.deepcopy(pod_template(statefulset))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template.get("metadata", {}), "name": f"{name}-0"},
        "spec": template["spec"],
    }
    claims = []
    for claim in statefulset["spec"].get("volumeClaimTemplates", []):
        claim_name = f"{claim['metadata']['name']}-{name}-0"
        claims.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim_name},
                "spec": claim["spec"],
            }
        )
        pod["spec"].setdefault("volumes", []).append(
            {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}}
        )
    return pod, claims


def grace_period_s(pod: Doc) -> int:
    """The pod's ``terminationGracePeriodSeconds`` (Kubernetes' default: 30)."""
    return int(pod["spec"].get("terminationGracePeriodSeconds", 30))


@dataclass
class Played:
    """What one :func:`play` created, to take down and remove again."""

    file: Path
    pods: list[str]
    volumes: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)


def volume_sources(spec: Doc) -> tuple[set[str], set[str]]:
    """The ConfigMaps and the Secrets a pod spec's volumes name."""
    volumes = spec.get("volumes", [])
    config_maps = {v["configMap"]["name"] for v in volumes if "configMap" in v}
    secrets = {v["secret"]["secretName"] for v in volumes if "secret" in v}
    return config_maps, secrets


def own_empty_dirs(spec: Doc, owner: str) -> set[str]:
    """Rename the pod spec's emptyDir volumes (and their mounts) ``OWNER-NAME``; the names."""
    renamed = {
        v["name"]: f"{owner}-{v['name']}" for v in spec.get("volumes", []) if "emptyDir" in v
    }
    for volume in spec.get("volumes", []):
        volume["name"] = renamed.get(volume["name"], volume["name"])
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for mount in container.get("volumeMounts", []):
            mount["name"] = renamed.get(mount["name"], mount["name"])
    return set(renamed.values())


def play(
    docs: list[Doc],
    workload: Doc,
    folder: Path,
    network: str,
    *,
    claims: list[Doc] | None = None,
) -> Played:
    """``podman kube play`` one workload (a Pod or a Deployment) with the ConfigMaps and
    Secrets of ``docs`` it mounts and ``claims``, on ``network``, with the names of its
    Services as aliases."""
    kind, name = workload["kind"], workload["metadata"]["name"]
    workload = copy.deepcopy(workload)
    spec = workload["spec"] if kind == "Pod" else pod_template(workload)["spec"]
    for init in spec.pop("initContainers", []):
        run_to_its_end(docs, name, spec, init, folder, network)
    config_maps, secrets = volume_sources(spec)
    scratch = own_empty_dirs(spec, name)
    played = [
        *(d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] in config_maps),
        *(d for d in of_kind(docs, "Secret") if d["metadata"]["name"] in secrets),
        *(claims or []),
        workload,
    ]
    file = folder / f"{kind.lower()}-{name}.yaml"
    file.write_text(yaml.safe_dump_all(played), encoding="utf-8")
    aliases = ",".join(f"alias={alias}" for alias in service_names(docs, workload))
    podman("kube", "play", "--network", f"{network}:{aliases}" if aliases else network, str(file))
    if kind == "Pod":
        pods = [name]
    else:
        pods = [f"{name}-pod-{i}" for i in range(workload["spec"].get("replicas", 1))]
    return Played(file, pods, sorted(config_maps | secrets | scratch), sorted(secrets))


def run_to_its_end(
    docs: list[Doc], pod: str, spec: Doc, init: Doc, folder: Path, network: str
) -> None:
    """Run a pod's init container to its end, as a pod of its own with the volumes it
    mounts, and fail unless it exits 0: the kubelet starts the pod's containers only then."""
    mounted = {mount["name"] for mount in init.get("volumeMounts", [])}
    alone = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{pod}-{init['name']}"},
        "spec": {
            **{k: v for k, v in spec.items() if k not in ("containers", "volumes")},
            "restartPolicy": "Never",
            "containers": [init],
            "volumes": [v for v in spec.get("volumes", []) if v["name"] in mounted],
        },
    }
    played = play(docs, alone, folder, network)
    try:
        box = container(alone["metadata"]["name"], init["name"])
        done = podman("wait", box, timeout=600)
        assert done.stdout.strip() == "0", podman("logs", box, check=False).stderr[-3000:]
    finally:
        remove_played(played)


def container(pod: str, name: str) -> str:
    """The podman name of a played pod's container."""
    return f"{pod}-{name}"


def stop_gracefully(pod: str, grace_s: int) -> None:
    """Stop a pod as the kubelet deletes one: SIGTERM, SIGKILL after ``grace_s`` seconds."""
    podman("pod", "stop", "--time", str(grace_s), pod, timeout=grace_s + 60)


def remove_played(played: Played) -> None:
    """``kube down`` the play's pods, then remove its ConfigMap and Secret volumes and secrets."""
    podman("kube", "down", str(played.file), check=False, timeout=120)
    for pod in played.pods:
        podman("pod", "rm", "--force", pod, check=False)
    for volume in played.volumes:
        podman("volume", "rm", "--force", volume, check=False)
    for secret in played.secrets:
        podman("secret", "rm", secret, check=False)
