"""The probe server on its own: a taken port, a stalled event loop."""

import pytest
from zombied.errors import ListenError
from zombied.http import HttpServer, LoopMonitor


async def test_port_in_use_fails_cleanly() -> None:
    async with HttpServer(
        "127.0.0.1", 0, health=lambda: (True, ""), ready=lambda: (True, "")
    ) as one:
        second = HttpServer(
            "127.0.0.1", one.port, health=lambda: (True, ""), ready=lambda: (True, "")
        )
        with pytest.raises(ListenError, match=rf"^--listen 127\.0\.0\.1:{one.port}: "):
            async with second:
                raise AssertionError("bound twice")


async def test_loop_monitor_reports_a_stall_for_a_while() -> None:
    monitor = LoopMonitor(interval=0.5, stall_after=10.0, hold=60.0)
    assert monitor.check() == (True, "ok")
    monitor.record(0.2)
    assert monitor.check() == (True, "ok")
    monitor.record(12.0)
    monitor.record(0.0)  # the next beat is on time again, the stall is still reported
    ok, why = monitor.check()
    assert (ok, "12.0s" in why) == (False, True)
