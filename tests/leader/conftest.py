"""Candidates campaigning for one Lease, each with its own connection to the in-memory
`LeaseServer`, on fake loop time (``memory_campaign``).

A `Campaign` runs every elector in its own cancel scope (a test stops one "replica" by
cancelling it), records each gain and loss of leadership with its loop time, and
asserts on leaving that no two candidates' terms ever overlapped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup
from zombied.leader import Leadership, LeaseElector

from tests.helpers import eventually
from tests.leader.memory import LeaseServer, MemoryKube

LEASE = "zombied"
NAMESPACE = "default"
#: Short durations: lease 1.5 s (written as 2), renew deadline 1 s, retry 0.2 s.
FAST = {"lease_duration": 1.5, "renew_deadline": 1.0, "retry_period": 0.2}
#: A lease far longer than any wait of a test: only a release explains a quick takeover.
LONG = {"lease_duration": 30.0, "renew_deadline": 20.0, "retry_period": 0.2}
#: The longest wait of an acquire loop: client-go's jitter, 1 to 2.2 retry periods.
NEXT_RETRY = 2.2 * 0.2
#: How often a wait polls.
SAMPLE = 0.005


async def wait_for(predicate: Callable[[], object], within: float, what: str) -> None:
    """Wait until ``predicate()`` holds; fail the test after ``within`` seconds."""
    await eventually(predicate, timeout=within, interval=SAMPLE, message=what)


@dataclass(eq=False)
class Candidate:
    identity: str
    elector: LeaseElector
    kube: MemoryKube
    scope: anyio.CancelScope
    #: Every gain (True) and loss (False) of leadership, with its loop time.
    changes: list[tuple[float, bool]] = field(default_factory=list)
    stopped: anyio.Event = field(default_factory=anyio.Event)

    @property
    def leadership(self) -> Leadership:
        return self.elector.leadership

    @property
    def leading(self) -> bool:
        return self.leadership.leading

    @property
    def gained_at(self) -> float:
        return max(at for at, leading in self.changes if leading)

    @property
    def lost_at(self) -> float:
        return max(at for at, leading in self.changes if not leading)

    def stop(self) -> None:
        """Cancel this replica's elector, as a shutdown does."""
        self.scope.cancel()

    def terms(self) -> list[tuple[float, float]]:
        """Intervals of loop time during which this candidate led."""
        starts = [at for at, leading in self.changes if leading]
        ends = [at for at, leading in self.changes if not leading]
        return list(itertools.zip_longest(starts, ends, fillvalue=math.inf))


class Campaign:
    def __init__(self, server: LeaseServer, tg: TaskGroup) -> None:
        self.server = server
        self.tg = tg
        self.candidates: list[Candidate] = []

    async def add(self, identity: str, **durations: float) -> Candidate:
        """Start a candidate on a connection of its own."""
        changes: list[tuple[float, bool]] = []
        leadership = Leadership(
            False, on_change=lambda leading: changes.append((anyio.current_time(), leading))
        )
        kube = MemoryKube(self.server)
        elector = LeaseElector(
            kube,
            name=LEASE,
            namespace=NAMESPACE,
            identity=identity,
            leadership=leadership,
            **{**FAST, **durations},
        )
        candidate = Candidate(identity, elector, kube, anyio.CancelScope(), changes)
        self.candidates.append(candidate)

        async def run() -> None:
            try:
                with candidate.scope:
                    await elector.run()
            finally:
                candidate.stopped.set()

        self.tg.start_soon(run)
        return candidate

    def leaders(self) -> list[Candidate]:
        return [c for c in self.candidates if c.leading]

    async def wait_leader(
        self, within: float = 5.0, *, other_than: Candidate | None = None
    ) -> Candidate:
        def one() -> Candidate | None:
            leaders = self.leaders()
            return leaders[0] if len(leaders) == 1 and leaders[0] is not other_than else None

        await wait_for(one, within, "exactly one leader")
        leader = one()
        assert leader is not None
        return leader

    async def stop(self, candidate: Candidate) -> None:
        """Cancel ``candidate`` and wait until its elector has ended (released or not)."""
        candidate.stop()
        await wait_for(candidate.stopped.is_set, 2.0, f"{candidate.identity} to stop")

    def assert_never_two_leaders(self) -> None:
        terms = sorted((*term, c.identity) for c in self.candidates for term in c.terms())
        for (_, end, who), (start, _, other) in itertools.pairwise(terms):
            assert end <= start, f"terms of {who} and {other} overlap: {terms}"


@pytest.fixture
def server() -> LeaseServer:
    """The in-memory Lease of ``memory_campaign``."""
    return LeaseServer(LEASE, NAMESPACE)


@pytest.fixture
def memory_campaign(server: LeaseServer) -> Callable[[], Any]:
    """``async with memory_campaign() as c:`` on the in-memory Lease; use with looptime."""

    @asynccontextmanager
    async def open_campaign() -> AsyncIterator[Campaign]:
        async with anyio.create_task_group() as tg:
            campaign = Campaign(server, tg)
            try:
                yield campaign
                campaign.assert_never_two_leaders()
            finally:
                for candidate in campaign.candidates:
                    candidate.stop()
                with anyio.fail_after(10):
                    for candidate in campaign.candidates:
                        await candidate.stopped.wait()
                tg.cancel_scope.cancel()

    return open_campaign
