"""``zombied run --leader-elect`` processes against one simulator: a SIGTERM hands over.

Each replica runs as its own process with its own token, so the simulator's request log
says which replica sent what. A SIGTERM drains the leader and releases the lease: a
standby takes over long before the lease could expire. (A SIGKILL, where the standby
waits out the lease, is tests/realserver's, on a real kube-apiserver.)
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from kubesim import PolicyRule, Simulator
from tests.daemon.pods import zombie
from tests.helpers import eventually, json_lines, stop_processes

pytestmark = pytest.mark.subprocess

#: Far longer than any wait here: only a release explains a takeover.
LEASE_DURATION = 60
NAMESPACE = "default"


def replica_args(kubeconfig: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "zombied",
        "run",
        f"--kubeconfig={kubeconfig}",
        "--leader-elect",
        f"--lease-namespace={NAMESPACE}",
        f"--lease-duration={LEASE_DURATION}",
        "--renew-deadline=40",
        "--retry-period=0.25",
        "--listen=127.0.0.1:0",
        "--min-age=1s",
        "--qps=100",
        "--burst=100",
        "--log-format=json",
        "--log-level=debug",
        "--drain-timeout=2",
    ]


@dataclass
class Replica:
    name: str
    process: Process
    log_path: Path

    def events(self, event: str) -> list[dict[str, Any]]:
        return [r for r in json_lines(self.log_path.read_bytes()) if r.get("event") == event]


class Replicas:
    def __init__(self, sim: Simulator, tmp_path: Path, stack: ExitStack) -> None:
        self.sim = sim
        self.tmp_path = tmp_path
        self.stack = stack
        self.all: list[Replica] = []

    async def start(self, name: str) -> Replica:
        """Start a replica with a token of its own."""
        token = self.sim.add_token(name, [PolicyRule(["*"], ["*"], ["*"])])
        kubeconfig = self.sim.write_kubeconfig(self.tmp_path / f"{name}.kubeconfig", token=token)
        log_path = self.tmp_path / f"{name}.log"
        log_file = self.stack.enter_context(log_path.open("wb"))
        process = await anyio.open_process(
            replica_args(kubeconfig),
            stdout=log_file,
            stderr=log_file,
            env={**os.environ, "POD_NAME": name},
        )
        self.all.append(Replica(name, process, log_path))
        return self.all[-1]

    def holder(self) -> Replica | None:
        """The running replica the Lease names, if any."""
        lease = self.sim.store.get("leases", NAMESPACE, "zombied")
        holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
        for replica in self.all:
            running = replica.process.returncode is None
            if running and holder.startswith(f"{replica.name}-"):
                return replica
        return None


@pytest.fixture
async def replicas(sim: Simulator, tmp_path: Path) -> AsyncIterator[Replicas]:
    with ExitStack() as stack:
        started = Replicas(sim, tmp_path, stack)
        try:
            yield started
        finally:
            await stop_processes(replica.process for replica in started.all)


def add_zombies(sim: Simulator, prefix: str, count: int) -> set[str]:
    uids = set()
    for index in range(count):
        created = sim.store.create("pods", zombie(f"{prefix}-{index}", NAMESPACE))
        uids.add(created["metadata"]["uid"])
    return uids


def reaped(sim: Simulator) -> dict[str, list[Any]]:
    by_uid: dict[str, list[Any]] = {}
    for record in sim.deleted:
        if not record.dry_run:
            by_uid.setdefault(record.obj["metadata"]["uid"], []).append(record)
    return by_uid


def pod_deletes_by(sim: Simulator) -> dict[str, int]:
    users: dict[str, int] = {}
    for request in sim.requests:
        if request.resource == "pods" and request.verb == "delete":
            users[request.user] = users.get(request.user, 0) + 1
    return users


async def test_a_sigterm_hands_the_lease_over(sim: Simulator, replicas: Replicas) -> None:
    for index in range(2):
        await replicas.start(f"replica-{index}")
    first = await eventually(replicas.holder, timeout=30, message="a first leader")
    assert isinstance(first, Replica)
    # The standby keeps its cache warm: it must be up before the handover.
    await eventually(
        lambda: all(r.events("daemon.started") for r in replicas.all),
        timeout=30,
        message="every replica started",
    )
    batch = add_zombies(sim, "first", 10)
    await eventually(lambda: batch <= reaped(sim).keys(), timeout=10, message="first batch")
    assert pod_deletes_by(sim) == {first.name: len(batch)}

    first.process.send_signal(signal.SIGTERM)
    with anyio.fail_after(30):
        assert await first.process.wait() == 0
    second = await eventually(replicas.holder, timeout=20, message="handover after SIGTERM")
    assert isinstance(second, Replica)
    assert second is not first
    assert first.events("leader.released")
    batch2 = add_zombies(sim, "second", 5)
    await eventually(lambda: batch2 <= reaped(sim).keys(), timeout=10, message="second batch")
    # Every zombie reaped exactly once, each by the leader of its time.
    assert all(len(records) == 1 for records in reaped(sim).values())
    assert pod_deletes_by(sim) == {first.name: len(batch), second.name: len(batch2)}
