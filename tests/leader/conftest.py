"""Candidates campaigning for one Lease, each with its own connection.

Two backends: the simulator over real HTTP (``campaign``), and an in-memory Lease on
fake loop time (``memory_campaign``) for the election logic, where waiting out a lease
costs nothing. A :class:`Campaign` runs every elector in its own cancel scope (so a
test can stop one "replica"), records each gain and loss of leadership with the loop
time it happened (``Leadership.gained_at``/``lost_at``), samples ``leading`` of all
candidates and watches the stored Lease the way a standby would (the loop time at
which each new record was first seen).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup
from kubernetes_asyncio.client import ApiClient
from zombied.kube import open_api_client
from zombied.leader import ApiLeases, LeaseElector

from tests.helpers import eventually
from tests.leader.memory import LeaseServer, MemoryLeases

LEASE = "zombied"
NAMESPACE = "default"
#: Short durations for tests: lease 1.5 s (written as 2), deadline 1 s, retry 0.2 s.
FAST = {"lease_duration": 1.5, "renew_deadline": 1.0, "retry_period": 0.2}
#: How often the monitors look; fine enough to catch any overlap of two terms.
SAMPLE = 0.005


async def wait_for(predicate: Callable[[], bool], within: float, what: str) -> None:
    """Wait until ``predicate()`` holds; fail the test after ``within`` seconds."""
    await eventually(predicate, timeout=within, interval=SAMPLE, message=what)


@dataclass
class Candidate:
    identity: str
    elector: LeaseElector
    leases: Any  # ApiLeases on the simulator, MemoryLeases in memory
    scope: anyio.CancelScope
    stopped: anyio.Event = field(default_factory=anyio.Event)
    _changes: list[tuple[float, bool]] = field(default_factory=list)
    _terms: int = 0

    @property
    def changes(self) -> list[tuple[float, bool]]:
        """Every gain (True) and loss (False) of leadership so far, with its loop time."""
        self.record()
        return self._changes

    def stop(self) -> None:
        self.scope.cancel()

    @property
    def leading(self) -> bool:
        return self.elector.leadership.leading

    def record(self) -> None:
        """Note the gains and losses of leadership since the last look, with their times."""
        leadership = self.elector.leadership
        leading = bool(self._changes) and self._changes[-1][1]
        if leadership.terms > self._terms:
            assert leadership.terms == self._terms + 1, f"{self.identity}: terms missed"
            if leading:  # the previous term ended before this one began
                assert leadership.lost_at is not None
                self._changes.append((leadership.lost_at, False))
            assert leadership.gained_at is not None
            self._changes.append((leadership.gained_at, True))
            self._terms = leadership.terms
            leading = True
        if leading and not leadership.in_term:
            assert leadership.lost_at is not None
            self._changes.append((leadership.lost_at, False))

    def terms(self) -> list[tuple[float, float]]:
        """Intervals of loop time during which we were leading."""
        terms: list[tuple[float, float]] = []
        start: float | None = None
        for at, leading in self.changes:
            if leading and start is None:
                start = at
            elif not leading and start is not None:
                terms.append((start, at))
                start = None
        if start is not None:
            terms.append((start, math.inf))
        return terms


@dataclass
class Seen:
    """A Lease record as a standby first saw it."""

    at: float
    spec: dict[str, Any]
    resource_version: str


class Campaign:
    """Candidates on one Lease; ``lease()`` reads it the way the server stores it."""

    def __init__(
        self,
        lease: Callable[[], dict[str, Any] | None],
        connect: Callable[[], Awaitable[Any]],
        tg: TaskGroup,
        stack: AsyncExitStack,
    ) -> None:
        self.lease = lease
        self._connect = connect
        self.tg = tg
        self.stack = stack
        self.candidates: list[Candidate] = []
        self.samples = 0
        self.overlaps: list[tuple[float, list[str]]] = []
        self.seen: list[Seen] = []

    async def add(self, identity: str, **durations: float) -> Candidate:
        return self.add_with(identity, await self._connect(), **durations)

    def add_with(self, identity: str, leases: Any, **durations: float) -> Candidate:
        settings = {**FAST, **durations}
        scope = anyio.CancelScope()
        elector = LeaseElector(leases, identity=identity, **settings)
        candidate = Candidate(identity, elector, leases, scope)
        self.candidates.append(candidate)

        async def run() -> None:
            try:
                with scope:
                    await elector.run()
            finally:
                candidate.record()
                candidate.stopped.set()

        self.tg.start_soon(run)
        return candidate

    def leaders(self) -> list[Candidate]:
        return [c for c in self.candidates if c.leading]

    def leader(self) -> Candidate | None:
        leaders = self.leaders()
        return leaders[0] if len(leaders) == 1 else None

    def spec(self) -> dict[str, Any]:
        lease = self.lease()
        return dict(lease["spec"]) if lease else {}

    async def wait_leader(self, within: float = 5.0) -> Candidate:
        await wait_for(lambda: self.leader() is not None, within, "exactly one leader")
        leader = self.leader()
        assert leader is not None
        return leader

    async def wait_renewals(self, count: int, within: float = 5.0) -> None:
        """Wait until the Lease record has changed ``count`` more times."""
        target = len(self.seen) + count
        await wait_for(lambda: len(self.seen) >= target, within, f"{count} lease writes")

    def assert_never_two_leaders(self) -> None:
        assert self.samples > 0
        assert not self.overlaps, f"two leaders at once: {self.overlaps[:5]}"
        terms = sorted(
            (start, end, c.identity) for c in self.candidates for start, end in c.terms()
        )
        for (_, end, who), (start, _, other) in itertools.pairwise(terms):
            assert end <= start, f"terms of {who} and {other} overlap: {terms}"

    async def _monitor(self) -> None:
        while True:
            for candidate in self.candidates:
                candidate.record()
            leaders = [c.identity for c in self.leaders()]
            self.samples += 1
            if len(leaders) > 1:
                self.overlaps.append((anyio.current_time(), leaders))
            lease = self.lease()
            if lease is not None:
                rv = lease["metadata"]["resourceVersion"]
                if not self.seen or self.seen[-1].resource_version != rv:
                    self.seen.append(Seen(anyio.current_time(), dict(lease["spec"]), rv))
            await anyio.sleep(SAMPLE)


@asynccontextmanager
async def open_campaign(
    lease: Callable[[], dict[str, Any] | None], connect: Callable[[AsyncExitStack], Any]
) -> AsyncIterator[Campaign]:
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        campaign = Campaign(lease, lambda: connect(stack), tg, stack)
        tg.start_soon(campaign._monitor)
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


def sim_leases(api: ApiClient) -> ApiLeases:
    return ApiLeases(api, name=LEASE, namespace=NAMESPACE)


@pytest.fixture
def campaign(sim: Any, tmp_path: Path) -> Callable[[], Any]:
    """``async with campaign() as c:`` — a campaign on the test's simulator, real HTTP."""
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")

    async def connect(stack: AsyncExitStack) -> ApiLeases:
        return sim_leases(await stack.enter_async_context(open_api_client(str(kubeconfig))))

    return lambda: open_campaign(lambda: sim.store.get("leases", NAMESPACE, LEASE), connect)


@pytest.fixture
def server() -> LeaseServer:
    """The in-memory Lease of ``memory_campaign``."""
    return LeaseServer(LEASE, NAMESPACE)


@pytest.fixture
def memory_campaign(server: LeaseServer) -> Callable[[], Any]:
    """``async with memory_campaign() as c:`` — a campaign on the in-memory Lease.

    Use it with ``pytest.mark.looptime``: waits then cost no real time.
    """

    async def connect(_stack: AsyncExitStack) -> MemoryLeases:
        return server.client()

    return lambda: open_campaign(lambda: server.lease, connect)
