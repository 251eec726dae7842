"""``python -m bench.demo`` (``make demo``): watch zombied reap a Spot preemption.

This module owns the guided tour: it serves a simulated cluster in-process (3 nodes,
30 pods over 3 namespaces, mixed owners), runs ``zombied scan``, starts ``zombied
run`` as a real subprocess with console logs streaming through, and loses two Spot
nodes both ways a 1.26 kubelet knows: one shut down gracefully (``node-shutdown``
zombies), one preempted without notice and back under the same name, its kubelet
rejecting the pods still bound to it (``admission-rejected`` zombies). It asks
``zombied explain`` about one zombie of each kind while they wait out their min age,
waits until they are gone, checks that the replacements and the pods no rule targets
were left alone, and asks again about the pods it kept: one zombie of each kind an
operator opted out with ``zombied.io/keep``, and a crashed Job pod no rule selects.
It ends by itself well within a minute, stops the daemon with SIGTERM (a kill only
if it hangs) and leaves no process behind.

It is meant to be read on a screen or two: explain's verdict lines rather than its
whole report, pods counted by owner rather than listed, and the first pod.reaped
lines of the daemon's log with a count of the rest. Reap delays are measured from the
terminal time the kubelet wrote on each pod, the time zombied's min age counts from,
so a delay below the min age would be a bug, and the summary says so.

It never reaches into the daemon: it talks to zombied only through its command line,
exactly as an operator would, and judges it only by what the API server saw.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import zombied
from anyio.streams.text import TextReceiveStream
from tests.helpers import eventually, free_port

from kubesim import DeletedRecord, Simulator
from kubesim.scenario import PodRef, PreemptResult, build_named

#: The node shut down gracefully, and the one preempted without notice that comes back
#: under its name; the kubelet version both imitate; the min age of both rules.
NODE, RETURNING, VERSION, MIN_AGE_S = "node-1", "node-2", "1.26", 8
MIN_AGE = f"{MIN_AGE_S}s"
READY_TIMEOUT = 20.0
REAP_TIMEOUT = 25.0
STOP_TIMEOUT = 10.0
POLL = 0.05
KEEP_ANNOTATION = "zombied.io/keep"
#: pod.reaped lines of the daemon's log printed in a row; the rest are counted.
REAPED_SHOWN = 3
#: The rules and min age every zombied command of the tour shares.
FLAGS = ("--rules", f"node-shutdown,admission-rejected={MIN_AGE}", "--min-age", MIN_AGE)


@dataclass
class Summary:
    zombies: list[PodRef] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    reaped: list[PodRef] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: Seconds from each reaped pod's terminal time (as the kubelet wrote it) to its delete.
    delays: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    exit_code: int | None = None


def _zombied_env() -> dict[str, str]:
    # The daemon must import this very checkout, installed or not.
    root = str(Path(zombied.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("KUBERNETES_SERVICE_HOST", None)  # never mistake the demo for in-cluster
    return env


def _say(*lines: str) -> None:
    for line in lines:
        print(line, flush=True)


def _section(title: str) -> None:
    _say("", f"== {title}")


async def _zombied(*args: str) -> list[str]:
    """``zombied ARGS...`` to its end: its output, indented, as the tour prints it."""
    result = await anyio.run_process(
        [sys.executable, "-m", "zombied", *args],
        check=False,
        env=_zombied_env(),
        stderr=subprocess.STDOUT,
    )
    lines = [f"   {line}" for line in result.stdout.decode(errors="replace").rstrip().splitlines()]
    if result.returncode != 0:
        lines.append(f"   (zombied {args[0]} exited {result.returncode})")
    return lines or ["   (no output)"]


def _verdict(report: list[str]) -> list[str]:
    """The decision lines of an explain report (all of it when it has none)."""
    picked = [line for line in report if line.strip().startswith(("Decision:", "Would:"))]
    return picked or report


async def _explain_all(kubeconfig: Path, refs: Sequence[str]) -> None:
    """Explain several pods at once (one process each); their verdicts, in order."""
    outputs: dict[str, list[str]] = {}

    async def one(ref: str) -> None:
        explained = await _zombied("explain", ref, "--kubeconfig", str(kubeconfig), *FLAGS)
        outputs[ref] = [f"   $ zombied explain {ref}", *_verdict(explained)]

    async with anyio.create_task_group() as tg:
        for ref in refs:
            tg.start_soon(one, ref)
    for ref in refs:
        _say(*outputs[ref])


@dataclass
class _LogView:
    """The daemon's log as the tour prints it: a run of pod.reaped lines is shortened."""

    reaped: int = 0

    def line(self, text: str) -> None:
        if " pod.reaped " in text:
            self.reaped += 1
            if self.reaped > REAPED_SHOWN:
                return
        else:
            self.end_run()
        _say(f"   | {text}")

    def end_run(self) -> None:
        if self.reaped > REAPED_SHOWN:
            _say(f"   | ... and {self.reaped - REAPED_SHOWN} more pod.reaped lines")
        self.reaped = 0


