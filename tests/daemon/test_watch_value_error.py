"""A ValueError raised while handling a watch event is a bug, not a line too long."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from zombied.daemon import Daemon
from zombied.rules import judge as real_judge

from kubesim import Simulator
from tests.daemon.conftest import ConfigFactory, captured_logs
from tests.daemon.pods import zombie
from tests.helpers import eventually


def judge(pod: Any, *args: Any, **kwargs: Any) -> Any:
    if pod.name.startswith("bug"):
        raise ValueError("injected bug in classification")
    return real_judge(pod, *args, **kwargs)


async def test_a_value_error_in_handling_an_event_ends_the_daemon_without_a_retry(
    sim: Simulator, config: ConfigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("zombied.cache.judge", judge)
    with captured_logs() as logs, pytest.raises(ExceptionGroup) as raised:  # noqa: PT012
        async with Daemon(config()) as daemon:
            await eventually(daemon.ready)
            sim.store.create("pods", zombie("bug-1"))
            with anyio.fail_after(10):
                await anyio.sleep_forever()
    assert raised.group_contains(ValueError, match="injected bug")
    assert not [e for e in logs if e["event"] in ("watch.error", "watch.relist")]
