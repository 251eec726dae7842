"""Leader election against the simulator: one leader, clean handovers, safe step-down."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs
from zombied.kube import open_api_client

from kubesim.rbac import PolicyRule
from kubesim.status import ApiError
from tests.leader.conftest import LEASE, NAMESPACE, Campaign, wait_for

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


async def test_three_candidates_elect_exactly_one(campaign: Any) -> None:
    async with campaign() as c:
        for name in ("a", "b", "c"):
            await c.add(name)
        leader = await c.wait_leader()
        await c.wait_renewals(8)

        assert c.leaders() == [leader]
        spec = c.spec()
        assert spec["holderIdentity"] == leader.identity
        assert spec["leaseTransitions"] == 0
        assert spec["leaseDurationSeconds"] == 2  # 1.5 s rounded up, never down
        assert all(len(cand.changes) == 0 for cand in c.candidates if cand is not leader)
        # Renewals keep the term's acquireTime and never count as transitions.
        assert {seen.spec["acquireTime"] for seen in c.seen} == {spec["acquireTime"]}
        assert {seen.spec["leaseTransitions"] for seen in c.seen} == {0}


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


async def test_release_keeps_renew_time_and_clears_holder(campaign: Any) -> None:
    async with campaign() as c:
        only = await c.add("only")
        await c.wait_leader()
        await c.wait_renewals(2)
        last = c.spec()
        only.stop()
        await wait_for(lambda: not c.spec().get("holderIdentity"), 2.0, "released lease")
        spec = c.spec()
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["acquireTime"] == last["acquireTime"]
    assert spec["renewTime"] >= last["renewTime"]
    assert spec["leaseTransitions"] == last["leaseTransitions"]


async def test_release_method_gives_up_for_good(campaign: Any) -> None:
    async with campaign() as c:
        a = await c.add("a")
        await c.wait_leader()
        b = await c.add("b")
        await a.elector.release()
        assert not a.leading
        assert a.changes[-1][1] is False
        await wait_for(lambda: b.leading, 3.0, "b to take over")
        await c.wait_renewals(5)
        assert not a.leading
        assert [leading for _, leading in a.changes] == [True, False]


async def test_each_change_of_holder_counts_one_transition(campaign: Any) -> None:
    async with campaign() as c:
        for name in ("a", "b", "c"):
            await c.add(name)
        seen_leaders = []
        for expected in range(3):
            leader = await c.wait_leader()
            seen_leaders.append(leader.identity)
            assert c.spec()["leaseTransitions"] == expected
            if expected < 2:
                leader.stop()
                await wait_for(leader.stopped.is_set, 2.0, "leader to stop")
        assert sorted(seen_leaders) == ["a", "b", "c"]
    holders = [s.spec["holderIdentity"] for s in c.seen]
    # a term, its release (empty holder), the next term, ...: three holders, two handovers.
    assert [h for i, h in enumerate(holders) if h and (i == 0 or holders[i - 1] != h)] == (
        seen_leaders
    )


async def test_leader_wait_returns_when_leading(campaign: Any) -> None:
    async with campaign() as c:
        a = await c.add("a")
        await a.elector.leadership.wait()
        assert a.leading
        await a.elector.leadership.wait()  # already leading: returns at once


def _last_seen_renewal(c: Campaign, holder: str) -> float:
    """Loop time at which a standby first saw the holder's last successful write."""
    return max(s.at for s in c.seen if s.spec.get("holderIdentity") == holder)


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"kind": "error", "status": 503}, id="503"),
        pytest.param({"kind": "error", "status": 500}, id="500"),
        pytest.param({"kind": "latency", "seconds": 2.0}, id="latency"),
    ],
)
async def test_failing_leader_steps_down_before_its_lease_expires(
    campaign: Any, sim: Any, fault: dict[str, Any]
) -> None:
    with capture_logs() as logs:
        async with campaign() as c:
            for name in ("a", "b", "c"):
                await c.add(name)
            leader = await c.wait_leader()
            await c.wait_renewals(2)

            if fault["kind"] == "error":
                rule = sim.faults.add_error(
                    verb="update", resource="leases", status=fault["status"]
                )
            else:
                rule = sim.faults.add_latency(
                    verb="update", resource="leases", seconds=fault["seconds"]
                )
            await wait_for(lambda: not leader.changes[-1][1], 3.0, "leader to step down")
            assert not leader.leading
            lost_at = leader.changes[-1][0]
            duration = c.spec()["leaseDurationSeconds"]
            expires_for_standby = _last_seen_renewal(c, leader.identity) + duration
            assert lost_at < expires_for_standby
            assert c.leaders() == []

            sim.faults.remove(rule)
            successor = await c.wait_leader(within=5.0)
            assert successor.changes[-1][0] > lost_at

    lost = [e for e in logs if e["event"] == "leader.lost"]
    assert lost[0]["identity"] == leader.identity
    assert lost[0]["reason"] == "renew deadline exceeded"
    # Each kind of error is reported once per outage, not once per retry.
    loud = [e for e in logs if e["event"] == "leader.error" and e["log_level"] == "warning"]
    per_kind = {(e["identity"], e["op"], e["code"]) for e in loud}
    assert len(loud) == len(per_kind)


