"""The Helm chart renders what the kustomize tree renders, and refuses bad values.

``helm template`` of each mode is compared object by object with ``kubectl kustomize``
of the matching tree; only the labels saying which tool installed an object may differ,
the Namespace, which helm leaves to ``--create-namespace``, and how each tool rolls the
pods on a new config file (helm's annotation, kustomize's hashed ConfigMap name), which
is tested apart. The real helm (``make helm``) lints and renders.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from pydantic.alias_generators import to_camel
from zombied.config import OPTIONS, DryRun, load_config
from zombied.errors import ConfigError
from zombied.rules import SPEC_FIELDS

from . import helm
from .manifests import (
    BASE,
    MANIFESTS,
    NAMESPACED,
    ROOT,
    Obj,
    container,
    find,
    one,
    overlay,
    pod_config,
    render,
)
from .markdown import code_blocks

pytestmark = [pytest.mark.kubectl, pytest.mark.xdist_group("manifests")]

#: Labels that say which tool installed an object, and nothing about the object.
TOOL_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart")
NAMESPACED_VALUES = ("--set", "mode=namespaced", "--set", "namespaces={team-a,team-b}")
MONITORING_VALUES = tuple(
    arg
    for part in ("serviceMonitor", "prometheusRule", "dashboard")
    for arg in ("--set", f"monitoring.{part}.enabled=true")
)
#: The base with the priority-class component, as its comment says to add it.
PRIORITY_CLASS_TREE = """
resources: [path/to/zombied/manifests/base]
components: [path/to/zombied/manifests/components/priority-class]
"""
#: A server before Kubernetes 1.27: the base with the component that drops the budget.
OLD_SERVER_TREE = """
resources: [path/to/zombied/manifests/base]
components: [path/to/zombied/manifests/components/no-disruption-budget]
"""
#: Each mode: the chart's values, and the kustomize tree that must render the same (a
#: directory, or a kustomization of one's own as the component's comment shows it).
MODES: dict[str, tuple[tuple[str, ...], Path | str]] = {
    "cluster": ((), BASE),
    "namespaced": (NAMESPACED_VALUES, NAMESPACED),
    "monitoring": (MONITORING_VALUES, MANIFESTS / "overlays" / "monitoring"),
    "priority-class": (("--set", "priorityClass.create=true"), PRIORITY_CLASS_TREE),
    "kubernetes-1.20": (("--kube-version", "1.20.2"), OLD_SERVER_TREE),
    "kubernetes-1.26": (("--kube-version", "1.26.15"), OLD_SERVER_TREE),
}
#: How each tool rolls the pods when the config file changes: helm's pod template
#: annotation, kustomize's hash suffix on the ConfigMap's name.
CHECKSUM = "checksum/config"
HASHED = re.compile(r"(zombied-config)-[a-z0-9]{10}")


def _unhashed(name: str) -> str:
    return HASHED.sub(r"\1", name)


def _comparable(objects: Iterable[Obj]) -> dict[tuple[str, str, str], Obj]:
    result = {}
    for original in objects:
        obj = copy.deepcopy(original)
        template = obj.get("spec", {}).get("template", {})
        for meta in (obj["metadata"], template.get("metadata", {})):
            for key in TOOL_LABELS:
                meta.get("labels", {}).pop(key, None)
        template.get("metadata", {}).get("annotations", {}).pop(CHECKSUM, None)
        for volume in template.get("spec", {}).get("volumes", []):
            volume["configMap"]["name"] = _unhashed(volume["configMap"]["name"])
        meta = obj["metadata"]
        if obj["kind"] == "ConfigMap":
            meta["name"] = _unhashed(meta["name"])
            # The same file, whatever its comments.
            obj["data"] = {key: yaml.safe_load(text) for key, text in obj["data"].items()}
        result[obj["kind"], meta.get("namespace", ""), meta["name"]] = obj
    return result


def _values_file(directory: Path, values: Obj) -> tuple[str, str]:
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return ("-f", str(path))


def test_chart_lints() -> None:
    for values in ((), NAMESPACED_VALUES, MONITORING_VALUES):
        result = helm.run(["lint", "--strict", str(helm.CHART), *values])
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mode", sorted(MODES))
def test_chart_renders_what_kustomize_renders(mode: str, tmp_path: Path) -> None:
    values, tree = MODES[mode]
    kustomized = render(tree if isinstance(tree, Path) else overlay(tmp_path, tree))
    expected = _comparable(obj for obj in kustomized if obj["kind"] != "Namespace")
    rendered = _comparable(helm.template(*values))
    assert sorted(rendered) == sorted(expected)
    for key, obj in expected.items():
        assert rendered[key] == obj, f"{'/'.join(key)} differs between helm and kustomize"


#: A bad value, and what helm's refusal (values.schema.json) must name: the value's path
#: in the values, or the key it does not know.
BAD_VALUES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "negative replicas": (("--set", "replicaCount=-1"), ("/replicaCount",)),
    "fractional replicas": (("--set-json", "replicaCount=1.5"), ("/replicaCount",)),
    "unknown mode": (("--set", "mode=everywhere"), ("/mode",)),
    "numeric image tag": (("--set", "image.tag=1"), ("/image/tag",)),
    "unknown key": (("--set", "replicas=3"), ("'replicas'",)),
    "unknown nested key": (("--set", "image.name=x"), ("'name'",)),
    "namespaced without namespaces": (("--set", "mode=namespaced"), ("/namespaces",)),
    "bad namespace": (
        ("--set", "mode=namespaced", "--set", "namespaces={Team_A}"),
        ("/namespaces/0",),
    ),
    "cluster with namespaces": (("--set", "namespaces={team-a}"), ("/namespaces",)),
    "two priority classes": (
        ("--set", "priorityClass.create=true", "--set", "priorityClassName=high"),
        ("/priorityClassName",),
    ),
    "cpu limit of the wrong shape": (
        ("--set", "resources.limits.cpu=lots"),
        ("/resources/limits/cpu",),
    ),
    "listen port out of range": (("--set", "listenPort=0"), ("/listenPort",)),
    "config that is no map": (("--set", "config=rules"), ("/config",)),
    "config key zombied does not know": (("--set", "config.minage=1m"), ("'minage'",)),
    "rule without a name": (
        ("--set-json", 'config={"rules": [{"minAge": "1m"}]}'),
        ("/config/rules/0",),
    ),
    "rule field zombied does not know": (
        ("--set-json", 'config={"rules": [{"name": "x", "reason": ["Evicted"]}]}'),
        ("'reason'",),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
@pytest.mark.parametrize("command", ["lint", "template"])
def test_bad_values_are_refused_naming_the_value(command: str, case: str) -> None:
    values, named = BAD_VALUES[case]
    result = helm.run([command, str(helm.CHART), *values])
    assert result.returncode != 0, f"helm {command} accepted {values}"
    for name in named:
        assert name in result.stdout + result.stderr


#: Options the chart sets itself, given again in the values: the templates refuse them,
#: naming the option and the value that sets it instead. ``helm lint`` only logs a
#: template's refusal; ``helm template``, ``install`` and ``upgrade`` stop on it.
CHART_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "listen in extraArgs": (
        ("--set-json", 'extraArgs=["--dry-run", "--listen=0.0.0.0:9090"]'),
        ("--listen", "listenPort"),
    ),
    "lease name in extraArgs": (
        ("--set-json", 'extraArgs=["--lease-name=other"]'),
        ("--lease-name", "fullnameOverride"),
    ),
    "config file in extraArgs": (
        ("--set-json", 'extraArgs=["--config=/etc/rules.yaml"]'),
        ("--config", "set config"),
    ),
    "listen in config": (("--set", "config.listen=0.0.0.0:9090"), ("config: listen", "listenPort")),
    "namespaces in config": (
        ("--set-json", 'config={"namespaces": ["team-a"]}'),
        ("config: namespaces", "mode=namespaced"),
    ),
}


@pytest.mark.parametrize("case", sorted(CHART_OPTIONS))
def test_the_charts_own_options_are_refused_naming_what_sets_them(case: str) -> None:
    values, named = CHART_OPTIONS[case]
    result = helm.run(["template", str(helm.CHART), *values])
    assert result.returncode != 0, f"helm template accepted {values}"
    for name in named:
        assert name in result.stderr


def test_config_schema_takes_exactly_the_keys_zombied_reads(tmp_path: Path) -> None:
    schema = json.loads((helm.CHART / "values.schema.json").read_text(encoding="utf-8"))
    config = schema["properties"]["config"]
    assert config["additionalProperties"] is False

    def zombied_reads(key: str) -> bool:
        # A key with no value leaves the option's default; an unknown one is refused.
        path = tmp_path / f"{key}.yaml"
        path.write_text(f"{key}:\n", encoding="utf-8")
        try:
            load_config("run", ["--config", str(path)], {})
        except ConfigError:
            return False
        return True

    candidates = {to_camel(option.name) for option in OPTIONS} | set(config["properties"])
    assert {key for key in candidates if zombied_reads(key)} == set(config["properties"])
    rule = config["properties"]["rules"]["items"]
    assert (rule["additionalProperties"], set(rule["properties"])) == (False, set(SPEC_FIELDS))


#: A rule of one's own, as docs/rules.md shows one.
GPU_RULE = {
    "name": "gpu-not-ready",
    "phases": ["Failed"],
    "reasons": ["UnexpectedAdmissionError"],
    "minAge": "10m",
}


def test_config_is_the_file_zombied_reads_and_a_new_one_rolls_the_pods(tmp_path: Path) -> None:
    config = {"rules": [{"name": "node-shutdown", "minAge": "1m"}, GPU_RULE], "qps": 5}
    objects = helm.template(*_values_file(tmp_path, {"config": config}))
    assert container(objects)["volumeMounts"] == [
        {"name": "config", "mountPath": "/etc/zombied", "readOnly": True}
    ]
    loaded = pod_config(objects, "zombied", tmp_path / "pod")
    assert set(loaded.rules.names) == {"node-shutdown", "gpu-not-ready"}
    assert loaded.qps == 5

    def checksum(objects: list[Obj]) -> str:
        template = one(objects, "Deployment", "zombied")["spec"]["template"]
        annotation: str = template["metadata"]["annotations"][CHECKSUM]
        return annotation

    assert checksum(helm.template(*_values_file(tmp_path, {"config": config}))) == checksum(objects)
    config["rules"][0]["minAge"] = "2m"
    rolled = {
        checksum(objects),
        checksum(helm.template(*_values_file(tmp_path, {"config": config}))),
    }
    rolled.add(checksum(helm.template()))
    assert len(rolled) == 3


def test_the_documented_values_files_install_what_they_say(tmp_path: Path) -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = [
        block
        for page in pages
        for block in code_blocks(page.read_text(encoding="utf-8"), "yaml")
        if block.startswith("# values.yaml")
    ]
    assert blocks
    for index, block in enumerate(blocks):
        values = yaml.safe_load(block)
        path = tmp_path / f"values-{index}.yaml"
        path.write_text(block, encoding="utf-8")
        objects = helm.template("-f", str(path))
        loaded = pod_config(objects, "zombied", tmp_path / str(index))
        assert set(loaded.rules.names) == {rule["name"] for rule in values["config"]["rules"]}


def test_listen_port_moves_the_probes_and_the_scrape_with_it(tmp_path: Path) -> None:
    objects = helm.template("--set", "listenPort=9090")
    main = container(objects)
    assert main["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
    assert main["livenessProbe"]["httpGet"]["port"] == "http"
    assert main["readinessProbe"]["httpGet"]["port"] == "http"
    assert pod_config(objects, "zombied", tmp_path).listen[1] == 9090
    template = one(objects, "Deployment", "zombied")["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == "9090"
    assert one(objects, "Service", "zombied-metrics")["spec"]["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize(
    ("server", "budget"),
    [("1.20.2", False), ("1.26.15", False), ("1.27.0", True), ("1.37.2", True)],
)
def test_disruption_budget_only_where_it_never_blocks_a_drain(server: str, budget: bool) -> None:
    budgets = find(helm.template("--kube-version", server), "PodDisruptionBudget")
    assert len(budgets) == budget
    for pdb in budgets:
        # Replicas that are not ready (broken RBAC) are evicted whatever the budget.
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        assert pdb["spec"]["minAvailable"] == 1
        minor = ".".join(server.split(".")[:2])
        kubernetes_validate.validate(pdb, f"{minor}.0", strict=True)


def test_values_reach_the_objects(tmp_path: Path) -> None:
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
    config = pod_config(objects, "ops", tmp_path, "reaper-zombied")
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
    assert pod["volumes"][0]["configMap"]["name"] == "reaper-zombied-config"
    # One replica: a budget of one would block every node drain.
    assert not find(objects, "PodDisruptionBudget")
