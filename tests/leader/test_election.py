"""Election logic on an in-memory Lease and fake loop time: terms, handovers, step-down.

Waiting out leases, deadlines and retries costs no real time here; the Lease on the wire
is tests/contract's, the shipped RBAC for it tests/realserver's. Every campaign asserts
on leaving that no two candidates ever led at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs
from zombied.leader import micro_time

from tests.leader.conftest import LONG, NEXT_RETRY, Candidate, wait_for
from tests.leader.memory import LeaseServer

pytestmark = pytest.mark.looptime


def record(holder: str, *, renewed: datetime, duration: int, transitions: int) -> dict[str, Any]:
    return {
        "metadata": {},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": micro_time(renewed),
            "renewTime": micro_time(renewed),
            "leaseTransitions": transitions,
        },
    }


def touch(server: LeaseServer, **spec: Any) -> None:
    """Someone else writes the lease: a label, and ``spec`` (a new holder, say)."""
    assert server.lease is not None
    lease = {**server.lease, "spec": {**server.spec(), **spec}}
    lease["metadata"] = {**lease["metadata"], "labels": {"touched": "yes"}}
    server.write(lease)


def last_write_of(server: LeaseServer, candidate: Candidate) -> float:
    return max(w.at for w in server.writes if w.spec["holderIdentity"] == candidate.identity)


async def test_one_of_three_leads_and_its_renewals_keep_the_record(
    memory_campaign: Any, server: LeaseServer
) -> None:
    async with memory_campaign() as c:
        for name in ("a", "b", "c"):
            await c.add(name)
        leader = await c.wait_leader()
        await wait_for(lambda: len(server.writes) >= 8, 5.0, "renewals")
        # A busy server answers in more than a retry period, well within the renew
        # deadline: a lease request may take that long, as kube-controller-manager's may.
        leader.kube.latency["update"] = 1.5 * leader.elector.retry_period
        await wait_for(lambda: len(server.writes) >= 13, 5.0, "slow renewals")
        assert c.leaders() == [leader]
        assert [leading for _, leading in leader.changes] == [True]
        assert [cand.changes for cand in c.candidates if cand is not leader] == [[], []]
        specs = [w.spec for w in server.writes]
    assert {spec["holderIdentity"] for spec in specs} == {leader.identity}
    assert {spec["leaseDurationSeconds"] for spec in specs} == {2}  # 1.5 s, rounded up
    # Renewals keep the term's acquireTime and never count as transitions.
    assert {spec["acquireTime"] for spec in specs} == {specs[0]["acquireTime"]}
    assert {spec["leaseTransitions"] for spec in specs} == {0}
    renewed = [spec["renewTime"] for spec in specs]
    assert renewed == sorted(renewed)


@pytest.mark.parametrize("how", ["cancel", "release"])
async def test_a_leader_that_stops_releases_and_the_next_takes_over_at_its_next_retry(
    memory_campaign: Any, server: LeaseServer, how: str
) -> None:
    woke: dict[str, float] = {}

    async def wake(candidate: Candidate) -> None:
        await candidate.leadership.wait()
        woke[candidate.identity] = anyio.current_time()

    with capture_logs() as logs:
        async with memory_campaign() as c:
            for name in ("a", "b", "c"):
                c.tg.start_soon(wake, await c.add(name, **LONG))
            leader = await c.wait_leader()
            order = [leader]
            for transitions in (1, 2):
                waited_at = anyio.current_time()
                await leader.leadership.wait()  # leading: returns at once
                assert anyio.current_time() == waited_at
                held = server.spec()
                stopped_at = anyio.current_time()
                if how == "cancel":
                    await c.stop(leader)
                else:
                    await leader.elector.release()
                assert not leader.leading
                released = next(w for w in server.writes if w.at >= stopped_at)
                # client-go's release: no holder, a 1 s duration, the rest kept.
                assert released.spec == {**held, "holderIdentity": "", "leaseDurationSeconds": 1}
                leader = await c.wait_leader(other_than=leader)
                assert leader.gained_at - stopped_at <= NEXT_RETRY
                assert server.spec()["leaseTransitions"] == transitions
                order.append(leader)
    # Each led once: a released candidate stays a follower until it is cancelled.
    assert [[leading for _, leading in cand.changes] for cand in order] == [[True, False]] * 3
    assert woke == {cand.identity: cand.gained_at for cand in order}
    reason = "shutdown" if how == "cancel" else "released"
    assert [(e["identity"], e["reason"]) for e in logs if e["event"] == "leader.released"] == [
        (order[0].identity, reason),
        (order[1].identity, reason),
        (order[2].identity, "shutdown"),  # the campaign's end
    ]


@pytest.mark.parametrize(
    ("fault", "value"),
    [
        pytest.param("errors", 503, id="503"),
        pytest.param("latency", 60.0, id="hanging"),
        pytest.param("partitioned", True, id="partitioned"),
    ],
)
async def test_a_leader_that_cannot_renew_stops_acting_at_its_renew_deadline(
    memory_campaign: Any, server: LeaseServer, fault: str, value: Any
) -> None:
    cancelled_at: list[float] = []

    async def act(candidate: Candidate) -> None:
        with candidate.leadership.acting():
            try:
                await anyio.sleep_forever()
            finally:
                cancelled_at.append(anyio.current_time())

    with capture_logs() as logs:
        async with memory_campaign() as c:
            for name in ("a", "b", "c"):
                await c.add(name)
            leader = await c.wait_leader()
            c.tg.start_soon(act, leader)
            await wait_for(lambda: leader.leadership.in_flight == 1, 1.0, "a delete in flight")
            if fault == "partitioned":
                leader.kube.partitioned = value
            else:
                getattr(leader.kube, fault)["update"] = value
            await wait_for(lambda: not leader.leadership.in_term, 3.0, "the leader to step down")
            renewed = last_write_of(server, leader)
            assert leader.lost_at == pytest.approx(renewed + leader.elector.renew_deadline)
            # Strictly before any standby could see the lease expire.
            assert leader.lost_at < renewed + server.spec()["leaseDurationSeconds"]
            await wait_for(lambda: cancelled_at, 1.0, "the delete to be cancelled")
            assert cancelled_at == [leader.lost_at]
            successor = await c.wait_leader(other_than=leader)
            assert successor.gained_at >= renewed + server.spec()["leaseDurationSeconds"]
            assert server.spec()["leaseTransitions"] == 1
    lost = [(e["identity"], e["reason"]) for e in logs if e["event"] == "leader.lost"]
    assert lost == [(leader.identity, "renew deadline exceeded")]
    # Each kind of error is reported once per outage, not once per retry.
    errors = [(e["identity"], e["verb"], e["code"]) for e in logs if e["event"] == "leader.error"]
    assert errors
    assert len(errors) == len(set(errors))


@pytest.mark.parametrize(
    "renewed",
    [timedelta(hours=-1), timedelta(0), timedelta(hours=1)],
    ids=["renewed-an-hour-ago", "renewed-now", "renewed-in-an-hour"],
)
async def test_an_abandoned_lease_is_taken_a_lease_duration_after_it_was_first_seen(
    memory_campaign: Any, server: LeaseServer, renewed: timedelta
) -> None:
    # The remote renewTime is for humans: expiry is measured on our own clock from when
    # we first saw the record, whatever the holder's clock said.
    server.write(record("ghost", renewed=datetime.now(UTC) + renewed, duration=2, transitions=4))
    ghost = server.spec()
    async with memory_campaign() as c:
        started = anyio.current_time()
        cand = await c.add("cand")
        await c.wait_leader()
    assert started + 2 <= cand.gained_at <= started + 2 + NEXT_RETRY
    taken = next(w.spec for w in server.writes if w.spec["holderIdentity"] == "cand")
    assert taken["leaseTransitions"] == 5
    assert taken["acquireTime"] == taken["renewTime"]
    assert taken["acquireTime"] != ghost["acquireTime"]


async def test_a_lease_labelled_behind_the_leaders_back_is_reread_and_renewed(
    memory_campaign: Any, server: LeaseServer
) -> None:
    async with memory_campaign() as c:
        leader = await c.add("a")
        await c.wait_leader()
        assert [verb for verb, _ in leader.kube.sent] == ["get", "create"]
        touch(server)  # the leader's next renewal carries a stale resourceVersion
        writes = len(server.writes)
        await wait_for(lambda: len(server.writes) >= writes + 3, 3.0, "renewals")
        assert [leading for _, leading in leader.changes] == [True]
        assert server.lease is not None
        assert server.lease["metadata"]["labels"] == {"touched": "yes"}
        # One 409, one read of the new version, renewals at that version from then on.
        assert [verb for verb, _ in leader.kube.sent[2:5]] == ["update", "get", "update"]
        assert len(leader.kube.bodies("get")) == 2


async def test_a_lease_taken_behind_the_leaders_back_stops_it_at_its_next_renewal(
    memory_campaign: Any, server: LeaseServer
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            await c.add("a")
            await c.add("b")
            leader = await c.wait_leader()
            touch(server, holderIdentity="intruder", leaseDurationSeconds=1, leaseTransitions=1)
            taken_at = anyio.current_time()
            await wait_for(lambda: not leader.leadership.in_term, 1.0, "the leader to notice")
            assert leader.lost_at - taken_at <= leader.elector.retry_period
            assert leader.elector.holder == "intruder"
            # The intruder never renews: once its 1 s lease expires, one of ours leads.
            successor = await c.wait_leader()
            assert successor.gained_at >= taken_at + 1
            assert server.spec()["leaseTransitions"] == 2
    lost = [(e["identity"], e["reason"]) for e in logs if e["event"] == "leader.lost"]
    assert lost == [(leader.identity, "lease taken by another holder")]


@pytest.mark.parametrize("change", ["label", "holder"])
async def test_a_release_rereads_a_lease_written_while_it_was_on_its_way(
    memory_campaign: Any, server: LeaseServer, change: str
) -> None:
    # The release clears the holder only if it is still ours, re-reading after a 409.
    with capture_logs() as logs:
        async with memory_campaign() as c:
            leader = await c.add("leader", **LONG)
            await c.wait_leader()
            leader.kube.latency["update"] = 0.3
            leader.stop()
            await wait_for(
                lambda: any(not b["spec"]["holderIdentity"] for b in leader.kube.bodies("update")),
                1.0,
                "the release's write on its way",
            )
            touch(server, **({"holderIdentity": "intruder"} if change == "holder" else {}))
            await wait_for(leader.stopped.is_set, 2.0, "the elector to stop")
    assert server.spec()["holderIdentity"] == ("intruder" if change == "holder" else "")
    assert server.lease is not None
    assert server.lease["metadata"]["labels"] == {"touched": "yes"}
    releases = [b for b in leader.kube.bodies("update") if not b["spec"]["holderIdentity"]]
    assert len(releases) == (1 if change == "holder" else 2)  # a second try after the 409
    released = [e["reason"] for e in logs if e["event"] == "leader.released"]
    assert released == ([] if change == "holder" else ["shutdown"])


async def test_a_release_that_cannot_be_written_gives_up_and_the_lease_expires(
    memory_campaign: Any, server: LeaseServer
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            leader = await c.add("a")
            await c.wait_leader()
            standby = await c.add("b")
            leader.kube.latency["update"] = 60.0
            stopped_at = anyio.current_time()
            await c.stop(leader)
            assert anyio.current_time() - stopped_at <= 1.1  # the release's own timeout
            assert server.spec()["holderIdentity"] == leader.identity
            await wait_for(lambda: standby.leading, 5.0, "the takeover after expiry")
            assert standby.gained_at >= last_write_of(server, leader) + 2
    timeouts = [e["identity"] for e in logs if e["event"] == "leader.release_timeout"]
    assert timeouts == [leader.identity]


@pytest.mark.parametrize(
    ("verb", "fault"),
    [
        pytest.param("update", "lost", id="renewal-landed-unanswered"),
        pytest.param("update", "hanging", id="renewal-hanging"),
        pytest.param("create", "lost", id="create-landed-unanswered"),
    ],
)
async def test_a_release_meets_a_write_of_ours_still_on_its_way(
    memory_campaign: Any, server: LeaseServer, verb: str, fault: str
) -> None:
    # What the daemon's drain does while a lease request of ours waits for its answer:
    # the release must not wait for it, and must clear whatever of it the server applied.
    async with memory_campaign() as c:
        leader = await c.add("leader", **LONG)
        if verb == "update":
            await c.wait_leader()
        writes, sent = len(server.writes), len(leader.kube.bodies(verb))
        if fault == "lost":
            leader.kube.lost.add(verb)
        else:
            leader.kube.latency[verb] = 60.0
        await wait_for(lambda: len(leader.kube.bodies(verb)) > sent, 1.0, "the write sent")
        landed = len(server.writes) > writes
        assert landed == (fault == "lost")
        assert server.spec()["holderIdentity"] == "leader"
        leader.kube.lost.clear()
        leader.kube.latency.clear()
        standby = await c.add("standby", **LONG)
        released_at = anyio.current_time()
        await leader.elector.release()
        assert anyio.current_time() - released_at < 1.0  # not the release's timeout
        assert server.spec()["holderIdentity"] == ""
        await wait_for(lambda: standby.leading, 1.0, "the standby's takeover")
        assert standby.gained_at - released_at <= NEXT_RETRY
        assert not leader.leadership.in_term


async def test_an_answer_that_is_no_lease_is_reported_and_retried(
    memory_campaign: Any, server: LeaseServer
) -> None:
    server.write(record("", renewed=datetime.now(UTC), duration=1, transitions=0))
    with capture_logs() as logs:
        async with memory_campaign() as c:
            cand = await c.add("cand")
            cand.kube.garbled.add("get")
            await wait_for(lambda: len(cand.kube.bodies("get")) >= 3, 2.0, "reads, retried")
            assert cand.changes == []
            cand.kube.garbled.clear()
            await c.wait_leader()
    errors = [(e["verb"], e["reason"]) for e in logs if e["event"] == "leader.error"]
    assert errors == [("get", "MalformedAnswer")]


async def test_a_lease_whose_spec_is_no_object_is_garbage_to_overwrite(
    memory_campaign: Any, server: LeaseServer
) -> None:
    server.write({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": "garbled"})
    async with memory_campaign() as c:
        await c.add("one")
        await c.wait_leader()
        assert server.spec()["holderIdentity"] == "one"
    assert server.spec()["holderIdentity"] == ""


async def test_a_release_with_no_lease_has_nothing_to_give_back(
    memory_campaign: Any, server: LeaseServer
) -> None:
    with capture_logs() as logs:
        async with memory_campaign() as c:
            cand = await c.add("cand")
            cand.kube.errors["create"] = 503
            await wait_for(lambda: len(cand.kube.bodies("create")) >= 2, 2.0, "failed creates")
            await cand.elector.release()
            assert server.lease is None
    errors = [e["verb"] for e in logs if e["event"] == "leader.error"]
    assert errors == ["create"]  # the 404 of the release's read is no error