async def test_partitioned_leader_steps_down_before_a_standby_takes_over(
    campaign: Any,
) -> None:
    async with campaign() as c:
        for name in ("a", "b", "c"):
            await c.add(name)
        leader = await c.wait_leader()
        await c.wait_renewals(2)
        # Only this replica loses the API server: nothing listens on port 9 here.
        leader.api.configuration.host = "http://127.0.0.1:9"
        await wait_for(lambda: not leader.changes[-1][1], 3.0, "leader to step down")
        assert not leader.leading
        lost_at = leader.changes[-1][0]
        successor = await c.wait_leader(within=5.0)
        assert successor is not leader
        gained_at = successor.changes[-1][0]
        duration = c.spec()["leaseDurationSeconds"]
        assert lost_at < _last_seen_renewal(c, leader.identity) + duration
        assert lost_at < gained_at
        assert c.spec()["leaseTransitions"] == 1


async def test_lease_changed_behind_the_leaders_back_is_reread(campaign: Any, sim: Any) -> None:
    with capture_logs() as logs:
        async with campaign() as c:
            leader = await c.add("a")
            await c.wait_leader()
            await c.wait_renewals(1)
            # Someone else writes the lease (a label, say): the leader's next write
            # carries a stale resourceVersion and gets 409, then reads and renews.
            lease = c.lease()
            assert lease is not None
            lease["metadata"].setdefault("labels", {})["touched"] = "yes"
            sim.store.update("leases", lease)
            await c.wait_renewals(3)
            assert leader.leading
            assert [leading for _, leading in leader.changes] == [True]
            assert c.lease()["metadata"]["labels"] == {"touched": "yes"}  # type: ignore[index]
    assert [e for e in logs if e["event"] == "leader.conflict" and e["op"] == "update"]


async def test_lease_taken_by_another_holder_stops_the_leader_at_once(
    campaign: Any, sim: Any
) -> None:
    async with campaign() as c:
        a = await c.add("a")
        b = await c.add("b")
        leader = await c.wait_leader()
        standby = b if leader is a else a
        lease = c.lease()
        assert lease is not None
        lease["spec"]["holderIdentity"] = "intruder"
        lease["spec"]["leaseTransitions"] += 1
        sim.store.update("leases", lease)
        await wait_for(lambda: not leader.leading, 2.0, "leader to notice")
        assert leader.elector.holder == "intruder"
        # The intruder never renews: after a lease duration one of ours takes over.
        await c.wait_leader(within=5.0)
        assert c.spec()["leaseTransitions"] == 2
        assert standby.changes or leader.changes[-1][1]


