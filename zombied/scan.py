"""``zombied scan``: one LIST, the daemon's judgement, a report, one reaping pass.

It lists the terminal pods of every watched namespace (or of ``-n``), judges them with
`zombied.rules.judge` and prints those due now in kubectl's output habits (``--waiting``
adds those not yet due); stdout carries the report only, notes go to stderr. With
``--delete`` it reaps the due ones once through `Reaper.delete`, the daemon's own
delete path. It never waits for pods to become due and never retries.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from zombied import report
from zombied.config import format_duration
from zombied.events import EventRecorder
from zombied.kube import Kube, open_kube, pool_size
from zombied.reaper import Outcome, Reaper
from zombied.rules import SKIP_OUT_OF_SCOPE, Decision, Judgement, judge
from zombied.watch import Scope, list_terminal_pods, scopes_for

if TYPE_CHECKING:
    from zombied.config import ScanConfig

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
            # Without a termination time there is no due time a one-off scan can give.
            "due": report.stamp(judgement.due)
            if judgement.due is not None and judgement.since_known
            else None,
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
    if match is None or judgement.due is None:
        return report.NONE
    if not judgement.since_known:
        return f"{format_duration(match.rule.min_age)} after seen"
    return report.until(judgement.due, now)


def render(listed: Sequence[Listed], now: datetime, config: ScanConfig) -> str:
    """The report in ``config.output``'s format (``[]``, or nothing, when empty)."""
    if config.output in ("json", "yaml"):
        return report.dump([item.record() for item in listed], config.output)
    if config.output == "name":
        # kubectl's -o name, without the namespace; only what zombied would delete now.
        return "".join(
            f"pod/{item.judgement.pod.name}\n"
            for item in listed
            if item.decision is Decision.DELETE
        )
    if not listed:
        return ""
    wide = config.output == "wide"
    header = COLUMNS + (("DUE",) if config.waiting else ()) + (WIDE_COLUMNS if wide else ())
    rows = [item.row(now, waiting=config.waiting, wide=wide) for item in listed]
    # kubectl shows the NAMESPACE column only when more than one namespace can appear.
    one_namespace = config.namespace is not None or len(config.rules.scope.namespaces) == 1
    return report.table(rows if config.no_headers else [header, *rows], skip_first=one_namespace)


async def scan(config: ScanConfig, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """List (and with ``--delete`` reap) the due zombies; return the exit status."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    pool = pool_size(watches=0, workers=config.max_in_flight)
    async with open_kube(
        config.kubeconfig, config.context, pool_size=pool, report_access=False
    ) as kube:
        found = await _find(kube, config)
        due = [item for item in found.listed if item.decision is Decision.DELETE]
        if config.delete and due:
            await _reap(kube, config, due)
    out.write(render(found.listed, datetime.now(UTC), config))
    for note in found.notes(config):
        err.write(f"{note}\n")
    failed = 0
    if config.delete and due:
        counts = Counter(item.outcome.outcome if item.outcome else "" for item in due)
        failed = sum(1 for item in due if item.outcome is None or item.outcome.failed)
        summary = (
            f"deleted {counts['deleted']}, gone {counts['gone']}, conflict {counts['conflict']}, "
            f"dry run {counts['dry_run']}, failed {failed}\n"
        )
        (out if config.output in ("table", "wide") else err).write(summary)
    out.flush()
    return 1 if failed else 0


@dataclass
class _Found:
    """The pods one scan lists, and counts of those it leaves out."""

    listed: list[Listed]
    waiting: int  # decision wait, not listed
    out_of_scope: int
    scope_evidence: str

    def notes(self, config: ScanConfig) -> list[str]:
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
        if self.out_of_scope:
            notes.append(
                f"zombied: {self.out_of_scope} pod(s) are outside the scope zombied works in "
                f"({self.scope_evidence}); not listed"
            )
        return notes


def _scopes(config: ScanConfig) -> tuple[Scope, ...]:
    if config.namespace is None:
        return scopes_for(config.rules.scope)
    # -n lists one namespace whatever the scope; the judgement vetoes what is outside.
    anywhere = dataclasses.replace(config.rules.scope, namespaces=(), exclude_namespaces=())
    return (Scope(config.namespace, anywhere),)


async def _find(kube: Kube, config: ScanConfig) -> _Found:
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


async def _reap(kube: Kube, config: ScanConfig, due: list[Listed]) -> None:
    async with EventRecorder(kube, identity="zombied-scan") as events:
        reaper = Reaper(
            kube, qps=config.qps, burst=config.burst, dry_run=config.dry_run, events=events
        )
        pending = iter(due)

        async def worker() -> None:
            for item in pending:
                judgement = item.judgement
                item.outcome = await reaper.delete(judgement.pod, judgement.rule or "")

        async with anyio.create_task_group() as tg:
            for _ in range(max(1, config.max_in_flight)):
                tg.start_soon(worker)
