"""``zombied scan``: one LIST, the same rules, a report, and optionally one reaping pass.

This module owns the one-shot mode: it lists the terminal pods of every scope with the
daemon's selectors, classifies them with the daemon's rules and prints what is a zombie
now, in kubectl's output habits: a table (``wide`` adds columns, ``--no-headers`` drops
the header, the NAMESPACE column only when more than one namespace can appear), JSON or
YAML records, or ``pod/NAME`` lines. Pods that match a rule but are not yet past its
min age are left out of the listing and never deleted (a later scan or the daemon picks
them up); their count goes to stderr. With ``--delete`` it reaps the listed pods once
through `Reaper.delete`, the daemon's own delete path (rate limit, uid precondition, dry
run, outcome handling), so there is one piece of deleting logic. A LIST that fails
raises `zombied.kube.ApiError` (a refusal names the missing RBAC rule), which the command
line prints as one line with exit code 1. It must never wait for pods to become
due and never retry beyond that single pass.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import msgspec
import yaml

from zombied.events import EventRecorder
from zombied.kube import Kube, open_kube, pool_size
from zombied.pod import PodSnapshot
from zombied.reaper import Outcome, Reaper
from zombied.rules import Decision, judge
from zombied.watch import list_terminal_pods, scopes_for

if TYPE_CHECKING:
    from zombied.config import ScanConfig

__all__ = ["COLUMNS", "WIDE_COLUMNS", "Zombie", "format_age", "render", "render_table", "scan"]

COLUMNS = ("NAMESPACE", "POD", "RULE", "REASON", "NODE", "OWNER", "AGE")
#: ``-o wide`` adds these after COLUMNS.
WIDE_COLUMNS = ("PHASE", "TERMINATED", "MESSAGE")
#: Longest MESSAGE cell of ``-o wide``; the JSON and YAML records carry it whole.
MESSAGE_CHARS = 80

#: Exit status when at least one delete failed.
EXIT_DELETE_FAILED = 1


@dataclass(slots=True)
class Zombie:
    """One due zombie found by the scan, and what deleting it did."""

    pod: PodSnapshot
    rule: str
    since: datetime | None
    outcome: Outcome | None = None

    def age(self, now: datetime) -> float | None:
        """Seconds since the pod became terminal, if known."""
        return (now - self.since).total_seconds() if self.since is not None else None

    def as_json(self, now: datetime) -> dict[str, Any]:
        """The ``--output json`` record."""
        pod = self.pod
        age = self.age(now)
        record: dict[str, Any] = {
            "namespace": pod.namespace,
            "pod": pod.name,
            "uid": pod.uid,
            "rule": self.rule,
            "phase": pod.phase,
            "reason": pod.reason,
            "message": pod.message,
            "node": pod.node,
            "owner": pod.owner,
            "terminated_at": pod.terminated_at.isoformat() if pod.terminated_at else None,
            "age_s": round(age, 3) if age is not None else None,
        }
        if self.outcome is not None:
            record["outcome"] = self.outcome.outcome or "abandoned"
            record["code"] = self.outcome.code
        return record


def format_age(seconds: float | None) -> str:
    """kubectl-style age: 42s, 5m, 3h, 12d; ``<unknown>`` without a termination time."""
    if seconds is None:
        return "<unknown>"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def render_table(
    zombies: Sequence[Zombie],
    now: datetime,
    *,
    wide: bool = False,
    headers: bool = True,
    namespace_column: bool = True,
) -> str:
    """The plain-text table, columns aligned like kubectl's."""
    header = COLUMNS + WIDE_COLUMNS if wide else COLUMNS
    rows: list[tuple[str, ...]] = [header] if headers else []
    for zombie in zombies:
        pod = zombie.pod
        row: tuple[str, ...] = (
            pod.namespace,
            pod.name,
            zombie.rule,
            pod.reason or "<none>",
            pod.node or "<none>",
            pod.owner or "<none>",
            format_age(zombie.age(now)),
        )
        if wide:
            message = " ".join((pod.message or "<none>").split())
            if len(message) > MESSAGE_CHARS:
                message = message[: MESSAGE_CHARS - 1] + "…"
            terminated = (
                pod.terminated_at.strftime("%Y-%m-%dT%H:%M:%SZ")
                if pod.terminated_at
                else "<unknown>"
            )
            row += (pod.phase or "<none>", terminated, message)
        rows.append(row)
    first = 0 if namespace_column else 1
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))] if rows else []
    lines = [
        "   ".join(row[i].ljust(widths[i]) for i in range(first, len(row))).rstrip() for row in rows
    ]
    return "".join(line + "\n" for line in lines)


