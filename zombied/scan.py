"""``zombied scan``: one LIST, the daemon's judgement, a report, one reaping pass.

It lists the terminal pods of every watched namespace (or of ``-n``), judges them with
`zombied.rules.judge` and prints those due now in kubectl's output habits (``--waiting``
adds those not yet due); stdout carries the report only, notes go to stderr. With
``--delete`` it reaps the due ones once through `Reaper.delete`, the daemon's own
delete path. It never waits for pods to become due and never retries.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from zombied import report
from zombied.duration import format_duration
from zombied.events import EventRecorder
from zombied.kube import Kube, open_kube, pool_size
from zombied.reaper import Outcome, Reaper
from zombied.rules import SKIP_OUT_OF_SCOPE, Decision, Judgement, Selection, judge
from zombied.watch import Scope, list_terminal_pods, scopes_for

if TYPE_CHECKING:
    from zombied.config import Config

#: The table's columns; ``--waiting`` adds DUE, ``-o wide`` adds WIDE_COLUMNS.
COLUMNS = ("NAMESPACE", "POD", "RULE", "REASON", "NODE", "OWNER", "AGE")
WIDE_COLUMNS = ("PHASE", "TERMINATED", "MESSAGE")
#: Longest MESSAGE cell of ``-o wide``; the JSON and YAML records carry it whole.
MESSAGE_CHARS = 80


@dataclass(slots=True)
class Listed:
    """One pod the scan lists: its judgement, the decision now, what deleting it did."""

    judgement: Judgement
    decision: Decision  # delete, or wait (listed with --waiting only)
    outcome: Outcome | None = None

    def record(self) -> dict[str, Any]:
        """The ``-o json`` and ``-o yaml`` record."""
        judgement = self.judgement
        match = judgement.match
        record: dict[str, Any] = {
            "pod": report.pod_json(judgement.pod),
            "rule": judgement.rule,
            "minAge": format_duration(match.rule.min_age) if match is not None else None,
            "due": report.due_stamp(judgement, match),
            "decision": str(self.decision),
        }
        if self.outcome is not None:
            record["outcome"] = self.outcome.outcome or "abandoned"
            record["code"] = self.outcome.code
        return record

    def row(self, now: datetime, *, waiting: bool, wide: bool) -> tuple[str, ...]:
        """The table row: COLUMNS, then DUE with ``waiting``, then WIDE_COLUMNS."""
        judgement = self.judgement
        pod = judgement.pod
        since = pod.terminated_at
        cells = [
            pod.namespace,
            pod.name,
            judgement.rule or report.NONE,
            pod.reason or report.NONE,
            pod.node or report.NONE,
            pod.owner or report.NONE,
            report.age((now - since).total_seconds() if since is not None else None),
        ]
        if waiting:
            cells.append(_due(judgement, self.decision, now))
        if wide:
            message = " ".join((pod.message or report.NONE).split())
            if len(message) > MESSAGE_CHARS:
                message = message[: MESSAGE_CHARS - 1] + "…"
            terminated = report.stamp(since) if since is not None else "<unknown>"
            cells += [pod.phase or report.NONE, terminated, message]
        return tuple(cells)


def _due(judgement: Judgement, decision: Decision, now: datetime) -> str:
    if decision is Decision.DELETE:
        return "now"
    match = judgement.match
    return report.due(judgement, match, now) if match is not None else report.NONE


def render(listed: Sequence[Listed], now: datetime, config: Config) -> str:
    """The report in ``config.output``'s format (``[]``, or nothing, when empty)."""
    if config.output in ("json", "yaml"):
        return report.dump([item.record() for item in listed], config.output)
    if config.output == "name":
        # kubectl's -o name, without the namespace; only what zombied would delete now.
        return "".join(f"pod/{item.judgement.pod.name}\n" for item in _deleting(listed))
    if not listed:
        return ""
    wide = config.output == "wide"
    header = COLUMNS + (("DUE",) if config.waiting else ()) + (WIDE_COLUMNS if wide else ())
    rows = [item.row(now, waiting=config.waiting, wide=wide) for item in listed]
    # kubectl shows the NAMESPACE column only when more than one namespace can appear.
    one_namespace = config.namespace is not None or len(config.rules.scope.namespaces) == 1
    return report.table(rows if config.no_headers else [header, *rows], skip_first=one_namespace)


def _deleting(listed: Sequence[Listed]) -> list[Listed]:
    return [item for item in listed if item.decision is Decision.DELETE]


