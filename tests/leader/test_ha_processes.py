"""``zombied run --leader-elect`` processes against one simulator: a SIGTERM hands over.

Each replica runs as its own process with its own token, so the simulator's request log
says which replica sent what. A SIGTERM drains the leader and releases the lease: the
standby takes over long before the lease could expire. (A SIGKILL, where the standby
waits out the lease, is tests/realserver's, on a real kube-apiserver.)
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from kubesim import PolicyRule, Simulator
from tests.daemon.pods import zombie
from tests.daemon.test_cli import Running, zombied_run
from tests.helpers import eventually

pytestmark = pytest.mark.subprocess

#: Far longer than any wait here: only a release explains a takeover.
ELECTION = ("--leader-elect", "--lease-namespace=default", "--lease-duration=60")
ELECTION += ("--renew-deadline=40", "--retry-period=0.25", "--drain-timeout=2")


def add_zombies(sim: Simulator, prefix: str, count: int) -> set[str]:
    return {
        sim.store.create("pods", zombie(f"{prefix}-{index}", "default"))["metadata"]["uid"]
        for index in range(count)
    }


def deletes_by(sim: Simulator) -> dict[str, set[str]]:
    """The uids each user deleted, and each uid once only."""
    users: dict[str, set[str]] = {}
    for record in sim.deleted:
        assert not record.dry_run
        uid = record.obj["metadata"]["uid"]
        assert not any(uid in uids for uids in users.values()), f"{uid} deleted twice"
        users.setdefault(record.user, set()).add(uid)
    return users


def leading(replicas: dict[str, Running]) -> str | None:
    """The one replica that acquired the lease and has not exited, if any."""
    names = [
        name
        for name, running in replicas.items()
        if running.events("leader.acquired") and running.process.returncode is None
    ]
    return names[0] if len(names) == 1 else None


async def test_a_sigterm_hands_the_lease_over(sim: Simulator, tmp_path: Path) -> None:
    kubeconfigs = {
        name: sim.write_kubeconfig(
            tmp_path / name, token=sim.add_token(name, [PolicyRule(["*"], ["*"], ["*"])])
        )
        for name in ("one", "two")
    }
    async with (
        zombied_run(kubeconfigs["one"], *ELECTION) as one,
        zombied_run(kubeconfigs["two"], *ELECTION) as two,
    ):
        replicas = {"one": one, "two": two}
        # The standby keeps its cache warm: both must be up before the handover.
        started = lambda: one.events("daemon.started") and two.events("daemon.started")  # noqa: E731
        await eventually(started, timeout=30, message="both replicas started")
        first = await eventually(lambda: leading(replicas), timeout=30, message="a leader")
        batch = add_zombies(sim, "first", 10)
        await eventually(lambda: deletes_by(sim).get(first) == batch, timeout=30)

        replicas[first].process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await replicas[first].process.wait() == 0
        assert replicas[first].events("leader.released")
        second = await eventually(lambda: leading(replicas), timeout=20, message="a handover")
        assert second != first
        batch2 = add_zombies(sim, "second", 5)
        await eventually(lambda: deletes_by(sim).get(second) == batch2, timeout=30)
    # Each zombie deleted once, by the leader of its time.
    assert deletes_by(sim) == {first: batch, second: batch2}
