"""Leader election over real HTTP: wire formats, conflicts, RBAC and one real handover.

The election logic itself is tested on an in-memory Lease in ``test_election``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from structlog.testing import capture_logs
from zombied.kube import open_api_client

from kubesim.rbac import PolicyRule
from tests.leader.conftest import LEASE, NAMESPACE, sim_leases, wait_for

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


RELAXED = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 1.0}


def _lease_requests(sim: Any, verb: str) -> list[Any]:
    return [r for r in sim.requests if r.resource == "leases" and r.verb == verb]


def _competitor(holder: str, lease_transitions: int = 0) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NAMESPACE},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": lease_transitions,
        },
    }


async def test_create_racing_another_candidate_loses_cleanly(campaign: Any, sim: Any) -> None:
    # The create is held back long enough for a competitor to create the lease first.
    sim.faults.add_latency(verb="create", resource="leases", seconds=0.4)
    with capture_logs() as logs:
        async with campaign() as c:
            cand = await c.add("late", **RELAXED)
            await wait_for(lambda: _lease_requests(sim, "get"), 2.0, "the 404 read")
            sim.store.create("leases", _competitor("early"))
            await wait_for(lambda: _lease_requests(sim, "create"), 2.0, "the create")
            assert [r.status for r in _lease_requests(sim, "create")] == [409]
            assert not cand.leading
            # The competitor never renews: its lease expires and the candidate takes over.
            await c.wait_leader(within=5.0)
            assert c.spec()["holderIdentity"] == "late"
            assert c.spec()["leaseTransitions"] == 1
    assert [e["op"] for e in logs if e["event"] == "leader.conflict"] == ["create"]
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]


async def test_update_with_a_stale_resource_version_loses_cleanly(campaign: Any, sim: Any) -> None:
    sim.store.create("leases", _competitor(""))  # released: free for the taking
    sim.faults.add_latency(verb="update", resource="leases", seconds=0.4)
    with capture_logs() as logs:
        async with campaign() as c:
            cand = await c.add("late", **RELAXED)
            await wait_for(lambda: _lease_requests(sim, "get"), 2.0, "the read")
            # Someone else takes the lease while our write (with the old version) waits.
            lease = c.lease()
            assert lease is not None
            lease["spec"] = _competitor("early", lease_transitions=1)["spec"]
            sim.store.update("leases", lease)
            await wait_for(lambda: _lease_requests(sim, "update"), 2.0, "the update")
            assert [r.status for r in _lease_requests(sim, "update")] == [409]
            assert not cand.leading
            assert c.spec()["holderIdentity"] == "early"
            await c.wait_leader(within=6.0)
            assert c.spec()["holderIdentity"] == "late"
            assert c.spec()["leaseTransitions"] == 2
    assert [e["op"] for e in logs if e["event"] == "leader.conflict"] == ["update"]
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]


async def test_timestamps_are_microsecond_rfc3339_utc(campaign: Any) -> None:
    async with campaign() as c:
        await c.add("a")
        await c.wait_leader()
        await c.wait_renewals(2)
        spec = c.spec()
    for key in ("acquireTime", "renewTime"):
        assert MICRO_TIME.match(spec[key]), spec[key]
    acquired = datetime.strptime(spec["acquireTime"], "%Y-%m-%dT%H:%M:%S.%f%z")
    renewed = datetime.strptime(spec["renewTime"], "%Y-%m-%dT%H:%M:%S.%f%z")
    assert acquired.tzinfo == UTC
    assert acquired < renewed


async def test_cancelled_leader_releases_and_a_standby_takes_over(campaign: Any) -> None:
    # A long lease: only the release can explain a takeover within the wait below.
    slow = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.2}
    with capture_logs() as logs:
        async with campaign() as c:
            for name in ("a", "b", "c"):
                await c.add(name, **slow)
            first = await c.wait_leader()
            first.stop()
            await wait_for(first.stopped.is_set, 2.0, "leader task to end")
            assert not first.leading
            assert first.changes[-1][1] is False

            second = await c.wait_leader(within=3.0)
            assert second is not first
            spec = c.spec()
            assert spec["holderIdentity"] == second.identity
            assert spec["leaseTransitions"] == 1

    released = [s.spec for s in c.seen if not s.spec.get("holderIdentity")]
    assert released, "the released record (empty holder) was never written"
    assert released[0]["leaseDurationSeconds"] == 1
    releases = [e["identity"] for e in logs if e["event"] == "leader.released"]
    assert releases[0] == first.identity
    # The standby found the lease free; it did not wait for it to expire.
    acquired = [e for e in logs if e["event"] == "leader.acquired"]
    assert acquired[-1]["identity"] == second.identity


async def test_forbidden_names_the_missing_rule_once(
    campaign: Any, sim: Any, tmp_path: Path
) -> None:
    token = sim.add_token("nobody", [PolicyRule(["coordination.k8s.io"], ["leases"], ["get"])])
    kubeconfig = sim.write_kubeconfig(tmp_path / "restricted", token=token)
    with capture_logs() as logs:
        async with campaign() as c:
            api = await c.stack.enter_async_context(open_api_client(str(kubeconfig)))
            cand = c.add_with("nobody", sim_leases(api))
            await wait_for(
                lambda: sum(1 for r in sim.requests if r.user == "nobody" and r.status == 403) >= 4,
                5.0,
                "repeated attempts",
            )
            assert not cand.leading
    forbidden = [e for e in logs if e["event"] == "leader.forbidden"]
    assert [e["log_level"] for e in forbidden].count("error") == 1
    # It may read the Lease (none exists yet) but not create it: the rule names the verb.
    assert forbidden[0]["missing_rule"] == (
        f"create leases in API group coordination.k8s.io in namespace {NAMESPACE}"
    )


async def test_the_shipped_role_grants_everything_the_elector_does(
    campaign: Any, sim: Any, tmp_path: Path
) -> None:
    shipped = Path(__file__).parents[2] / "manifests" / "base" / "leader-election-role.yaml"
    docs = [d for d in yaml.safe_load_all(shipped.read_text()) if d and d["kind"] == "Role"]
    for doc in docs:
        doc["metadata"]["namespace"] = NAMESPACE  # what kustomize's namespace: does
    role = tmp_path / "role.yaml"
    role.write_text(yaml.safe_dump_all(docs))
    token = sim.add_rbac_file(role, user="elector")
    kubeconfig = sim.write_kubeconfig(tmp_path / "elector", token=token)
    with capture_logs() as logs:
        async with campaign() as c:
            api = await c.stack.enter_async_context(open_api_client(str(kubeconfig)))
            cand = c.add_with("elector", sim_leases(api))
            await c.wait_leader()
            await c.wait_renewals(2)
            cand.stop()
            await wait_for(lambda: not c.spec().get("holderIdentity"), 2.0, "released lease")
    assert not [e for e in logs if e["event"] in ("leader.forbidden", "leader.error")]
    assert {r.status for r in sim.requests if r.user == "elector"} <= {200, 201, 404}
