"""Election logic on an in-memory Lease and fake loop time: terms, handovers, step-down.

Waiting out leases, deadlines and retries costs no real time here; what only a real API
server can show (wire formats, conflicts over HTTP, RBAC) is in ``test_election_http``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from structlog.testing import capture_logs

from tests.leader.conftest import Campaign, wait_for
from tests.leader.memory import LeaseServer

pytestmark = pytest.mark.looptime

#: A lease far longer than any wait below: only a release explains a quick takeover.
LONG = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.2}


def record(holder: str, *, duration: int = 1, transitions: int = 0) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": transitions,
        },
    }


def touched(server: LeaseServer, **spec: Any) -> None:
    """Someone else writes the lease (a label, or a new holder)."""
    lease = server.lease
    assert lease is not None
    lease["metadata"].setdefault("labels", {})["touched"] = "yes"
    lease["spec"].update(spec)
    server.write(lease)


def last_seen_renewal(c: Campaign, holder: str) -> float:
    """Loop time at which a standby first saw the holder's last successful write."""
    return max(s.at for s in c.seen if s.spec.get("holderIdentity") == holder)


async def test_three_candidates_elect_exactly_one(memory_campaign: Any) -> None:
    async with memory_campaign() as c:
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


async def test_stopped_leader_releases_and_a_standby_takes_over_at_once(
    memory_campaign: Any,
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            for name in ("a", "b", "c"):
                await c.add(name, **LONG)
            first = await c.wait_leader()
            stopped_at = anyio.current_time()
            first.stop()
            await wait_for(first.stopped.is_set, 2.0, "leader task to end")
            assert not first.leading
            second = await c.wait_leader(within=1.0)
            assert second is not first
            # At the standby's next retry (at most 2.2 retry periods), not after 30 s.
            assert second.changes[-1][0] - stopped_at <= 2.2 * LONG["retry_period"]
            assert c.spec()["leaseTransitions"] == 1
    released = [s.spec for s in c.seen if not s.spec.get("holderIdentity")]
    assert released[0]["leaseDurationSeconds"] == 1
    # The first release is the stopped leader's (the campaign's end releases the second).
    assert next(e["identity"] for e in logs if e["event"] == "leader.released") == first.identity


async def test_release_keeps_renew_time_and_clears_holder(memory_campaign: Any) -> None:
    async with memory_campaign() as c:
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


async def test_release_method_gives_up_for_good(memory_campaign: Any) -> None:
    async with memory_campaign() as c:
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


async def test_each_change_of_holder_counts_one_transition(memory_campaign: Any) -> None:
    async with memory_campaign() as c:
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


async def test_waiting_for_leadership_returns_when_leading(memory_campaign: Any) -> None:
    async with memory_campaign() as c:
        a = await c.add("a")
        await a.elector.leadership.wait()
        assert a.leading
        await a.elector.leadership.wait()  # already leading: returns at once


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"errors": 503}, id="503"),
        pytest.param({"errors": 500}, id="500"),
        pytest.param({"latency": 2.0}, id="latency"),
    ],
)
async def test_failing_leader_steps_down_before_its_lease_expires(
    memory_campaign: Any, fault: dict[str, Any]
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            for name in ("a", "b", "c"):
                await c.add(name)
            leader = await c.wait_leader()
            await c.wait_renewals(2)

            ((kind, value),) = fault.items()
            getattr(leader.leases, kind)["replace"] = value
            await wait_for(lambda: not leader.changes[-1][1], 3.0, "leader to step down")
            assert not leader.leading
            lost_at = leader.changes[-1][0]
            expires_for_standby = (
                last_seen_renewal(c, leader.identity) + c.spec()["leaseDurationSeconds"]
            )
            assert lost_at < expires_for_standby
            assert c.leaders() == []

            del getattr(leader.leases, kind)["replace"]
            successor = await c.wait_leader(within=5.0)
            assert successor.changes[-1][0] >= lost_at

    lost = [e for e in logs if e["event"] == "leader.lost"]
    assert lost[0]["identity"] == leader.identity
    assert lost[0]["reason"] == "renew deadline exceeded"
    # Each kind of error is reported once per outage, not once per retry.
    loud = [e for e in logs if e["event"] == "leader.error" and e["log_level"] == "warning"]
    per_kind = {(e["identity"], e["op"], e["code"]) for e in loud}
    assert len(loud) == len(per_kind)


async def test_a_leader_whose_renewals_hang_stops_acting_at_its_deadline(
    memory_campaign: Any,
) -> None:
    async with memory_campaign() as c:
        leader = await c.add("a")
        await c.wait_leader()
        await c.wait_renewals(1)
        leadership = leader.elector.leadership
        deadline = anyio.current_time() + leader.elector.renew_deadline
        leader.leases.latency["replace"] = 60.0
        async with anyio.create_task_group() as tg:

            async def act() -> None:
                with leadership.acting():
                    await anyio.sleep_forever()

            tg.start_soon(act)
            await wait_for(lambda: leadership.in_flight == 1, 1.0, "an action in flight")
            await wait_for(lambda: leadership.in_flight == 0, 2.0, "the action to be cancelled")
        assert not leadership.leading
        assert leadership.lost_at is not None
        assert leadership.lost_at <= deadline


async def test_partitioned_leader_steps_down_before_a_standby_takes_over(
    memory_campaign: Any,
) -> None:
    async with memory_campaign() as c:
        for name in ("a", "b", "c"):
            await c.add(name)
        leader = await c.wait_leader()
        await c.wait_renewals(2)
        leader.leases.partitioned = True  # only this replica loses the API server
        await wait_for(lambda: not leader.changes[-1][1], 3.0, "leader to step down")
        lost_at = leader.changes[-1][0]
        successor = await c.wait_leader(within=5.0)
        assert successor is not leader
        gained_at = successor.changes[-1][0]
        duration = c.spec()["leaseDurationSeconds"]
        assert lost_at < last_seen_renewal(c, leader.identity) + duration
        assert lost_at < gained_at
        assert c.spec()["leaseTransitions"] == 1


async def test_lease_changed_behind_the_leaders_back_is_reread(
    memory_campaign: Any, server: LeaseServer
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            leader = await c.add("a")
            await c.wait_leader()
            await c.wait_renewals(1)
            # The leader's next write carries a stale resourceVersion: 409, read, renew.
            touched(server)
            await c.wait_renewals(3)
            assert leader.leading
            assert [leading for _, leading in leader.changes] == [True]
            assert c.lease()["metadata"]["labels"] == {"touched": "yes"}  # type: ignore[index]
    assert [e for e in logs if e["event"] == "leader.conflict" and e["op"] == "update"]


async def test_lease_taken_by_another_holder_stops_the_leader_at_once(
    memory_campaign: Any, server: LeaseServer
) -> None:
    async with memory_campaign() as c:
        a = await c.add("a")
        b = await c.add("b")
        leader = await c.wait_leader()
        standby = b if leader is a else a
        touched(server, holderIdentity="intruder", leaseTransitions=1)
        await wait_for(lambda: not leader.leading, 2.0, "leader to notice")
        assert leader.elector.holder == "intruder"
        # The intruder never renews: after a lease duration one of ours takes over.
        await c.wait_leader(within=5.0)
        assert c.spec()["leaseTransitions"] == 2
        assert standby.changes or leader.changes[-1][1]


async def test_shutdown_does_not_hang_when_the_release_cannot_be_written(
    memory_campaign: Any,
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            a = await c.add("a")
            b = await c.add("b")
            leader = await c.wait_leader()
            standby = b if leader is a else a
            leader.leases.latency["replace"] = 5.0
            leader.stop()
            # The shielded release gives up after its own short timeout.
            await wait_for(leader.stopped.is_set, 2.0, "the leader's task to end")
            assert c.spec()["holderIdentity"] == leader.identity
            # Not released: the standby waits for the lease to expire, then takes over.
            await wait_for(lambda: standby.leading, 5.0, "expiry takeover")
    failed = [e for e in logs if e["event"] == "leader.error" and e["op"] == "release"]
    assert [e["identity"] for e in failed] == [leader.identity]
    assert leader.identity not in [e["identity"] for e in logs if e["event"] == "leader.released"]


async def test_release_rereads_a_lease_changed_since_the_last_renewal(
    memory_campaign: Any, server: LeaseServer
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            only = await c.add("only")
            await c.wait_leader()
            touched(server)
            only.stop()  # before the elector could see the change
            await wait_for(only.stopped.is_set, 2.0, "the elector to stop")
            released = c.lease()
    assert released is not None
    assert released["spec"]["holderIdentity"] == ""
    assert released["metadata"]["labels"] == {"touched": "yes"}
    assert [e["op"] for e in logs if e["event"] == "leader.conflict"] == ["release"]
    assert [e["reason"] for e in logs if e["event"] == "leader.released"] == ["shutdown"]


async def test_a_refused_create_is_reported_once_when_the_release_repeats_it(
    memory_campaign: Any,
) -> None:
    # A create cut short by shutdown may still land, so the release creates the lease
    # free in its place; where create is forbidden, the release meets the rule the
    # campaign already reported, and must name it, not report another.
    with capture_logs() as logs:
        async with memory_campaign() as c:
            cand = await c.add("cand", **LONG)
            cand.leases.errors["create"] = 403
            cand.leases.latency["create"] = 0.05
            await wait_for(lambda: cand.leases.sent.count("create") == 2, 2.0, "a second create")
            cand.stop()  # while that create is on its way
            await wait_for(cand.stopped.is_set, 2.0, "the elector to stop")
    # Creates: one refused, one cut short by the stop, one refused to the release.
    assert cand.leases.sent.count("create") == 3
    assert cand.leases.requests.count(("create", 403)) == 2
    forbidden = [e for e in logs if e["event"] == "leader.forbidden"]
    assert [(e["op"], e["log_level"]) for e in forbidden] == [
        ("create", "error"),
        ("release", "debug"),
    ]
    assert {e["missing_rule"] for e in forbidden} == {
        "create leases in API group coordination.k8s.io in namespace default"
    }


@pytest.mark.parametrize("write", ["create", "replace"])
async def test_a_write_applied_but_never_answered_is_released_on_shutdown(
    memory_campaign: Any, server: LeaseServer, write: str
) -> None:
    # The server applies the write, then the answer never comes (the client times
    # out): the lease names a replica that does not know it leads, for a whole lease
    # duration, unless shutdown releases what that write may have done.
    if write == "replace":
        server.write(record(""))  # free: taken over with a replace, not a create
    async with memory_campaign() as c:
        leader = await c.add("leader", **LONG)
        leader.leases.lost.add(write)
        await wait_for(lambda: (write, 0) in leader.leases.requests, 1.0, "the lost write")
        assert c.spec()["holderIdentity"] == "leader"
        assert not leader.leading
        leader.leases.lost.clear()
        leader.stop()
        await wait_for(leader.stopped.is_set, 2.0, "the leader's task to end")
        assert c.spec()["holderIdentity"] == ""
        standby = await c.add("standby", **LONG)
        await wait_for(lambda: standby.leading, 1.0, "the standby's takeover")


@pytest.mark.parametrize("write", ["create", "replace"])
async def test_a_write_landing_after_the_release_is_refused(
    memory_campaign: Any, server: LeaseServer, write: str
) -> None:
    if write == "replace":
        server.write(record(""))
    async with memory_campaign() as c:
        leader = await c.add("leader", **LONG)
        leader.leases.latency[write] = 60.0
        await anyio.sleep(0.1)  # the write is on its way, far from done
        before = server.lease
        del leader.leases.latency[write]
        leader.stop()
        await wait_for(leader.stopped.is_set, 2.0, "the leader's task to end")
        assert c.spec()["holderIdentity"] == ""
        # The same write, applied now by a slow server, finds the released lease.
        late = record("leader", duration=30)
        late["metadata"] = dict((before or {}).get("metadata", {}))
        with pytest.raises(ApiException) as refused:
            server.apply(write, late)  # type: ignore[arg-type]
        assert refused.value.status == 409


async def test_renewals_slower_than_the_retry_period_keep_the_lease(
    memory_campaign: Any,
) -> None:
    # A busy server answers in more than a retry period, well within the renew
    # deadline: a lease request may take that long, as kube-controller-manager's may.
    async with memory_campaign() as c:
        leader = await c.add("a")
        await c.wait_leader()
        leader.leases.latency["replace"] = leader.elector.retry_period * 1.5
        await c.wait_renewals(3)
        leadership = leader.elector.leadership
        assert leadership.leading
        assert leadership.lost_at is None