async def _stream(process: anyio.abc.Process) -> None:
    assert process.stdout is not None
    view = _LogView()
    buffer = ""
    async for chunk in TextReceiveStream(process.stdout, errors="replace"):
        buffer += chunk
        *lines, buffer = buffer.split("\n")
        for line in lines:
            view.line(line)
    if buffer:
        view.line(buffer)
    view.end_run()


async def _ready(url: str, process: anyio.abc.Process) -> bool:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
        with anyio.move_on_after(READY_TIMEOUT):
            while process.returncode is None:
                try:
                    async with session.get(url) as response:
                        if response.status == 200:
                            return True
                except aiohttp.ClientError:
                    pass
                await anyio.sleep(POLL * 2)
    return False  # timed out, or the daemon exited


async def _stop(process: anyio.abc.Process) -> None:
    """SIGTERM, and a kill if zombied does not exit within STOP_TIMEOUT; idempotent."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(STOP_TIMEOUT):
                await process.wait()
            if process.returncode is None:
                _say("   !! zombied ignored SIGTERM; killing it")
                process.kill()
        await process.wait()


async def run_demo() -> Summary:
    """The whole tour; returns what happened (``problems`` empty when all went well)."""
    summary = Summary()
    with tempfile.TemporaryDirectory(prefix="zombied-demo-") as tmp:
        async with Simulator(host="127.0.0.1", port=0, seed=0) as sim:
            kubeconfig = sim.write_kubeconfig(Path(tmp) / "kubeconfig")
            built = build_named(sim.cluster, "demo")
            _section(f"Simulated API server at {sim.url}")
            _say(
                f"   {len(built.nodes)} nodes, {built.pods} running pods in "
                f"{', '.join(built.namespaces)}: "
                + ", ".join(f"{n} {kind}" for kind, n in built.by_owner.items() if n)
            )

            _section("zombied scan (before any node goes away)")
            _say(*await _zombied("scan", "-A", "--kubeconfig", str(kubeconfig)))

            port = free_port()
            command = [
                sys.executable,
                "-m",
                "zombied",
                "run",
                "--kubeconfig",
                str(kubeconfig),
                *FLAGS,
                "--log-format=console",
                "--listen",
                f"127.0.0.1:{port}",
            ]
            _section("zombied run")
            _say(f"   $ zombied {' '.join(command[3:])}")
            died = False
            process = await anyio.open_process(
                command, env=_zombied_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_stream, process)
                    await _tour(sim, process, port, summary, kubeconfig)
                    died = process.returncode is not None
                    await _stop(process)  # ends the stream of its logs
            finally:
                await _stop(process)
                await process.aclose()
            summary.exit_code = process.returncode
            if summary.exit_code != 0:
                how = "by itself" if died else "on SIGTERM"
                summary.problems.append(f"zombied run exited {summary.exit_code} {how}")

            _section("zombied scan (after)")
            _say(*await _zombied("scan", "-A", "--kubeconfig", str(kubeconfig)))

            if summary.explained:
                _section("zombied explain: the pods it kept, and why")
                await _explain_all(kubeconfig, summary.explained)
    return summary


async def _tour(
    sim: Simulator, process: anyio.abc.Process, port: int, summary: Summary, kubeconfig: Path
) -> None:
    if not await _ready(f"http://127.0.0.1:{port}/readyz", process):
        summary.problems.append("zombied never became ready")
        return
    _say("   -- zombied is ready (/readyz 200)")

    # Pods no default rule targets: an evicted pod and a crashed Job pod stay put.
    team_a = [p["metadata"]["name"] for p in sim.store.list("pods", "team-a")]
    evicted = next(p for p in team_a if p.startswith(("api-", "frontend-")))
    crashed = next(p for p in team_a if p.startswith("report-"))
    sim.cluster.evict("team-a", evicted)
    sim.cluster.fail("team-a", crashed)
    summary.kept = [f"team-a/{evicted} (Evicted)", f"team-a/{crashed} (Error)"]
    # An operator keeps one pod on each doomed node for a post-mortem.
    kept = [_opt_out(sim, NODE), _opt_out(sim, RETURNING)]
    summary.kept += [f"{ref} ({KEEP_ANNOTATION})" for ref in kept]

    _section(f"Preempting {NODE} (kubelet {VERSION}, graceful node shutdown)")
    preempted_at = time.time()
    shut = sim.cluster.preempt(NODE, version=VERSION)
    _report(sim, shut, "left Failed/Terminated")
    _section(f"Preempting {RETURNING} without notice; it comes back under the same name")
    back = sim.cluster.return_node(RETURNING, version=VERSION)
    _report(sim, back, "rejected at admission")

    lost = [*shut.zombies, *back.zombies]
    zombies = [ref for ref in lost if f"{ref.namespace}/{ref.name}" not in kept]
    summary.zombies = zombies
    zombie_uids = {ref.uid for ref in zombies}
    kept_uids = {ref.uid for ref in lost} - zombie_uids

    _section("zombied explain, while the zombies wait out their min age")
    first_of_each = [
        f"{ref.namespace}/{ref.name}"
        for ref in (
            next(r for r in shut.zombies if r.uid in zombie_uids),
            next(r for r in back.zombies if r.uid in zombie_uids),
        )
    ]
    await _explain_all(kubeconfig, first_of_each)

    def deleted() -> dict[str, DeletedRecord]:
        return {r.obj["metadata"]["uid"]: r for r in sim.deleted if not r.dry_run}

    # Polls what the API server recorded, as an operator watching would.
    try:
        await eventually(lambda: zombie_uids <= deleted().keys(), REAP_TIMEOUT, POLL)
    except AssertionError:
        _say(f"   !! timed out after {REAP_TIMEOUT:.0f}s waiting for the reaps")
    # The StatefulSet controller reacts to the deletion synchronously in the store.
    records = deleted()
    summary.reaped = [ref for ref in zombies if ref.uid in records]
    summary.delays = [
        records[ref.uid].time - _terminal_time(records[ref.uid].obj, preempted_at)
        for ref in summary.reaped
    ]
    if summary.delays and min(summary.delays) < MIN_AGE_S:
        summary.problems.append(f"reaped a pod before its min age ({MIN_AGE})")
    missing = [f"{r.namespace}/{r.name}" for r in zombies if r.uid not in records]
    if missing:
        summary.problems.append(f"not reaped: {', '.join(missing)}")
    if kept_uids & set(records):
        summary.problems.append("deleted a pod carrying zombied.io/keep")
    summary.explained = [*kept, f"team-a/{crashed}"]

    replacements = [r for r in (*shut.replacements, *back.replacements) if r.uid not in zombie_uids]
    statefulset = [
        r for r in (*shut.awaiting_replacement, *back.awaiting_replacement) if r.uid in zombie_uids
    ]
    _check_untouched(sim, replacements, statefulset, zombie_uids, summary)


def _opt_out(sim: Simulator, node: str) -> str:
    """Annotate one ReplicaSet pod on ``node`` with zombied.io/keep; return NAMESPACE/NAME."""
    pod = next(
        p
        for p in sim.cluster.pods_on(node)
        if p["status"].get("phase") == "Running"
        and (p["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ReplicaSet"
    )
    pod["metadata"].setdefault("annotations", {})[KEEP_ANNOTATION] = "true"
    sim.store.update("pods", pod)
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _terminal_time(pod: dict[str, Any], default: float) -> float:
    """When the kubelet wrote ``pod`` terminal: its latest container end or condition
    change (whole seconds, as the API keeps them); ``default`` if it wrote neither."""
    status = pod.get("status") or {}
    stamps = [c.get("lastTransitionTime") for c in status.get("conditions") or []]
    stamps += [
        ((c.get("state") or {}).get("terminated") or {}).get("finishedAt")
        for c in status.get("containerStatuses") or []
    ]
    times = [datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() for s in stamps if s]
    return max(times, default=default)


def _report(sim: Simulator, result: PreemptResult, what: str) -> None:
    kinds: Counter[str] = Counter()
    for ref in result.zombies:
        pod = sim.store.get("pods", ref.namespace, ref.name) or {}
        owners = (pod.get("metadata") or {}).get("ownerReferences") or [{"kind": "bare"}]
        kinds[owners[0]["kind"]] += 1
    _say(
        f"   {len(result.zombies)} pods {what} on {result.node}: "
        + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common()),
        f"   controllers started {len(result.replacements)} replacements elsewhere; "
        f"{len(result.awaiting_replacement)} StatefulSet pod(s) come back once reaped",
    )


def _check_untouched(
    sim: Simulator,
    replacements: Sequence[PodRef],
    statefulset: Sequence[PodRef],
    zombie_uids: set[str],
    summary: Summary,
) -> None:
    deleted_uids = {r.obj["metadata"]["uid"] for r in sim.deleted}
    wrong = sorted(
        f"{r.obj['metadata']['namespace']}/{r.obj['metadata']['name']}"
        for r in sim.deleted
        if r.obj["metadata"]["uid"] not in zombie_uids
    )
    if wrong:
        summary.problems.append(f"deleted pods that were no zombies: {', '.join(wrong)}")
    for ref in replacements:
        pod = sim.store.get("pods", ref.namespace, ref.name)
        if pod is None or pod["metadata"]["uid"] != ref.uid or ref.uid in deleted_uids:
            summary.problems.append(f"replacement {ref.namespace}/{ref.name} was touched")
    for ref in statefulset:
        pod = sim.store.get("pods", ref.namespace, ref.name)
        if pod is None or pod["metadata"]["uid"] == ref.uid:
            summary.problems.append(f"{ref.namespace}/{ref.name} did not come back")
        elif pod["status"]["phase"] != "Running":
            summary.problems.append(f"{ref.namespace}/{ref.name} came back not Running")
        else:
            _say(
                f"   {ref.namespace}/{ref.name} is back with a new uid "
                f"({ref.uid[:8]}... -> {pod['metadata']['uid'][:8]}...), untouched"
            )


def _print_summary(summary: Summary) -> None:
    _section("Summary")
    _say(f"   zombies reaped:   {len(summary.reaped)}/{len(summary.zombies)}")
    _say(f"   pods kept:        {len(summary.kept)} ({'; '.join(summary.kept) or 'none'})")
    if summary.delays:
        first, last = min(summary.delays), max(summary.delays)
        _say(
            f"   reaped after:     {first:.2f} to {last:.2f} s from the terminal time the "
            f"kubelet wrote on each pod;",
            f"                     due at the min age of {MIN_AGE_S} s, so "
            f"{first - MIN_AGE_S:+.2f} to {last - MIN_AGE_S:+.2f} s from due",
        )
    _say(f"   zombied run exit: {summary.exit_code}")
    _say(*(f"   PROBLEM: {problem}" for problem in summary.problems))
    _say("   OK" if not summary.problems else "   FAILED")


def main() -> int:
    try:
        summary = anyio.run(run_demo, backend="asyncio")
    except KeyboardInterrupt:
        return 130
    _print_summary(summary)
    return 0 if not summary.problems else 1


if __name__ == "__main__":
    sys.exit(main())
