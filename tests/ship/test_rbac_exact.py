"""The shipped RBAC is exactly what the daemon needs: enough, and nothing more.

The daemon runs in-process against the simulator with a token that holds exactly the
rules rendered from ``manifests/`` for zombied's ServiceAccount, with the Deployment's
own arguments. A node is preempted; the zombies must be reaped, the Lease acquired and
``Reaped`` Events recorded without a single 403. Then each (rule, verb) is removed in
turn and the daemon must run into a 403 for exactly that verb and resource: a
permission no request needs would fail this test, as would a request the manifests do
not allow.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from zombied.config import Config, load_config
from zombied.daemon import Daemon
from zombied.rules import Rule

from kubesim import Simulator
from kubesim.rbac import rules_from_yaml, service_account_user
from kubesim.scenario import namespace_object
from tests.helpers import eventually

from .manifests import BASE, NAMESPACED, OVERLAY_NAMESPACES, Obj, container, render

pytestmark = [pytest.mark.kubectl]

OWN_NAMESPACE = "zombied"
SERVICE_ACCOUNT = f"system:serviceaccount:{OWN_NAMESPACE}:zombied"
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
SCENARIO_TIMEOUT = 30.0
REFUSAL_TIMEOUT = 20.0


@dataclass(frozen=True)
class Variant:
    """What one install of the manifests gives zombied: its RBAC and its arguments."""

    rbac: list[Obj]
    args: list[str]
    namespaces: tuple[str, ...]


def _variant(directory: Path, namespaces: tuple[str, ...]) -> Variant:
    objects = render(directory)
    rbac = [obj for obj in objects if obj["kind"] in RBAC_KINDS]
    # The kubelet expands $(VAR) in args from the container's env.
    args = [a.replace("$(POD_NAMESPACE)", OWN_NAMESPACE) for a in container(objects)["args"]]
    return Variant(rbac, args, namespaces)


def _without(rbac: list[Obj], role: tuple[str, str, str], index: int, verb: str) -> list[Obj]:
    """``rbac`` with ``verb`` removed from rule ``index`` of ``role`` (kind, ns, name)."""
    result = copy.deepcopy(rbac)
    for obj in result:
        meta = obj["metadata"]
        if (obj["kind"], meta.get("namespace", ""), meta["name"]) == role:
            rule = obj["rules"][index]
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            if not rule["verbs"]:
                del obj["rules"][index]
    return result


@dataclass(frozen=True)
class Removal:
    role: tuple[str, str, str]
    index: int
    verb: str
    resource: str

    @property
    def id(self) -> str:
        kind, namespace, name = self.role
        where = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
        return f"{where}:{self.resource}:{self.verb}"


def _removals(rbac: list[Obj]) -> list[Removal]:
    removals = []
    for obj in rbac:
        if obj["kind"] not in ("Role", "ClusterRole"):
            continue
        meta = obj["metadata"]
        role = (obj["kind"], meta.get("namespace", ""), meta["name"])
        for index, rule in enumerate(obj["rules"]):
            for resource in rule["resources"]:
                removals.extend(Removal(role, index, verb, resource) for verb in rule["verbs"])
    return removals


def _collect() -> tuple[dict[str, Variant], list[tuple[str, Removal]]]:
    if shutil.which("kubectl") is None:
        return {}, []
    variants = {
        "base": _variant(BASE, ()),
        "namespaced": _variant(NAMESPACED, OVERLAY_NAMESPACES),
    }
    cases = [("base", removal) for removal in _removals(variants["base"].rbac)]
    # The overlay's own Roles; its leader-election Role is the base's, covered above.
    cases.extend(
        ("namespaced", removal)
        for removal in _removals(variants["namespaced"].rbac)
        if removal.role[1] in OVERLAY_NAMESPACES
    )
    return variants, cases


VARIANTS, REMOVALS = _collect()


def _config(variant: Variant, kubeconfig: Path) -> Config:
    argv = [*variant.args[1:], "--kubeconfig", str(kubeconfig)]
    config = load_config(variant.args[0], argv, {})
    # Test pace: zombies due at once, probes on a free port, a lease that turns over fast.
    return replace(
        config,
        rules=replace(config.rules, rules=(Rule("node-shutdown", 0.0),)),
        listen_host="127.0.0.1",
        listen_port=0,
        lease_duration=4.0,
        renew_deadline=3.0,
        retry_period=0.5,
        drain_timeout=5.0,
    )


def _token(sim: Simulator, rbac: list[Obj]) -> str:
    text = yaml.safe_dump_all(rbac)
    assert service_account_user(text) == SERVICE_ACCOUNT
    return sim.add_token(SERVICE_ACCOUNT, rules_from_yaml(text, source="manifests"))


def _prepare(sim: Simulator, namespaces: tuple[str, ...]) -> None:
    sim.store.create("namespaces", namespace_object(OWN_NAMESPACE))
    sim.cluster.build(nodes=3, pods=24, namespaces=namespaces or OVERLAY_NAMESPACES)


def _refused(sim: Simulator) -> list[Any]:
    return [r for r in sim.requests if r.status == 403]


async def _reap_one_node(sim: Simulator, daemon: Daemon, namespaces: tuple[str, ...]) -> None:
    """Preempt a node while the daemon runs; wait for every consequence we rely on."""
    await eventually(daemon.ready, timeout=SCENARIO_TIMEOUT, message="daemon ready")
    node = sorted(n["metadata"]["name"] for n in sim.store.list("nodes"))[0]
    preempted = sim.cluster.preempt(node)
    zombies = {uid for _, _, uid in preempted.zombies}
    assert zombies, "the preempted node ran no pod"

    def reaped() -> bool:
        return zombies <= {r.obj["metadata"]["uid"] for r in sim.deleted if not r.dry_run}

    await eventually(reaped, timeout=SCENARIO_TIMEOUT, message="every zombie deleted")

    def lease_held() -> bool:
        lease = sim.store.get("leases", OWN_NAMESPACE, "zombied")
        return lease is not None and lease["spec"].get("holderIdentity") == daemon.identity

    await eventually(lease_held, timeout=SCENARIO_TIMEOUT, message="lease held")

    def events_recorded() -> bool:
        reasons = {(e["metadata"]["namespace"], e.get("reason")) for e in sim.store.list("events")}
        return all((ns, "Reaped") in reasons for ns, _, _ in preempted.zombies)

    await eventually(events_recorded, timeout=SCENARIO_TIMEOUT, message="Reaped events")
    if namespaces:
        touched = {r.namespace for r in sim.requests if r.resource in ("pods", "events")}
        assert touched <= set(namespaces)


@pytest.mark.parametrize("directory", [BASE, NAMESPACED], ids=["base", "namespaced"])
async def test_manifest_rbac_is_enough(sim: Simulator, tmp_path: Path, directory: Path) -> None:
    namespaces = OVERLAY_NAMESPACES if directory == NAMESPACED else ()
    variant = _variant(directory, namespaces)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=_token(sim, variant.rbac))
    _prepare(sim, namespaces)
    async with Daemon(_config(variant, kubeconfig)) as daemon:
        await _reap_one_node(sim, daemon, namespaces)
    assert not _refused(sim), [(r.verb, r.resource, r.namespace) for r in _refused(sim)]
    assert {r.user for r in sim.requests if r.resource} == {SERVICE_ACCOUNT}


@pytest.mark.parametrize(
    ("variant_name", "removal"), REMOVALS, ids=[f"{v}-{r.id}" for v, r in REMOVALS]
)
async def test_every_rule_is_needed(
    sim: Simulator, tmp_path: Path, variant_name: str, removal: Removal
) -> None:
    variant = VARIANTS[variant_name]
    rbac = _without(variant.rbac, removal.role, removal.index, removal.verb)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=_token(sim, rbac))
    _prepare(sim, variant.namespaces)
    # Zombies exist before start: every code path (list, watch, delete, Event, Lease)
    # runs without waiting for anything.
    node = sorted(n["metadata"]["name"] for n in sim.store.list("nodes"))[0]
    sim.cluster.preempt(node)

    def refused_here() -> bool:
        namespace = removal.role[1]
        return any(
            r.verb == removal.verb
            and r.resource == removal.resource
            and (not namespace or r.namespace == namespace)
            for r in _refused(sim)
        )

    failure: BaseException | None = None
    try:
        with anyio.fail_after(REFUSAL_TIMEOUT + 10):
            async with Daemon(_config(variant, kubeconfig)):
                await eventually(refused_here, timeout=REFUSAL_TIMEOUT)
    except Exception as exc:  # the daemon may stop on a refusal: that is a failure too
        failure = exc
    assert refused_here(), (
        f"without {removal.id} the daemon got no 403 for {removal.verb} {removal.resource}: "
        f"the rule is not needed ({failure!r})"
    )
