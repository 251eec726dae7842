"""The workaround zombied replaces: a CronJob running the real `kubectl` on a schedule.

Each run does what the usual CronJob script does in its namespace,
`kubectl get pods --field-selector=status.phase==Failed -o name | xargs kubectl delete`:
no uid precondition and no filter beyond the phase, the deletes batched into command
lines as `xargs` builds them. Each run gets a fresh kubectl cache directory, because a
CronJob's pod starts with an empty one, so API discovery is paid on every run, as in a
cluster. Runs follow a fixed schedule (`first + k * period`); a run that overruns its
period skips the missed slots, as `concurrencyPolicy: Forbid` does, and a run longer
than its deadline is killed, as `activeDeadlineSeconds` does. This module only ever
talks to a cluster through the kubeconfig it is given.
"""

from __future__ import annotations

import http.client
import math
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench.procs import high_water_rss

KUBECTL: Final = "/usr/bin/kubectl"
# GNU xargs builds command lines of at most 128 KiB by default.
XARGS_MAX_CHARS: Final = 128 * 1024


@dataclass(slots=True)
class Invocation:
    """One kubectl process: what it cost the machine."""

    argv_head: str
    cpu_seconds: float
    max_rss_bytes: int
    returncode: int
    stderr_tail: str = ""


@dataclass(slots=True)
class CronRun:
    """One run of the job."""

    started: float
    finished: float = 0.0
    invocations: list[Invocation] = field(default_factory=list)
    cut_at: float | None = None  # when the deadline stopped the run, if it did


def batch_names(names: Iterable[str], *, prefix_chars: int, max_chars: int) -> list[list[str]]:
    """Split arguments into command lines no longer than `max_chars`, as xargs does.

    Each argument costs its length plus one separator; a single argument longer than
    the limit still gets its own line rather than being dropped.
    """
    batches: list[list[str]] = []
    current: list[str] = []
    used = prefix_chars
    for name in names:
        cost = len(name) + 1
        if current and used + cost > max_chars:
            batches.append(current)
            current = []
            used = prefix_chars
        current.append(name)
        used += cost
    if current:
        batches.append(current)
    return batches


def _run(argv: Sequence[str], *, deadline: float) -> tuple[Invocation, str]:
    """Run one kubectl to its end or to `deadline`: its output, CPU seconds and peak RSS.

    The peak comes from the process's own `VmHWM`, read while it runs: `ru_maxrss`
    from `wait4` would include the harness's memory that the child inherited before it
    exec'd kubectl.
    """
    peak_rss = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        while True:
            peak_rss = max(peak_rss, high_water_rss(proc.pid))
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.time() >= deadline and proc.returncode is None:
                proc.kill()  # the job's activeDeadlineSeconds: the pod is killed mid-run
                proc.returncode = -9
            time.sleep(0.005)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        out.seek(0)
        invocation = Invocation(
            argv_head=" ".join(argv[5:8]),
            cpu_seconds=rusage.ru_utime + rusage.ru_stime,
            max_rss_bytes=peak_rss,
            returncode=proc.returncode,
            stderr_tail=err.read()[-500:].decode(errors="replace").strip(),
        )
        return invocation, out.read().decode(errors="replace")


def run_once(kubeconfig: Path, *, namespace: str, deadline_s: float) -> CronRun:
    """One run of the CronJob script in `namespace`, start to end (or to its deadline)."""
    run = CronRun(started=time.time())
    deadline = run.started + deadline_s
    with tempfile.TemporaryDirectory(prefix="kubectl-cache-") as cache:
        base = [KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}", "-n", namespace]
        listing = [*base, "get", "pods", "--field-selector=status.phase==Failed", "-o", "name"]
        invocation, out = _run(listing, deadline=deadline)
        run.invocations.append(invocation)
        head = [*base, "delete", "--wait=false"]
        prefix = sum(len(part) + 1 for part in head)
        for batch in batch_names(out.split(), prefix_chars=prefix, max_chars=XARGS_MAX_CHARS):
            if time.time() >= deadline:
                run.cut_at = run.cut_at or time.time()
                break
            invocation, _ = _run([*head, *batch], deadline=deadline)
            run.invocations.append(invocation)
            if invocation.returncode == -9:
                run.cut_at = time.time()
    run.finished = time.time()
    return run


def next_slot(first: float, period: float, now: float) -> float:
    """The first time of the schedule `first + k * period` at or after `now`."""
    if now <= first:
        return first
    # The epsilon keeps float error from pushing an exact slot to the next one.
    return first + math.ceil((now - first) / period - 1e-9) * period


def run_schedule(
    kubeconfig: Path,
    *,
    namespace: str,
    period: float,
    first: float,
    deadline_s: float,
    zombies_left: Callable[[], int],
    stop: threading.Event,
) -> list[CronRun]:
    """`run_once` at `first + k * period` until the schedule is over (or `stop` is set).

    It is over once `zombies_left()` answers 0 after a run, or its first run was cut,
    or it would start a run more than a period after its first run ended: a storm gets
    the first run and the runs of one more period for what that run left behind.
    """
    runs: list[CronRun] = []
    slot = first
    while not runs or slot <= runs[0].finished + period:
        if stop.wait(max(0.0, slot - time.time())):
            break
        runs.append(run_once(kubeconfig, namespace=namespace, deadline_s=deadline_s))
        if runs[0].cut_at is not None or _none_left(zombies_left):
            break
        slot = next_slot(first, period, max(time.time(), slot + period))
    return runs


def _none_left(zombies_left: Callable[[], int]) -> bool:
    try:
        return zombies_left() == 0
    except (OSError, RuntimeError, http.client.HTTPException):
        return False  # not counted: the schedule's time bound ends it
