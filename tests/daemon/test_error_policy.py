"""One error policy: what the API or the network causes is retried, a bug is a crash."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from zombied.daemon import Daemon
from zombied.kube import open_kube
from zombied.pod import parse_pod
from zombied.reaper import Action, Reaper

from kubesim import Simulator
from tests.daemon.conftest import ConfigFactory, captured_logs
from tests.daemon.pods import zombie
from tests.daemon.test_cli import zombied_run
from tests.helpers import eventually


@pytest.mark.subprocess
async def test_a_bug_in_classification_ends_the_process_non_zero(
    sim: Simulator, kubeconfig: Path
) -> None:
    sim.store.create("pods", zombie("fine"))
    async with zombied_run(kubeconfig, module="tests.daemon.buggy_run") as running:
        await eventually(lambda: sim.store.get("pods", "team-a", "fine") is None, timeout=30)
        sim.store.create("pods", zombie("bug-1"))
        with anyio.fail_after(15):
            code = await running.process.wait()
    assert code not in (0, None)
    (crash,) = running.events("daemon.crashed")
    assert "TypeError: injected bug in classification" in crash["exception"]
    assert not running.events("watch.error") + running.events("pod.delete_failed")
    assert sim.store.get("pods", "team-a", "bug-1") is not None


async def test_a_timed_out_delete_is_retried(sim: Simulator, kubeconfig: Path) -> None:
    snapshot = parse_pod(sim.store.create("pods", zombie("slow")))
    slow = sim.faults.add_latency("delete", "pods", 5.0)
    async with open_kube(str(kubeconfig)) as kube:
        reaper = Reaper(kube, delete_timeout=0.2)
        outcome = await reaper.delete(snapshot, "node-shutdown")
        assert (outcome.code, outcome.action) == (0, Action.BACKOFF)
        sim.faults.remove(slow)
        again = await reaper.delete(snapshot, "node-shutdown")
    assert again.outcome == "deleted"


async def test_a_failing_watch_is_retried(sim: Simulator, config: ConfigFactory) -> None:
    sim.faults.add_error("list", "pods", status=500, count=1)
    sim.faults.add_error("watch", "pods", status=503, count=1)
    sim.store.create("pods", zombie("z"))
    with captured_logs() as logs:
        async with Daemon(config()) as daemon:
            await eventually(lambda: sim.store.get("pods", "team-a", "z") is None)
            sim.store.create("pods", zombie("after"))
            await eventually(lambda: sim.store.get("pods", "team-a", "after") is None)
            assert daemon.healthy()
    errors = [(e["verb"], e["code"]) for e in logs if e["event"] == "watch.error"]
    assert errors == [("list", 500), ("watch", 503)]
