"""How fast the simulated API server answers big LISTs and fans watch events out.

Runs the simulator as its own process (as the benchmark does), fills it with a
scenario through the control API, then measures from this process:

* LIST of every pod, read whole, with raw aiohttp and with kubernetes_asyncio
  (``_preload_content=False``), plus the client's JSON decode separately;
* a server-side filtered LIST (terminal pods only) and a paginated LIST;
* watch fan-out: N pod modifications delivered to 10 concurrent watchers.

Usage: ``.venv/bin/python bench/sim_speed.py [--pods 100000] [--events 20000] [--watchers 10]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml
from kubernetes_asyncio import client
from zombied.kube import open_api_client

TERMINAL = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"


def start_sim(kubeconfig: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "--port", "0", "--kubeconfig", str(kubeconfig)],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("simulator did not start")
        time.sleep(0.05)
    return proc


def best(samples: list[float]) -> str:
    return f"best {min(samples):.3f} s, median {statistics.median(samples):.3f} s"


async def bench(kubeconfig: Path, pods: int, events: int, watchers: int, runs: int) -> None:
    config = yaml.safe_load(await anyio.Path(kubeconfig).read_text())
    url = config["clusters"][0]["cluster"]["server"]
    token = config["users"][0]["user"]["token"]
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(url, headers=headers, timeout=timeout) as http:
        namespaces = [f"team-{i:03d}" for i in range(max(1, pods // 1000))]
        started = time.perf_counter()
        async with http.post(
            "/_sim/scenario",
            json={"nodes": max(3, pods // 100), "pods": pods, "namespaces": namespaces},
        ) as resp:
            resp.raise_for_status()
        print(f"scenario: {pods} pods built in {time.perf_counter() - started:.2f} s (server side)")

        samples: list[float] = []
        size = 0
        for _ in range(runs):
            started = time.perf_counter()
            async with http.get("/api/v1/pods") as resp:
                body = await resp.read()
            samples.append(time.perf_counter() - started)
            size = len(body)
        count = len(json.loads(body)["items"])
        print(
            f"LIST {count} pods, raw aiohttp: {best(samples)}; {size / 1e6:.0f} MB, "
            f"{size / 1e6 / min(samples):.0f} MB/s"
        )
        started = time.perf_counter()
        json.loads(body)
        print(f"  client json.loads of that body: {time.perf_counter() - started:.3f} s")
        del body

        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            async with http.get("/api/v1/pods", params={"fieldSelector": TERMINAL}) as resp:
                await resp.read()
            samples.append(time.perf_counter() - started)
        print(f"LIST with terminal-phase field selector: {best(samples)}")

        started = time.perf_counter()
        token_ = ""
        pages = 0
        while True:
            params = {"limit": "500"}
            if token_:
                params["continue"] = token_
            async with http.get("/api/v1/pods", params=params) as resp:
                data = json.loads(await resp.read())
            pages += 1
            token_ = data["metadata"].get("continue", "")
            if not token_:
                break
        elapsed = time.perf_counter() - started
        print(f"LIST paginated (limit=500, {pages} pages, decoded): {elapsed:.3f} s")

    async with open_api_client(str(kubeconfig)) as api:
        core = client.CoreV1Api(api)
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            resp = await core.list_pod_for_all_namespaces(_preload_content=False)
            body = await resp.read()
            samples.append(time.perf_counter() - started)
        print(f"LIST via kubernetes_asyncio (_preload_content=False): {best(samples)}")
        del body

    await fan_out(url, headers, events, watchers, selector="")
    await fan_out(url, headers, events, watchers, selector="status.phase=Running")


async def fan_out(
    url: str, headers: dict[str, str], events: int, watchers: int, *, selector: str
) -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(url, headers=headers, timeout=timeout) as http:
        async with http.get("/_sim/stats") as resp:
            rv = (await resp.json())["resourceVersion"]
        params = {"watch": "true", "resourceVersion": str(rv), "timeoutSeconds": "600"}
        if selector:
            params["fieldSelector"] = selector
        done_at: list[float] = []
        ready = anyio.Event()
        all_done = anyio.Event()
        opened = 0

        async def watcher() -> None:
            nonlocal opened
            async with http.get("/api/v1/pods", params=params) as resp:
                opened += 1
                if opened == watchers:
                    ready.set()
                seen = 0
                async for chunk in resp.content.iter_any():
                    seen += chunk.count(b"\n")
                    if seen >= events:
                        break
                done_at.append(time.perf_counter())
                if len(done_at) == watchers:
                    all_done.set()

        churn: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            for _ in range(watchers):
                tg.start_soon(watcher)
            await ready.wait()
            await anyio.sleep(0.2)
            started = time.perf_counter()
            churn_body = {"events": events, "fieldSelector": selector}
            with anyio.fail_after(300):
                async with http.post("/_sim/churn", json=churn_body) as resp:
                    resp.raise_for_status()
                    churn = await resp.json()
                await all_done.wait()
        total = max(done_at) - started
        label = f"selector {selector!r}" if selector else "no selector"
        print(
            f"WATCH fan-out ({label}): {events} events to {watchers} watchers in {total:.3f} s "
            f"({events * watchers / total:,.0f} deliveries/s); generating the events took "
            f"{churn['seconds']:.3f} s server side"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--watchers", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        proc = start_sim(kubeconfig)
        try:
            anyio.run(bench, kubeconfig, args.pods, args.events, args.watchers, args.runs)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            print(
                f"simulator exited with {code} after SIGTERM (pid {proc.pid}, ours {os.getpid()})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