def render(zombies: Sequence[Zombie], now: datetime, config: ScanConfig) -> str:
    """The report in ``config.output``'s format; empty output is the format's empty form."""
    records = [zombie.as_json(now) for zombie in zombies]
    renderers: dict[str, Callable[[], str]] = {
        "json": lambda: msgspec.json.format(msgspec.json.encode(records)).decode() + "\n",
        "yaml": lambda: yaml.safe_dump(records, sort_keys=False) if records else "[]\n",
        # kubectl's -o name: pod/NAME, without the namespace, so that the lines feed
        # `xargs kubectl delete -n NAMESPACE`.
        "name": lambda: "".join(f"pod/{zombie.pod.name}\n" for zombie in zombies),
    }
    if config.output in renderers:
        return renderers[config.output]()
    if not zombies:
        return "No zombie pods found.\n"
    return render_table(
        zombies,
        now,
        wide=config.output == "wide",
        headers=not config.no_headers,
        # kubectl shows the NAMESPACE column only when more than one can appear.
        namespace_column=len(config.namespaces) != 1,
    )


async def scan(config: ScanConfig, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """List (and with ``--delete`` reap) the due zombies; return the exit status."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    pool = pool_size(watches=0, workers=config.max_in_flight)
    async with open_kube(config.kubeconfig, config.context, pool_size=pool) as kube:
        zombies, not_due = await _find(kube, config)
        if config.delete and zombies:
            await _reap(kube, config, zombies)
    out.write(render(zombies, datetime.now(UTC), config))
    if not_due:
        err.write(
            f"zombied: {not_due} more pod(s) match a rule but are not yet past its min age; "
            "not listed\n"
        )
    failed = 0
    if config.delete and zombies:
        counts = Counter(zombie.outcome.outcome if zombie.outcome else "" for zombie in zombies)
        failed = sum(1 for zombie in zombies if zombie.outcome is None or zombie.outcome.failed)
        summary = (
            f"deleted {counts['deleted']}, gone {counts['gone']}, conflict {counts['conflict']}, "
            f"dry run {counts['dry_run']}, failed {failed}\n"
        )
        (out if config.output in ("table", "wide") else err).write(summary)
    out.flush()
    return EXIT_DELETE_FAILED if failed else 0


async def _find(kube: Kube, config: ScanConfig) -> tuple[list[Zombie], int]:
    now = datetime.now(UTC)
    zombies: list[Zombie] = []
    not_due = 0
    seen: set[str] = set()
    for scope in scopes_for(config.rules.scope):
        snapshots, _ = await list_terminal_pods(kube, scope)
        for pod in snapshots:
            if pod.key in seen:
                continue
            seen.add(pod.key)
            judgement = judge(pod, config.rules, first_seen=now)
            decision = judgement.decision(now)
            if decision is Decision.WAIT:
                not_due += 1
            elif decision is Decision.DELETE and judgement.rule is not None:
                zombies.append(Zombie(pod, judgement.rule, pod.terminated_at))
    zombies.sort(key=lambda zombie: (zombie.pod.namespace, zombie.pod.name))
    return zombies, not_due


async def _reap(kube: Kube, config: ScanConfig, zombies: list[Zombie]) -> None:
    async with EventRecorder(kube, identity="zombied-scan") as events:
        reaper = Reaper(
            kube, qps=config.qps, burst=config.burst, dry_run=config.dry_run, events=events
        )
        pending = iter(zombies)

        async def worker() -> None:
            for zombie in pending:
                zombie.outcome = await reaper.delete(zombie.pod, zombie.rule, since=zombie.since)

        async with anyio.create_task_group() as tg:
            for _ in range(max(1, config.max_in_flight)):
                tg.start_soon(worker)
