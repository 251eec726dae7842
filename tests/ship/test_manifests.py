"""The kustomize manifests, rendered with the real ``kubectl kustomize``, validate against
the Kubernetes schemas (strictly) and say what we ship: probes, a locked-down security
context, a grace period above the drain timeout, a disruption budget that never blocks a
drain, the config file, the recommended labels, the leader-election Role limited to its
Lease. The kustomizations the docs show render what they say.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
from zombied.config import Config

from .manifests import (
    BASE,
    NAMESPACED,
    OVERLAY_NAMESPACES,
    ROOT,
    Obj,
    container,
    find,
    flag_value,
    mounted_files,
    one,
    overlay,
    pod_config,
    render,
)
from .markdown import code_blocks

# One process renders each variant once for all of these tests.
pytestmark = [pytest.mark.kubectl, pytest.mark.xdist_group("manifests")]

#: The oldest Kubernetes minor we support, and the newest the schema package knows.
SCHEMA_VERSIONS = ("1.31.0", kubernetes_validate.latest_version() + ".0")
RECOMMENDED_LABELS = {
    "app.kubernetes.io/name": "zombied",
    "app.kubernetes.io/instance": "zombied",
    "app.kubernetes.io/part-of": "zombied",
}
SELECTOR = {"app.kubernetes.io/name": "zombied", "app.kubernetes.io/instance": "zombied"}
VARIANTS = {"base": BASE, "namespaced": NAMESPACED}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def rendered(request: pytest.FixtureRequest) -> list[Obj]:
    return render(VARIANTS[request.param])


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return render(BASE)


@pytest.fixture(scope="module")
def namespaced() -> list[Obj]:
    return render(NAMESPACED)


def _config(objects: list[Obj], directory: Path) -> Config:
    """The configuration zombied runs with in the Deployment's pod, as the kubelet runs it."""
    config = pod_config(objects, "zombied", directory)
    assert config.command == "run"
    return config


def _documented(marker: str) -> list[str]:
    """The kustomizations the README and docs/operations.md show that hold ``marker``."""
    blocks = [
        block
        for page in (ROOT / "README.md", ROOT / "docs" / "operations.md")
        for block in code_blocks(page.read_text(encoding="utf-8"), "yaml")
        if block.startswith("# kustomization.yaml") and marker in block
    ]
    assert blocks, f"no kustomization with {marker!r} in the docs"
    return blocks


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schema(
    rendered: list[Obj], version: str
) -> None:
    assert rendered
    for obj in rendered:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - failure path
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} (k8s {version}): {exc.message}")


def test_every_object_carries_the_recommended_labels(rendered: list[Obj]) -> None:
    for obj in rendered:
        labels = obj["metadata"].get("labels", {})
        for key, value in RECOMMENDED_LABELS.items():
            assert labels.get(key) == value, f"{obj['kind']}/{obj['metadata']['name']}: {key}"


def test_everything_namespaced_lives_in_the_zombied_namespace(rendered: list[Obj]) -> None:
    one(rendered, "Namespace", "zombied")
    for kind in ("ServiceAccount", "Deployment", "PodDisruptionBudget", "Service"):
        for obj in find(rendered, kind):
            assert obj["metadata"]["namespace"] == "zombied", f"{kind}/{obj['metadata']['name']}"


def test_deployment_runs_two_replicas_with_leader_election(
    rendered: list[Obj], tmp_path: Path
) -> None:
    spec = one(rendered, "Deployment", "zombied")["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"] == SELECTOR
    assert SELECTOR.items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["template"]["spec"]["serviceAccountName"] == "zombied"
    # The arguments are valid zombied options, as the kubelet runs them.
    config = _config(rendered, tmp_path)
    assert (config.command, config.leader_elect) == ("run", True)
    assert (config.lease_namespace, config.log_format) == ("zombied", "json")


def test_probes_point_at_health_and_readiness(rendered: list[Obj], tmp_path: Path) -> None:
    main = container(rendered)
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    assert ports == {"http": 8080}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert _config(rendered, tmp_path).listen[1] == 8080


def test_metrics_are_scrapeable(rendered: list[Obj]) -> None:
    template = one(rendered, "Deployment", "zombied")["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8080"
    assert annotations["prometheus.io/path"] == "/metrics"
    service = one(rendered, "Service", "zombied-metrics")
    assert service["spec"]["selector"] == SELECTOR
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_grace_period_outlasts_the_drain_timeout(rendered: list[Obj], tmp_path: Path) -> None:
    pod_spec = one(rendered, "Deployment", "zombied")["spec"]["template"]["spec"]
    assert flag_value(container(rendered)["args"], "--drain-timeout") is not None
    drain = _config(rendered, tmp_path).drain_timeout
    # The kubelet's SIGKILL must come after zombied has drained and exited on its own.
    assert pod_spec["terminationGracePeriodSeconds"] >= drain + 5


def test_security_context_is_locked_down(rendered: list[Obj]) -> None:
    pod_spec = one(rendered, "Deployment", "zombied")["spec"]["template"]["spec"]
    pod_ctx = pod_spec["securityContext"]
    assert pod_ctx["runAsNonRoot"] is True
    assert pod_ctx["runAsUser"] == 65532
    assert pod_ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container(rendered)["securityContext"]
    assert ctx["runAsNonRoot"] is True
    assert ctx["runAsUser"] == 65532
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}


