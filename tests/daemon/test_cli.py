"""The command line: exit codes, one-line errors, ``run`` under signals, ``scan``, ``version``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from anyio.abc import Process
from zombied.cli import MAX_ERROR_CHARS, main

from kubesim import Simulator
from tests.daemon.pods import zombie
from tests.helpers import eventually, json_lines

PYTHON = sys.executable


# -- in-process ------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["version"], ["--version"], ["-V"]])
def test_version(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("zombied ")
    assert out[1].startswith("kubernetes_asyncio ")


def test_help_and_missing_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    words = capsys.readouterr().out.split()
    assert {"commands:", "run", "scan", "explain", "version"} <= set(words)
    assert "sim" not in words  # the simulator is not a command of the controller
    assert main([]) == 2
    assert "usage: zombied" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["explode"], "unknown command 'explode'"),
        (["sim", "--help"], "unknown command 'sim'"),
        (["run", "--qps", "-1"], "--qps"),
        (["scan", "--min-age", "soon"], "--min-age"),
        (["run", "--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
        (["scan", "--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
        # A huge bad value is cut, but still names its option.
        (["run", "--qps", "x\n" * 100_000], "--qps"),
    ],
)
def test_configuration_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("zombied: error: ")
    assert needle in line
    assert len(line) <= len("zombied: error: ") + MAX_ERROR_CHARS
    assert captured.out == ""


async def test_scan_failure_is_one_line_exit_1(
    sim: Simulator, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.faults.add_error("list", "pods", status=403)
    argv = ["scan", "-A", "--kubeconfig", str(kubeconfig)]
    assert await anyio.to_thread.run_sync(main, argv) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("zombied: error: missing RBAC permission to list pods at the")


# -- real processes --------------------------------------------------------------------


class Running:
    """A ``zombied run`` process and the JSON log lines it printed so far."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.logs: list[dict[str, Any]] = []

    async def pump(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            *lines, buffer = (buffer + chunk).split(b"\n")
            self.logs.extend(json_lines(b"\n".join(lines)))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [entry for entry in self.logs if entry.get("event") == name]

    def port(self) -> int:
        (listening,) = self.events("http.listening")
        return int(listening["port"])


@asynccontextmanager
async def zombied_run(
    kubeconfig: Path, *args: str, module: str = "zombied", env: dict[str, str] | None = None
) -> AsyncIterator[Running]:
    """``python -m zombied run`` (or ``module``'s) on a free port, min age 0, JSON logs;
    ``env`` adds to the environment."""
    command = [PYTHON, "-m", module, "run", "--kubeconfig", str(kubeconfig)]
    command += ["--listen", "127.0.0.1:0", "--min-age", "0s", "--log-format", "json", *args]
    environ = {**os.environ, **(env or {})}
    async with await anyio.open_process(command, stderr=subprocess.STDOUT, env=environ) as process:
        running = Running(process)
        async with anyio.create_task_group() as tg:
            tg.start_soon(running.pump)
            try:
                yield running
            finally:
                if process.returncode is None:
                    process.kill()
                    with anyio.CancelScope(shield=True):
                        await process.wait()


async def readyz(port: int) -> bool:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as response,
    ):
        return response.status == 200


async def in_flight(port: int) -> bool:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    return "zombied_zombies_known 1.0" in text and "zombied_queue_depth 0.0" in text


@pytest.mark.subprocess
async def test_second_signal_exits_at_once(sim: Simulator, kubeconfig: Path) -> None:
    sim.faults.add_latency("delete", "pods", 60.0)
    async with zombied_run(kubeconfig, "--drain-timeout", "60s") as running:
        await eventually(lambda: running.events("http.listening"), timeout=30)
        await eventually(lambda: readyz(running.port()), timeout=30)
        sim.store.create("pods", zombie("slow"))
        # Known and no longer queued: a worker holds it, its DELETE held up by the latency.
        await eventually(lambda: in_flight(running.port()), timeout=30)
        running.process.send_signal(signal.SIGTERM)
        await eventually(lambda: running.events("daemon.draining"), timeout=30)
        running.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            code = await running.process.wait()
    assert code == 128 + signal.SIGTERM
    assert running.events("daemon.signal")[-1]["action"] == "exit now"


@pytest.mark.subprocess
async def test_a_taken_listen_port_is_one_line_exit_2(sim: Simulator, kubeconfig: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        command = [PYTHON, "-m", "zombied", "run", "--kubeconfig", str(kubeconfig)]
        command += ["--listen", address, "--log-format", "json"]
        result = await anyio.run_process(command, check=False)
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith(f"zombied: error: --listen {address}: ")


def interruptible(argv: list[str]) -> subprocess.Popen[str]:
    """A process that dies of SIGINT unless it handles it, whatever the test runner ignores."""
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )


@pytest.mark.subprocess
async def test_ctrl_c_while_starting_exits_130_without_a_traceback(tmp_path: Path) -> None:
    # Reading the configuration from a FIFO holds start-up at a known place.
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    process = interruptible([PYTHON, "-m", "zombied", "run", "--config", str(fifo)])
    try:

        def reading() -> int | None:
            try:  # succeeds once zombied has the FIFO open for reading
                return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return None

        writer = await eventually(reading, timeout=60)
        assert isinstance(writer, int)
        # Blocked in read(2): a signal just before it would wait for the read to end.
        wchan = Path(f"/proc/{process.pid}/wchan")
        await eventually(lambda: "pipe_read" in wchan.read_text(encoding="utf-8"), timeout=60)
        process.send_signal(signal.SIGINT)
        _, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=60))
        os.close(writer)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert "Traceback" not in err