async def scan(config: Config, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """List (and with ``--delete`` reap) the due zombies; return the exit status."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    pool = pool_size(watches=0, workers=config.max_in_flight)
    interrupted: int | None = None
    async with open_kube(
        config.kubeconfig, config.context, pool_size=pool, report_access=False
    ) as kube:
        found = await _find(kube, config)
        due = _deleting(found.listed)
        if config.delete and due:
            interrupted = await _reap(kube, config, due)
        refused = kube.permissions.problems()
    out.write(render(found.listed, datetime.now(UTC), config))
    for note in found.notes(config):
        err.write(f"{note}\n")
    if not (config.delete and due):
        out.flush()
        return 0
    counts = Counter(item.outcome.outcome if item.outcome else "" for item in due)
    failed = sum(1 for item in due if item.outcome is not None and item.outcome.failed)
    unanswered = sum(1 for item in due if item.outcome is None)
    summary = (
        f"deleted {counts['deleted']}, gone {counts['gone']}, conflict {counts['conflict']}, "
        f"dry run {counts['dry_run']}, failed {failed}"
    )
    if interrupted is not None:
        summary += f", not done {unanswered}"
    (out if config.output in ("table", "wide") else err).write(summary + "\n")
    for problem in refused:  # a one-off pass does not retry: say what to grant
        err.write(f"zombied: error: {problem}: grant it to the account zombied runs as\n")
    if interrupted is not None:
        name = signal.Signals(interrupted).name
        err.write(
            f"zombied: interrupted by {name}: {unanswered} pod(s) not done (their DELETE was "
            "not sent, or not answered); run the scan again to see what is left\n"
        )
    out.flush()
    return 128 + interrupted if interrupted is not None else 1 if failed else 0


@dataclass
class _Found:
    """The pods one scan lists, and counts of those it leaves out."""

    listed: list[Listed]
    waiting: int  # decision wait, not listed
    out_of_scope: int
    scope_evidence: str

    def notes(self, config: Config) -> list[str]:
        """What stderr says besides errors."""
        notes = []
        if not self.listed and config.output not in ("json", "yaml"):
            where = f" in namespace {config.namespace}" if config.namespace else ""
            notes.append(f"No zombie pods found{where}.")
        if self.waiting:
            notes.append(
                f"zombied: {self.waiting} more pod(s) match a rule but are not yet past its "
                "min age; not listed (--waiting lists them)"
            )
        spread = sorted({item.judgement.pod.namespace for item in _deleting(self.listed)})
        if config.output == "name" and config.namespace is None and spread:
            # kubectl's names carry no namespace: `| xargs kubectl delete` would act on the
            # context's namespace, maybe on another pod of the same name.
            notes.append(
                f"zombied: -o name prints no namespace, and these pods are in namespace(s) "
                f"{', '.join(spread)}: use the names with -n NS, one namespace at a time"
            )
        if self.out_of_scope:
            notes.append(
                f"zombied: {self.out_of_scope} pod(s) are outside the scope zombied works in "
                f"({self.scope_evidence}); not listed"
            )
        return notes


def _scopes(config: Config) -> tuple[Scope, ...]:
    if config.namespace is None:
        return scopes_for(config.rules.scope)
    # One namespace is listed whatever the scope: the judgement says what is outside it.
    return (Scope(config.namespace, Selection(label_selector=config.label_selector)),)


async def _find(kube: Kube, config: Config) -> _Found:
    now = datetime.now(UTC)
    found = _Found([], 0, 0, "")
    seen: set[str] = set()
    for scope in _scopes(config):
        snapshots, _ = await list_terminal_pods(kube, scope)
        for pod in snapshots:
            if pod.key in seen:
                continue
            seen.add(pod.key)
            judgement = judge(pod, config.rules, first_seen=now)
            decision = judgement.decision(now)
            veto = judgement.veto
            if decision is Decision.DELETE or (decision is Decision.WAIT and config.waiting):
                found.listed.append(Listed(judgement, decision))
            elif decision is Decision.WAIT:
                found.waiting += 1
            elif veto is not None and veto.name == SKIP_OUT_OF_SCOPE:
                found.out_of_scope += 1
                found.scope_evidence = veto.evidence
    found.listed.sort(key=lambda item: (item.judgement.pod.namespace, item.judgement.pod.name))
    return found


async def _reap(kube: Kube, config: Config, due: list[Listed]) -> int | None:
    """Delete ``due`` once, each item noting its outcome; the signal number when SIGINT or
    SIGTERM stopped it first (what was answered by then is noted all the same)."""
    stopped_by: list[int] = []
    async with EventRecorder(kube, identity="zombied-scan") as events:
        reaper = Reaper(
            kube, qps=config.qps, burst=config.burst, dry_run=config.dry_run, events=events
        )
        pending = iter(due)

        async def worker() -> None:
            for item in pending:
                judgement = item.judgement
                item.outcome = await reaper.delete(judgement.pod, judgement.rule or "")

        async def stop_on_signal(scope: anyio.CancelScope) -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    stopped_by.append(signum)
                    scope.cancel()

        async with anyio.create_task_group() as outer:
            if threading.current_thread() is threading.main_thread():  # where signals arrive
                outer.start_soon(stop_on_signal, outer.cancel_scope)
            async with anyio.create_task_group() as tg:
                for _ in range(max(1, config.max_in_flight)):
                    tg.start_soon(worker)
            outer.cancel_scope.cancel()
    return stopped_by[0] if stopped_by else None
