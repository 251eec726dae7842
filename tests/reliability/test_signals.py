"""SIGTERM in the middle of a storm: a real ``python -m zombied run`` process drains.

Many zombies are due at once and every DELETE is slow, so several are in flight when
SIGTERM comes. The process must exit 0, every DELETE that reached the server before the
signal must have been answered and logged as a decision (finished, not abandoned), and
nothing wrong was deleted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteReceiveStream
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from tests.helpers import eventually, json_lines
from tests.reliability.world import EXCLUDED_NAMESPACES, LABEL_SELECTOR, World

DRAIN_TIMEOUT = 3.0
DECISIONS = {"pod.reaped", "pod.gone", "pod.conflict", "pod.delete_failed"}


async def collect(stream: ByteReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    async for chunk in stream:
        into.extend(chunk)


@pytest.mark.subprocess
@pytest.mark.parametrize("zombies", [60, 12], ids=["storm-beyond-drain-budget", "storm-fits"])
async def test_sigterm_during_a_storm_finishes_in_flight_deletes(
    tmp_path: Path, zombies: int
) -> None:
    # The default rule set: node-shutdown after 30 s. The zombies ended a minute ago.
    rules = RuleSet((Rule("node-shutdown", 30.0),))
    sim = Simulator(bookmark_interval=0.5)
    world = World(sim, rules)
    stdout, stderr = bytearray(), bytearray()
    async with sim:
        world.start(nodes=2, pods=zombies)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        for index in range(zombies):
            world.end_pod(index, "shutdown:1.26:terminated", ago=60)
        sim.faults.add_latency("delete", "pods", 0.4)
        command = [
            *(sys.executable, "-m", "zombied", "run", f"--kubeconfig={kubeconfig}"),
            *(f"--drain-timeout={DRAIN_TIMEOUT}", "--log-format=json", "--listen=127.0.0.1:0"),
            *("--qps=200", "--burst=200", "--max-in-flight=4"),
            "--exclude-namespaces=" + ",".join(EXCLUDED_NAMESPACES),
            f"--label-selector={LABEL_SELECTOR}",
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        async with (
            await anyio.open_process(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            ) as process,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(collect, process.stdout, stdout)
            tg.start_soon(collect, process.stderr, stderr)
            await eventually(
                lambda: len(world.delete_requests) >= 4 or process.returncode is not None,
                timeout=30,
                message="deletes in flight",
            )
            assert process.returncode is None, stderr.decode()
            answered = {record.obj["metadata"]["uid"] for record in sim.deleted}
            in_flight = {request.uid for request in world.delete_requests} - answered
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(DRAIN_TIMEOUT + 30):
                code = await process.wait()
        world.check_safety()
        left = world.pending_zombies()
    logs = json_lines(bytes(stdout))
    decided = {entry.get("uid") for entry in logs if entry.get("event") in DECISIONS}
    assert code == 0, stderr.decode()[-2000:]
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
