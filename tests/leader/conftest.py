"""Candidates campaigning for one Lease on the simulator, each with its own API client.

A :class:`Campaign` runs every elector in its own cancel scope (so a test can stop one
"replica"), records each gain and loss of leadership with the loop time it happened
(``Leadership.gained_at``/``lost_at``), samples ``leading`` of all candidates and
watches the Lease in the simulator's store the way a standby would (the loop time at
which each new record was first seen).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup
from kubernetes_asyncio.client import ApiClient
from zombied.kube import open_api_client
from zombied.leader import LeaseElector

from tests.helpers import eventually

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
    api: ApiClient
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
    def __init__(self, sim: Any, kubeconfig: Path, tg: TaskGroup, stack: AsyncExitStack) -> None:
        self.sim = sim
        self.kubeconfig = kubeconfig
        self.tg = tg
        self.stack = stack
        self.candidates: list[Candidate] = []
        self.samples = 0
        self.overlaps: list[tuple[float, list[str]]] = []
        self.seen: list[Seen] = []

    async def open_api(self) -> ApiClient:
        api: ApiClient = await self.stack.enter_async_context(open_api_client(str(self.kubeconfig)))
        return api

    async def add(self, identity: str, **durations: float) -> Candidate:
        return self.add_with(identity, await self.open_api(), **durations)

    def add_with(self, identity: str, api: ApiClient, **durations: float) -> Candidate:
        settings = {**FAST, **durations}
        scope = anyio.CancelScope()
        elector = LeaseElector(api, name=LEASE, namespace=NAMESPACE, identity=identity, **settings)
        candidate = Candidate(identity, elector, api, scope)
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

    def lease(self) -> dict[str, Any] | None:
        obj: dict[str, Any] | None = self.sim.store.get("leases", NAMESPACE, LEASE)
        return obj

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
async def open_campaign(sim: Any, tmp_path: Path) -> AsyncIterator[Campaign]:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        campaign = Campaign(sim, kubeconfig, tg, stack)
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


@pytest.fixture
def campaign(sim: Any, tmp_path: Path) -> Callable[[], Any]:
    """``async with campaign() as c:`` — a fresh campaign on the test's simulator."""
    return lambda: open_campaign(sim, tmp_path)
