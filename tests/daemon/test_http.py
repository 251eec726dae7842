"""The probe and metrics server on its own: bound port, probe answers, scrape hook."""

import aiohttp
import pytest
from structlog.testing import capture_logs
from zombied.errors import ListenError
from zombied.http import HttpServer, LoopMonitor


async def test_probes_and_metrics_on_an_ephemeral_port() -> None:
    state = {"healthy": True, "ready": False, "scrapes": 0}

    def before_scrape() -> None:
        state["scrapes"] += 1

    with capture_logs() as logs:
        async with HttpServer(
            "127.0.0.1",
            0,
            health=lambda: (bool(state["healthy"]), "ok" if state["healthy"] else "wedged"),
            ready=lambda: (bool(state["ready"]), "ok" if state["ready"] else "scope x: not synced"),
            before_scrape=before_scrape,
        ) as server:
            assert server.port > 0
            base = f"http://127.0.0.1:{server.port}"
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 200
                async with session.get(f"{base}/readyz") as response:
                    assert response.status == 503
                    assert "not synced" in await response.text()
                state["ready"], state["healthy"] = True, False
                async with session.get(f"{base}/readyz") as response:
                    assert response.status == 200
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 503
                    assert "wedged" in await response.text()
                async with session.get(f"{base}/metrics") as response:
                    assert response.status == 200
                    assert "zombied_build_info" in await response.text()
    assert state["scrapes"] == 1
    (listening,) = [entry for entry in logs if entry["event"] == "http.listening"]
    assert (listening["host"], listening["port"]) == ("127.0.0.1", server.port)


async def test_port_in_use_fails_cleanly() -> None:
    async with HttpServer(
        "127.0.0.1", 0, health=lambda: (True, ""), ready=lambda: (True, "")
    ) as one:
        second = HttpServer(
            "127.0.0.1", one.port, health=lambda: (True, ""), ready=lambda: (True, "")
        )
        with pytest.raises(ListenError, match=rf"^--listen 127.0.0.1:{one.port}: address already"):
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
    assert not ok
    assert why == "event loop stalled for 12.0s"
