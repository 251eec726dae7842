"""Leader election over real HTTP: conflicts between candidates, and RBAC.

The election logic itself is tested on an in-memory Lease in ``test_election``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs
from zombied.kube import open_kube

from kubesim import PolicyRule, Simulator
from tests.leader.conftest import LEASE, LONG, NAMESPACE, wait_for

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
SHIPPED_ROLE = Path(__file__).parents[2] / "manifests" / "base" / "leader-election-role.yaml"


def spec(sim: Simulator) -> dict[str, Any]:
    lease = sim.store.get("leases", NAMESPACE, LEASE)
    return dict(lease["spec"]) if lease else {}


@pytest.mark.parametrize(("write", "won"), [("create", 201), ("update", 200)])
async def test_of_two_candidates_racing_one_write_exactly_one_wins(
    campaign: Any, sim: Simulator, write: str, won: int
) -> None:
    if write == "update":  # a released lease: taken over with an update
        sim.store.create(
            "leases",
            {"metadata": {"name": LEASE, "namespace": NAMESPACE}, "spec": {"holderIdentity": ""}},
        )
    # Both candidates read the lease before either write reaches it.
    sim.faults.add_latency(verb=write, resource="leases", seconds=0.3)
    with capture_logs() as logs:
        async with campaign() as c:
            a = await c.add("a", **LONG)
            b = await c.add("b", **LONG)
            leader = await c.wait_leader()
            await wait_for(lambda: len(sim.requests.filter(write, "leases")) >= 2, 2.0, "writes")
            first_two = [r.status for r in sim.requests.filter(write, "leases")[:2]]
            assert sorted(first_two) == [won, 409]
            loser = b if leader is a else a
            assert loser.changes == []
    conflicts = [(e["identity"], e["verb"]) for e in logs if e["event"] == "leader.conflict"]
    assert conflicts == [(loser.identity, write)]
    assert not [e for e in logs if e["log_level"] in ("warning", "error", "critical")]


async def test_a_refused_write_is_reported_through_the_ledger_and_retried(
    campaign: Any, sim: Simulator, tmp_path: Path
) -> None:
    token = sim.add_token("elector", [PolicyRule(["coordination.k8s.io"], ["leases"], ["get"])])
    kubeconfig = sim.write_kubeconfig(tmp_path / "elector", token=token)
    refused = lambda: sim.requests.filter("create", "leases", 403)  # noqa: E731
    with capture_logs() as logs:
        async with open_kube(str(kubeconfig)) as kube, campaign() as c:
            cand = await c.add("elector", kube)
            await wait_for(lambda: len(refused()) >= 3, 5.0, "refused creates, retried")
            assert cand.changes == []
            assert kube.permissions.problems() == [
                "forbidden, missing RBAC rule: create leases in API group "
                f"coordination.k8s.io in namespace {NAMESPACE}"
            ]
            # Granting the shipped Role is all it takes: the next retry takes the lease.
            docs = [d for d in yaml.safe_load_all(SHIPPED_ROLE.read_text()) if d["kind"] == "Role"]
            for doc in docs:
                doc["metadata"]["namespace"] = NAMESPACE  # what kustomize's namespace: does
            role = tmp_path / "role.yaml"
            role.write_text(yaml.safe_dump_all(docs))
            sim.add_rbac_file(role, user="elector")
            await c.wait_leader()
            assert kube.permissions.problems() == []
            renewals = len(sim.requests.filter("update", "leases", 200))
            await wait_for(
                lambda: len(sim.requests.filter("update", "leases", 200)) > renewals, 2.0, "renewal"
            )
    assert spec(sim)["holderIdentity"] == ""  # released on the way out, as the Role allows
    events = [e["event"] for e in logs]
    assert events.count("api.forbidden") == 1
    assert events.count("api.permitted") == 1
    assert not [e for e in logs if e["event"] == "leader.error"]
    assert {r.status for r in sim.requests if r.user == "elector"} <= {200, 201, 403, 404}