def test_resources_are_requested_and_memory_is_limited(rendered: list[Obj]) -> None:
    resources = container(rendered)["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert "memory" in resources["limits"]
    # No CPU limit: throttling a controller delays reaps; the request bounds scheduling.
    assert "cpu" not in resources["limits"]


def test_pod_identity_comes_from_the_downward_api(rendered: list[Obj]) -> None:
    env = {item["name"]: item for item in container(rendered)["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_replicas_spread_and_avoid_preemptible_nodes(rendered: list[Obj]) -> None:
    pod_spec = one(rendered, "Deployment", "zombied")["spec"]["template"]["spec"]
    anti = pod_spec["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    keys = {c["topologyKey"] for c in pod_spec["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    preferences = pod_spec["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    avoided = {
        expr["key"]
        for pref in preferences
        for expr in pref["preference"]["matchExpressions"]
        if expr["operator"] in ("DoesNotExist", "NotIn")
    }
    assert {"cloud.google.com/gke-preemptible", "cloud.google.com/gke-spot"} <= avoided
    assert "tolerations" not in pod_spec


def test_disruption_budget_keeps_one_replica_and_never_blocks_a_drain(
    rendered: list[Obj],
) -> None:
    pdb = one(rendered, "PodDisruptionBudget", "zombied")
    assert pdb["spec"]["minAvailable"] == 1
    # Replicas that are not ready (broken RBAC) are evicted whatever the budget says.
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"] == SELECTOR


def test_old_servers_get_everything_but_the_budget(base: list[Obj], tmp_path: Path) -> None:
    # Kubernetes before 1.27 has no unhealthyPodEvictionPolicy, 1.20 no policy/v1 at all.
    for index, block in enumerate(_documented("no-disruption-budget")):
        objects = render(overlay(tmp_path / str(index), block))
        assert not find(objects, "PodDisruptionBudget")
        assert objects == [obj for obj in base if obj["kind"] != "PodDisruptionBudget"]


def test_config_file_is_mounted_read_only_and_named_in_the_environment(
    rendered: list[Obj], tmp_path: Path
) -> None:
    main = container(rendered)
    assert main["volumeMounts"] == [
        {"name": "config", "mountPath": "/etc/zombied", "readOnly": True}
    ]
    env = {item["name"]: item.get("value") for item in main["env"]}
    assert env["ZOMBIED_CONFIG"] in mounted_files(rendered)
    # Empty: zombied's defaults.
    assert _config(rendered, tmp_path).rules.names == ("node-shutdown", "admission-rejected")


def test_an_overlay_replaces_the_config_file_and_rolls_the_pods(
    base: list[Obj], tmp_path: Path
) -> None:
    def config_map_name(objects: list[Obj]) -> str:
        pod = one(objects, "Deployment", "zombied")["spec"]["template"]["spec"]
        name: str = pod["volumes"][0]["configMap"]["name"]
        one(objects, "ConfigMap", name)
        return name

    rules = "rules:\n  - name: node-shutdown\n  - name: evicted\n    minAge: 1h\n"
    for index, block in enumerate(_documented("behavior: replace")):
        directory = overlay(tmp_path / str(index), block, {"config.yaml": rules})
        objects = render(directory)
        assert len(find(objects, "ConfigMap")) == 1
        # A new name is a new pod template: the pods roll.
        assert config_map_name(objects) != config_map_name(base)
        assert _config(objects, directory).rules.names == ("node-shutdown", "evicted")


def test_the_documented_port_patch_moves_the_probes_and_the_scrape(tmp_path: Path) -> None:
    (block,) = _documented("containerPort")
    objects = render(overlay(tmp_path, block))
    (port,) = container(objects)["ports"]
    annotations = one(objects, "Deployment", "zombied")["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert port["name"] == container(objects)["readinessProbe"]["httpGet"]["port"]
    listen = _config(objects, tmp_path).listen[1]
    assert listen == port["containerPort"] == int(annotations["prometheus.io/port"]) != 8080


def _rules(role: Obj) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {
        (group, resource, verb, tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_leader_election_role_is_limited_to_its_lease(rendered: list[Obj], tmp_path: Path) -> None:
    role = one(rendered, "Role", "zombied-leader-election")
    assert role["metadata"]["namespace"] == "zombied"
    assert _rules(role) == {
        ("coordination.k8s.io", "leases", "create", ()),
        ("coordination.k8s.io", "leases", "get", ("zombied",)),
        ("coordination.k8s.io", "leases", "update", ("zombied",)),
    }
    assert _config(rendered, tmp_path).lease_name == "zombied"
    binding = one(rendered, "RoleBinding", "zombied-leader-election")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "zombied", "namespace": "zombied"}
    ]


def test_namespaced_overlay_grants_only_the_watched_namespaces(
    namespaced: list[Obj], tmp_path: Path
) -> None:
    # Which verbs the roles hold is test_rbac_real's: exactly what the daemon needs.
    assert not find(namespaced, "ClusterRole")
    assert not find(namespaced, "ClusterRoleBinding")
    assert _config(namespaced, tmp_path).namespaces == OVERLAY_NAMESPACES
    for kind in ("Role", "RoleBinding"):
        where = {obj["metadata"]["namespace"] for obj in find(namespaced, kind, "zombied")}
        assert where == set(OVERLAY_NAMESPACES)


def test_namespaced_overlay_only_adds_the_namespaces(
    base: list[Obj], namespaced: list[Obj]
) -> None:
    # A patch appends one argument, so a change to the base's arguments reaches both.
    watched = "--namespaces=" + ",".join(OVERLAY_NAMESPACES)
    assert container(namespaced)["args"] == [*container(base)["args"], watched]