async def test_forbidden_names_the_missing_rule_once(
    campaign: Any, sim: Any, tmp_path: Path
) -> None:
    token = sim.add_token("nobody", [PolicyRule(["coordination.k8s.io"], ["leases"], ["get"])])
    kubeconfig = sim.write_kubeconfig(tmp_path / "restricted", token=token)
    with capture_logs() as logs:
        async with campaign() as c, open_api_client(str(kubeconfig)) as api:
            cand = c.add_with("nobody", api)
            await wait_for(
                lambda: sum(1 for r in sim.requests if r.user == "nobody" and r.status == 403) >= 4,
                5.0,
                "repeated attempts",
            )
            assert not cand.leading
    forbidden = [e for e in logs if e["event"] == "leader.forbidden"]
    assert [e["log_level"] for e in forbidden].count("error") == 1
    assert forbidden[0]["missing_rule"] == (
        f"get/create/update leases in API group coordination.k8s.io in namespace {NAMESPACE}"
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
        async with campaign() as c, open_api_client(str(kubeconfig)) as api:
            cand = c.add_with("elector", api)
            await c.wait_leader()
            await c.wait_renewals(2)
            cand.stop()
            await wait_for(lambda: not c.spec().get("holderIdentity"), 2.0, "released lease")
    assert not [e for e in logs if e["event"] in ("leader.forbidden", "leader.error")]
    assert {r.status for r in sim.requests if r.user == "elector"} <= {200, 201, 404}


async def test_shutdown_does_not_hang_when_the_release_cannot_be_written(
    campaign: Any, sim: Any
) -> None:
    with capture_logs() as logs:
        async with campaign() as c:
            a = await c.add("a")
            b = await c.add("b")
            leader = await c.wait_leader()
            standby = b if leader is a else a
            sim.faults.add_latency(verb="update", resource="leases", seconds=5.0)
            leader.stop()
            # The shielded release gives up after its own short timeout.
            await wait_for(leader.stopped.is_set, 2.0, "the leader's task to end")
            assert c.spec()["holderIdentity"] == leader.identity
            sim.faults.clear()
            # Not released: the standby waits for the lease to expire, then takes over.
            await wait_for(lambda: standby.leading, 5.0, "expiry takeover")
    failed = [e for e in logs if e["event"] == "leader.error" and e["op"] == "release"]
    assert [e["identity"] for e in failed] == [leader.identity]
    assert leader.identity not in [e["identity"] for e in logs if e["event"] == "leader.released"]


async def test_release_rereads_a_lease_changed_since_the_last_renewal(
    campaign: Any, sim: Any
) -> None:
    with capture_logs() as logs:
        async with campaign() as c:
            only = await c.add("only")
            await c.wait_leader()
            lease = c.lease()
            assert lease is not None
            lease["metadata"]["labels"] = {"touched": "yes"}
            sim.store.update("leases", lease)
            only.stop()  # before the elector could see the change
            await wait_for(only.stopped.is_set, 2.0, "the elector to stop")
            released = c.lease()
    assert released is not None
    assert released["spec"]["holderIdentity"] == ""
    assert released["metadata"]["labels"] == {"touched": "yes"}
    assert [e["op"] for e in logs if e["event"] == "leader.conflict"] == ["release"]
    assert [e["reason"] for e in logs if e["event"] == "leader.released"] == ["shutdown"]


@pytest.mark.parametrize("lands", ["before the release", "after the release"])
async def test_stopped_during_an_unanswered_create_leaves_the_lease_free(
    campaign: Any, sim: Any, tmp_path: Path, lands: str
) -> None:
    # A real API server may apply a create whose client already gave up, before or after
    # the replica's release; the simulator drops it, so the test applies it in its place.
    token = sim.add_token(
        "standby",
        [PolicyRule(["coordination.k8s.io"], ["leases"], ["get", "update"])],
    )
    kubeconfig = sim.write_kubeconfig(tmp_path / "standby", token=token)
    slow = sim.faults.add_latency(verb="create", resource="leases", seconds=5.0)
    async with campaign() as c:
        # The standby may not create the lease, so the slow create is the leader's.
        api = await c.stack.enter_async_context(open_api_client(str(kubeconfig)))
        standby = c.add_with("standby", api)
        leader = await c.add("leader", lease_duration=10.0, renew_deadline=2.0, retry_period=1.0)
        await wait_for(lambda: slow.fired > 0, 2.0, "the slow create")
        sim.faults.remove(slow)
        late = _competitor("leader")
        late["spec"]["leaseDurationSeconds"] = 10
        if lands == "before the release":
            sim.store.create("leases", late)
        leader.stop()
        await wait_for(leader.stopped.is_set, 3.0, "the leader's task to end")
        if lands == "after the release":
            with pytest.raises(ApiError) as refused:
                sim.store.create("leases", late)
            assert refused.value.code == 409
        await wait_for(lambda: standby.leading, 3.0, "the standby's takeover")
        assert not leader.changes or leader.changes[-1][1] is False
