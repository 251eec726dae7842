"""One error policy: what the API or the network causes is retried (see test_daemon's
faults), a bug is a crash: the exception ends the daemon, logged, never retried."""

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


# A ValueError is what a line too long for the watch's reader raises too: it must not
# be taken for one.
@pytest.mark.parametrize("bug", [TypeError, ValueError])
async def test_a_bug_in_handling_a_pod_ends_the_daemon_without_a_retry(
    sim: Simulator, config: ConfigFactory, monkeypatch: pytest.MonkeyPatch, bug: type[Exception]
) -> None:
    def judge(pod: Any, *args: Any, **kwargs: Any) -> Any:
        if pod.name.startswith("bug"):
            raise bug("injected bug in classification")
        return real_judge(pod, *args, **kwargs)

    monkeypatch.setattr("zombied.cache.judge", judge)
    with captured_logs() as logs, pytest.raises(ExceptionGroup) as raised:  # noqa: PT012
        async with Daemon(config()) as daemon:
            await eventually(daemon.ready)
            sim.store.create("pods", zombie("bug-1"))
            with anyio.fail_after(10):
                await anyio.sleep_forever()
    assert raised.group_contains(bug, match="injected bug")
    assert [e["event"] for e in logs if e["log_level"] == "critical"] == ["daemon.crashed"]
    retried = ("watch.error", "watch.relist", "pod.delete_failed")
    assert not [e for e in logs if e["event"] in retried]
    assert sim.store.get("pods", "team-a", "bug-1") is not None
