"""SIGTERM in the middle of a storm: a real ``python -m zombied run`` process drains.

Many zombies are due at once and every DELETE is slow, so several are in flight when
SIGTERM comes. The process must exit 0, every DELETE that reached the server before the
signal must have been answered and logged as a decision (finished, not abandoned), and
nothing wrong was deleted.
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.daemon.test_cli import zombied_run
from tests.helpers import eventually
from tests.reliability.world import EXCLUDED_NAMESPACES, LABEL_SELECTOR, World

DRAIN_TIMEOUT = 3.0
DECISIONS = {"pod.reaped", "pod.gone", "pod.conflict", "pod.delete_failed"}


@pytest.mark.subprocess
@pytest.mark.parametrize("zombies", [60, 12], ids=["storm-beyond-drain-budget", "storm-fits"])
async def test_sigterm_during_a_storm_finishes_in_flight_deletes(
    tmp_path: Path, zombies: int
) -> None:
    # The default rule set: node-shutdown after 30 s. The zombies ended a minute ago.
    rules = RuleSet((Rule("node-shutdown", 30.0),))
    sim = Simulator(bookmark_interval=0.5)
    world = World(sim, rules)
    async with sim:
        world.start(nodes=2, pods=zombies)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        for index in range(zombies):
            world.end_pod(index, "shutdown:1.26:terminated", ago=60)
        sim.faults.add_latency("delete", "pods", 0.4)
        args = [f"--drain-timeout={DRAIN_TIMEOUT}", "--min-age=30s", "--max-in-flight=4"]
        args += ["--qps=200", "--burst=200", f"--label-selector={LABEL_SELECTOR}"]
        args += ["--exclude-namespaces=" + ",".join(EXCLUDED_NAMESPACES)]
        async with zombied_run(kubeconfig, *args) as running:
            await eventually(
                lambda: len(world.delete_requests) >= 4 or running.process.returncode is not None,
                timeout=30,
                message="deletes in flight",
            )
            assert running.process.returncode is None, running.logs[-5:]
            answered = {record.obj["metadata"]["uid"] for record in sim.deleted}
            in_flight = {request.uid for request in world.delete_requests} - answered
            running.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(DRAIN_TIMEOUT + 30):
                code = await running.process.wait()
        world.check_safety()
        left = world.pending_zombies()
    logs = running.logs
    decided = {entry.get("uid") for entry in logs if entry.get("event") in DECISIONS}
    assert code == 0, logs[-5:]
    assert in_flight, "no DELETE was in flight at SIGTERM"
    assert in_flight <= decided, f"in flight at SIGTERM, never answered: {in_flight - decided}"
    assert world.violations == []
    events = [entry.get("event") for entry in logs]
    assert events.index("daemon.draining") < events.index("daemon.drained")
    if zombies * 0.4 / 4 < DRAIN_TIMEOUT - 1:
        # Everything was due: a drain that fits its budget deletes all of it.
        assert "daemon.drain_timeout" not in events
        assert left == []
    else:
        assert "daemon.drain_timeout" in events
