"""The Helm chart renders what the kustomize tree renders, and refuses bad values.

``helm template`` of each mode is compared object by object with ``kubectl kustomize``
of the matching tree; only the labels saying which tool installed an object may differ,
and the Namespace, which helm leaves to ``--create-namespace``. The real helm (``make
helm``) lints and renders.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from pathlib import Path

import kubernetes_validate
import pytest
from zombied.config import DryRun, load_config

from . import helm
from .manifests import BASE, MANIFESTS, NAMESPACED, Obj, container, find, one, render

pytestmark = [pytest.mark.kubectl, pytest.mark.xdist_group("manifests")]

#: Labels that say which tool installed an object, and nothing about the object.
TOOL_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart")
NAMESPACED_VALUES = ("--set", "mode=namespaced", "--set", "namespaces={team-a,team-b}")
MONITORING_VALUES = tuple(
    arg
    for part in ("serviceMonitor", "prometheusRule", "dashboard")
    for arg in ("--set", f"monitoring.{part}.enabled=true")
)
#: Each mode: the chart's values, and the kustomize tree that must render the same.
MODES = {
    "cluster": ((), BASE),
    "namespaced": (NAMESPACED_VALUES, NAMESPACED),
    "monitoring": (MONITORING_VALUES, MANIFESTS / "overlays" / "monitoring"),
    "priority-class": (("--set", "priorityClass.create=true"), None),
}


def _comparable(objects: Iterable[Obj]) -> dict[tuple[str, str, str], Obj]:
    result = {}
    for original in objects:
        obj = copy.deepcopy(original)
        template = obj.get("spec", {}).get("template", {})
        for meta in (obj["metadata"], template.get("metadata", {})):
            for key in TOOL_LABELS:
                meta.get("labels", {}).pop(key, None)
        meta = obj["metadata"]
        result[obj["kind"], meta.get("namespace", ""), meta["name"]] = obj
    return result


def _priority_class_tree(directory: Path) -> Path:
    """The base with the priority-class component, as its README says to add it."""
    directory.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(MANIFESTS / "base", directory)
    component = os.path.relpath(MANIFESTS / "components" / "priority-class", directory)
    (directory / "kustomization.yaml").write_text(
        f"resources: [{base}]\ncomponents: [{component}]\n", encoding="utf-8"
    )
    return directory


def test_chart_lints() -> None:
    for values in ((), NAMESPACED_VALUES, MONITORING_VALUES):
        result = helm.run(["lint", "--strict", str(helm.CHART), *values])
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mode", sorted(MODES))
def test_chart_renders_what_kustomize_renders(mode: str, tmp_path: Path) -> None:
    values, tree = MODES[mode]
    kustomized = render(tree or _priority_class_tree(tmp_path / "priority-class"))
    expected = _comparable(obj for obj in kustomized if obj["kind"] != "Namespace")
    rendered = _comparable(helm.template(*values))
    assert sorted(rendered) == sorted(expected)
    for key, obj in expected.items():
        assert rendered[key] == obj, f"{'/'.join(key)} differs between helm and kustomize"


#: A bad value, and where helm's refusal (values.schema.json) must point: the value's
#: path in the values, or the key it does not know.
BAD_VALUES = {
    "negative replicas": (("--set", "replicaCount=-1"), "/replicaCount"),
    "fractional replicas": (("--set-json", "replicaCount=1.5"), "/replicaCount"),
    "unknown mode": (("--set", "mode=everywhere"), "/mode"),
    "numeric image tag": (("--set", "image.tag=1"), "/image/tag"),
    "unknown key": (("--set", "replicas=3"), "'replicas'"),
    "unknown nested key": (("--set", "image.name=x"), "'name'"),
    "namespaced without namespaces": (("--set", "mode=namespaced"), "/namespaces"),
    "bad namespace": (
        ("--set", "mode=namespaced", "--set", "namespaces={Team_A}"),
        "/namespaces/0",
    ),
    "cluster with namespaces": (("--set", "namespaces={team-a}"), "/namespaces"),
    "two priority classes": (
        ("--set", "priorityClass.create=true", "--set", "priorityClassName=high"),
        "/priorityClassName",
    ),
    "cpu limit of the wrong shape": (
        ("--set", "resources.limits.cpu=lots"),
        "/resources/limits/cpu",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
@pytest.mark.parametrize("command", ["lint", "template"])
def test_bad_values_are_refused_naming_the_value(command: str, case: str) -> None:
    values, where = BAD_VALUES[case]
    result = helm.run([command, str(helm.CHART), *values])
    assert result.returncode != 0, f"helm {command} accepted {values}"
    assert where in result.stdout + result.stderr


def test_values_reach_the_objects() -> None:
    objects = helm.template(
        *(
            "--set",
            "image.repository=registry.example.org/team/zombied",
            "--set",
            "image.tag=1.2.3",
        ),
        *("--set", "replicaCount=1", "--set", "priorityClassName=system-cluster-critical"),
        *("--set-json", 'extraArgs=["--dry-run","--exclude-namespaces=kube-system"]'),
        *("--set-json", 'tolerations=[{"key":"spot","operator":"Exists"}]'),
        *("--set", "resources.requests.cpu=50m", "--set", "imagePullSecrets[0].name=pull"),
        release="reaper",
        namespace="ops",
    )
    for obj in objects:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version() + ".0", strict=True)
    # Every name follows the release; the Lease too, which the leader-election Role allows.
    deployment = one(objects, "Deployment", "reaper-zombied")
    pod = deployment["spec"]["template"]["spec"]
    main = container(objects, "reaper-zombied")
    assert main["image"] == "registry.example.org/team/zombied:1.2.3"
    assert main["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["tolerations"] == [{"key": "spot", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["serviceAccountName"] == "reaper-zombied"
    args = [arg.replace("$(POD_NAMESPACE)", "ops") for arg in main["args"]]
    config = load_config(args[0], args[1:], {})
    assert (config.lease_name, config.lease_namespace) == ("reaper-zombied", "ops")
    assert config.dry_run == DryRun.CLIENT
    assert config.exclude_namespaces == ("kube-system",)
    role = one(objects, "Role", "reaper-zombied-leader-election")
    assert role["rules"][1]["resourceNames"] == ["reaper-zombied"]
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "reaper-zombied", "namespace": "ops"}
        ]
    one(objects, "Service", "reaper-zombied-metrics")
    # One replica: a budget of one would block every node drain.
    assert not find(objects, "PodDisruptionBudget")
