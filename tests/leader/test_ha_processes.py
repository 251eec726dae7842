"""Three ``zombied run --leader-elect`` processes against one simulator.

Each replica runs as its own process with its own token, so the simulator's request log
and deletion records say which replica sent what. Only the Lease holder may delete;
every zombie is reaped exactly once, through a SIGKILL of the leader (a standby takes
over once the lease expires) and a SIGTERM (the lease is released, the handover takes
about one retry period).
"""

from __future__ import annotations

import os
import signal
import sys
import time
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

LEASE_DURATION = 3
RETRY_PERIOD = 0.25
#: What a process needs beyond the lease timing to notice and act (start-up excluded).
SLACK = 1.5
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
        "--renew-deadline=2",
        f"--retry-period={RETRY_PERIOD}",
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


async def test_one_deleter_through_kill_and_term(sim: Simulator, replicas: Replicas) -> None:
    for index in range(3):
        await replicas.start(f"replica-{index}")
    first = await eventually(replicas.holder, timeout=30, message="a first leader")
    assert isinstance(first, Replica)
    # Standbys keep their caches warm: each must be up before we time the takeover.
    await eventually(
        lambda: all(r.events("daemon.started") for r in replicas.all),
        timeout=30,
        message="every replica started",
    )

    batch = add_zombies(sim, "first", 10)
    await eventually(lambda: batch <= reaped(sim).keys(), timeout=10, message="first batch")
    assert pod_deletes_by(sim) == {first.name: len(batch)}

    # SIGKILL: no release; a standby takes over once the lease has expired for it.
    killed_at = time.time()
    first.process.kill()
    await first.process.wait()
    batch2 = add_zombies(sim, "second", 10)
    bound = LEASE_DURATION + 2.2 * RETRY_PERIOD + SLACK
    await eventually(
        lambda: batch2 <= reaped(sim).keys(), timeout=bound + 5, message="second batch"
    )
    second = replicas.holder()
    assert second is not None
    assert second is not first
    latest = max(r.time for uid in batch2 for r in reaped(sim)[uid])
    assert latest - killed_at <= bound

    # SIGTERM: the leader drains, releases, and a standby takes over at its next retry.
    termed_at = time.time()
    second.process.send_signal(signal.SIGTERM)
    await eventually(
        lambda: (h := replicas.holder()) is not None and h is not second,
        timeout=LEASE_DURATION,
        message="handover after SIGTERM",
    )
    handover = time.time() - termed_at
    assert handover < LEASE_DURATION  # the release, not the expiry, explains it
    with anyio.fail_after(10):
        assert await second.process.wait() == 0
    third = replicas.holder()
    assert third is not None
    batch3 = add_zombies(sim, "third", 5)
    await eventually(lambda: batch3 <= reaped(sim).keys(), timeout=10, message="third batch")

    # Every zombie reaped exactly once, each by the leader of its time.
    assert all(len(records) == 1 for records in reaped(sim).values())
    users = pod_deletes_by(sim)
    assert set(users) <= {first.name, second.name, third.name}
    assert sum(users.values()) == len(batch) + len(batch2) + len(batch3)
    assert second.events("leader.released")
    assert not first.events("leader.released")
