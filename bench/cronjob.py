"""The workaround zombied replaces: a CronJob running the real `kubectl` on a schedule.

Each run does what the usual CronJob script does: list every Failed pod in the
cluster, then delete them by name, batched into `kubectl delete` command lines the way
`xargs` would, with no uid precondition and no filter beyond the phase. Each run gets
a fresh kubectl cache directory because a CronJob's pod starts with an empty one, so
API discovery is paid on every run, as in a cluster. Runs follow a fixed schedule
(`first + k * period`); a run that overruns its period skips the missed slots, as
`concurrencyPolicy: Forbid` does. A job may be scoped to one namespace (`-n` instead of
`-A`), so that several schedules can share one API server without deleting each other's
pods. This module only ever talks to a cluster through the kubeconfig it is given.
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

from bench.procs import high_water_rss

KUBECTL: Final = "/usr/bin/kubectl"
# GNU xargs builds command lines of at most 128 KiB by default.
XARGS_MAX_CHARS: Final = 128 * 1024
LIST_COLUMNS: Final = "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name"


@dataclass(slots=True)
class Invocation:
    """One kubectl process: what it cost the machine."""

    argv_head: str
    seconds: float
    cpu_seconds: float
    max_rss_bytes: int
    returncode: int
    stderr_tail: str = ""


@dataclass(slots=True)
class CronRun:
    """One run of the job."""

    scheduled: float
    started: float
    finished: float = 0.0
    listed: int = 0
    invocations: list[Invocation] = field(default_factory=list)
    cut_at: float | None = None  # when the deadline stopped the run, if it did

    @property
    def cpu_seconds(self) -> float:
        return sum(inv.cpu_seconds for inv in self.invocations)

    @property
    def max_rss_bytes(self) -> int:
        return max((inv.max_rss_bytes for inv in self.invocations), default=0)


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


def parse_listing(text: str) -> dict[str, list[str]]:
    """`NAMESPACE NAME` lines from `kubectl get -o custom-columns --no-headers` by namespace."""
    by_namespace: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        namespace, name = parts
        by_namespace.setdefault(namespace, []).append(name)
    return by_namespace


def listing_argv(base: Sequence[str], namespace: str | None = None) -> list[str]:
    """The script's `kubectl get` of the Failed pods: every namespace, or only `namespace`."""
    scope = ["-A"] if namespace is None else ["-n", namespace]
    return [
        *base,
        "get",
        "pods",
        *scope,
        "--field-selector=status.phase==Failed",
        "-o",
        LIST_COLUMNS,
        "--no-headers",
    ]


def _run(
    argv: Sequence[str], *, capture: bool, deadline: float | None = None
) -> tuple[Invocation, str]:
    """Run one kubectl to the end: its output, CPU seconds and peak RSS.

    The peak comes from the process's own `VmHWM`, read while it runs: `ru_maxrss`
    from `wait4` would include the harness's memory that the child inherited before it
    exec'd kubectl.
    """
    started = time.monotonic()
    peak_rss = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out if capture else subprocess.DEVNULL,
            stderr=err,
        )
        while True:
            peak_rss = max(peak_rss, high_water_rss(proc.pid))
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if deadline is not None and time.time() >= deadline and proc.returncode is None:
                # The job's activeDeadlineSeconds: the pod is killed mid-run.
                proc.kill()
                proc.returncode = -9
            time.sleep(0.005)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr_tail = err.read()[-500:].decode(errors="replace")
        out.seek(0)
        text = out.read().decode(errors="replace") if capture else ""
    return (
        Invocation(
            argv_head=" ".join(argv[3:6]),
            seconds=time.monotonic() - started,
            cpu_seconds=rusage.ru_utime + rusage.ru_stime,
            max_rss_bytes=peak_rss,
            returncode=proc.returncode,
            stderr_tail=stderr_tail.strip(),
        ),
        text,
    )


def run_once(
    kubeconfig: Path,
    *,
    kubectl: str = KUBECTL,
    scheduled: float = 0.0,
    deadline_s: float | None = None,
    namespace: str | None = None,
) -> CronRun:
    """One run of the CronJob script, start to end (or to its deadline).

    It lists the Failed pods of every namespace (`-A`), or of `namespace` only.
    """
    run = CronRun(scheduled=scheduled, started=time.time())
    deadline = None if deadline_s is None else run.started + deadline_s
    with tempfile.TemporaryDirectory(prefix="kubectl-cache-") as cache:
        base = [kubectl, f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}"]
        listing, out = _run(listing_argv(base, namespace), capture=True, deadline=deadline)
        run.invocations.append(listing)
        by_namespace = parse_listing(out)
        run.listed = sum(len(names) for names in by_namespace.values())
        for namespace, names in sorted(by_namespace.items()):
            head = [*base, "delete", "--wait=false", "-n", namespace]
            prefix = sum(len(part) + 1 for part in head)
            for batch in batch_names(
                (f"pod/{name}" for name in names), prefix_chars=prefix, max_chars=XARGS_MAX_CHARS
            ):
                if deadline is not None and time.time() >= deadline:
                    run.cut_at = run.cut_at or time.time()
                    continue
                invocation, _ = _run([*head, *batch], capture=False, deadline=deadline)
                run.invocations.append(invocation)
                if invocation.returncode == -9 and deadline is not None:
                    run.cut_at = time.time()
    run.finished = time.time()
    return run


class CronJob:
    """Runs `run_once` at `first + k * period` in a thread until stopped.

    `stop_after`, when given, is asked after each run with the runs so far: True ends
    the schedule there, before a next slot can start another run.
    """

    def __init__(
        self,
        kubeconfig: Path,
        *,
        period: float,
        first: float,
        kubectl: str = KUBECTL,
        deadline_s: float | None = None,
        namespace: str | None = None,
        stop_after: Callable[[Sequence[CronRun]], bool] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.stop_after = stop_after
        self.deadline_s = deadline_s
        self.namespace = namespace
        self.period = period
        self.first = first
        self.kubectl = kubectl
        self.runs: list[CronRun] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="cronjob", daemon=True)

    def __enter__(self) -> CronJob:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def halt(self) -> None:
        """Start no further run, without waiting for one in progress (see `stop`)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop scheduling; a run in progress finishes (kubectl exits on its own)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=600)

    @property
    def running(self) -> bool:
        """Whether the schedule may still start a run (started, not stopped or ended)."""
        return self._thread.is_alive()

    def completed_runs(self) -> list[CronRun]:
        with self._lock:
            return list(self.runs)

    def next_slot(self, now: float) -> float:
        """The first scheduled time at or after `now`."""
        if now <= self.first:
            return self.first
        # The epsilon keeps float error from pushing an exact slot to the next one.
        slots = math.ceil((now - self.first) / self.period - 1e-9)
        return self.first + slots * self.period

    def _loop(self) -> None:
        earliest = self.first
        while not self._stop.is_set():
            slot = self.next_slot(max(time.time(), earliest))
            if self._stop.wait(max(0.0, slot - time.time())):
                return
            try:
                run = run_once(
                    self.kubeconfig,
                    kubectl=self.kubectl,
                    scheduled=slot,
                    deadline_s=self.deadline_s,
                    namespace=self.namespace,
                )
            except OSError as err:
                self.errors.append(str(err))
                return
            with self._lock:
                self.runs.append(run)
            if self.stop_after is not None and self.stop_after(self.completed_runs()):
                return
            earliest = slot + self.period
