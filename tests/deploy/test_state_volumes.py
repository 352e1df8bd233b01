"""deploy/kubernetes, rendered: Spark's scratch space, with the state's working copy, is on a
volume sized for it, not in the pod's small /tmp.

Deployment tests (``pytest -m deploy``, run by ``.ci/containers``, which installs kubectl).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kube import OVERLAYS, Doc, named, of_kind, pod_template, render

pytestmark = pytest.mark.deploy


def mounted_volume(pod: Doc, box: Doc, path: str) -> Doc:
    """The volume that holds ``path`` in the container ``box``, by its deepest mount."""
    mounts = [m for m in box["volumeMounts"] if Path(path).is_relative_to(m["mountPath"])]
    assert mounts, f"{path} is on no volume of {box['name']}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return next(v for v in pod["volumes"] if v["name"] == mount["name"])


def environment(box: Doc) -> dict[str, str]:
    return {e["name"]: e["value"] for e in box.get("env", []) if "value" in e}


@pytest.mark.parametrize("overlay", ["demo", "external", "spark-cluster"])
def test_the_state_s_working_copy_is_on_a_volume_of_its_own_with_storage_requested(
    overlay: str,
) -> None:
    docs = render(OVERLAYS / overlay)
    (daemon,) = (  # the StatefulSet that runs `daemon run`, whatever the overlay names it
        s
        for s in of_kind(docs, "StatefulSet")
        if pod_template(s)["spec"]["containers"][0]["args"][0] == "run"
    )
    pod = pod_template(daemon)["spec"]
    box = pod["containers"][0]
    scratch = environment(box)["ENRICHD_SPARK_LOCAL_DIR"]
    volume = mounted_volume(pod, box, scratch)
    assert volume["name"] == "spark-local" and volume["emptyDir"]["sizeLimit"] == "8Gi"
    # A folder inside the volume, which enrichd makes private (the volume itself is not).
    mount = next(m for m in box["volumeMounts"] if m["name"] == "spark-local")
    assert Path(scratch).parent == Path(mount["mountPath"])
    if overlay != "spark-cluster":
        assert box["resources"]["requests"]["ephemeral-storage"] == "4Gi"
    else:  # the executors hold the state, on their workers' scratch: the driver holds none
        worker = pod_template(named(docs, "Deployment", "enrichd-spark-worker"))["spec"]
        box = worker["containers"][0]
        volume = mounted_volume(worker, box, environment(box)["SPARK_LOCAL_DIRS"])
        assert volume["name"] == "spark-local"
        assert "ephemeral-storage" in box["resources"]["requests"]
