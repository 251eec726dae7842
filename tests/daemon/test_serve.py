"""``serve``: the signal-driven lifetime of ``zombied run``, in-process (where coverage
sees it; tests/reliability/test_signals sends SIGTERM to a real process)."""

from __future__ import annotations

import os
import signal

import anyio
from zombied.daemon import serve

from kubesim import Simulator
from tests.daemon.conftest import ConfigFactory, captured_logs
from tests.daemon.pods import zombie
from tests.helpers import eventually


async def test_sigterm_drains_and_returns_0(sim: Simulator, config: ConfigFactory) -> None:
    sim.store.create("pods", zombie("z"))
    result: list[int] = []

    async def run() -> None:
        result.append(await serve(config()))

    with captured_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: len(sim.deleted) == 1)
            await eventually(lambda: any(e["event"] == "daemon.started" for e in logs))
            # The receiver is installed before the daemon starts: the signal reaches it.
            os.kill(os.getpid(), signal.SIGTERM)
    assert result == [0]
    events = [e["event"] for e in logs]
    assert events.index("daemon.signal") < events.index("daemon.draining")
    assert events[-1] == "daemon.drained"
