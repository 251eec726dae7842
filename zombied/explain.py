"""``zombied explain [NS/]POD``: why zombied would, or would not, delete one pod.

`explain` is pure: it prints `rules.judge` on the pod with the configured rules, the
judgement the daemon and ``scan`` act on, plus what zombied would do now. Renderers
(`RENDERERS`, by ``--output``) only format it; `run_explain` does one GET, never a
write. Exit codes: 0 explained, 1 the pod could not be read, 2 invalid usage.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TextIO

from zombied import report
from zombied.config import DryRun
from zombied.duration import format_duration
from zombied.errors import ZombiedError
from zombied.kube import ApiError, Kind, Request, open_kube
from zombied.pod import PodParseError, parse_pod
from zombied.rules import SKIP_OUT_OF_SCOPE, Decision, Judgement, RuleMatch, judge

if TYPE_CHECKING:
    from zombied.config import Config


@dataclass(frozen=True)
class Explanation:
    """The judgement on one pod at ``now``, and what zombied would do, in one sentence."""

    judgement: Judgement
    now: datetime
    decision: Decision
    summary: str


def explain(obj: Mapping[str, Any], config: Config, now: datetime) -> Explanation:
    """Explain what zombied, configured by ``config``, does with pod ``obj`` at ``now``;
    `zombied.pod.PodParseError` when the object lacks namespace, name or uid."""
    rules = config.rules
    pod = parse_pod(obj, label_keys=rules.scope.label_keys)
    # A pod without a termination time is timed from now: zombied first sees it now.
    judgement = judge(pod, rules, first_seen=now)
    decision = judgement.decision(now)
    return Explanation(judgement, now, decision, _summary(judgement, decision, config.dry_run, now))


def _summary(judgement: Judgement, decision: Decision, dry_run: DryRun, now: datetime) -> str:
    veto = judgement.veto
    if veto is not None and veto.name == SKIP_OUT_OF_SCOPE:
        return f"keep: zombied never sees this pod ({veto.evidence})"
    if veto is not None:
        return f"keep: vetoed by {veto.name} ({veto.evidence})"
    match = judgement.match
    if match is None:
        return "keep: no enabled rule matches"
    how = {
        DryRun.OFF: "delete it",
        DryRun.CLIENT: "log that it would delete it (--dry-run=client)",
        DryRun.SERVER: "send a dry-run DELETE (--dry-run=server)",
    }[dry_run]
    rule = match.rule.name
    if decision is Decision.DELETE:
        return f"{how} now: rule {rule} matches and its min age has passed"
    when = _due(judgement, match, now)
    if not judgement.since_known:
        return (
            f"{how} {when}: rule {rule} matches, and the pod carries no termination time "
            "(no container finishedAt, no DisruptionTarget or Ready condition) to count its "
            "min age from"
        )
    return f"{how} at {when}: rule {rule} matches, min age not yet reached"


def _due(judgement: Judgement, check: RuleMatch, now: datetime) -> str:
    """``2026-03-01T12:00:03Z (in 4m30s)``, or ``30s after first seen``."""
    stamp = report.due_stamp(judgement, check)
    relative = report.due(judgement, check, now)
    return f"{stamp} ({relative})" if stamp is not None else relative


def as_json(explanation: Explanation) -> dict[str, Any]:
    """The ``-o json`` and ``-o yaml`` document."""
    judgement = explanation.judgement
    match = judgement.match
    return {
        "pod": report.pod_json(judgement.pod),
        "now": report.stamp(explanation.now),
        "vetoes": [
            {"name": veto.name, "applies": veto.applies, "evidence": veto.evidence}
            for veto in judgement.vetoes
        ],
        "rules": [
            {
                "name": check.rule.name,
                "builtin": check.rule.builtin,
                "matches": check.matches,
                "mismatch": check.mismatch,
                "minAge": format_duration(check.rule.min_age),
                "due": report.due_stamp(judgement, check),
            }
            for check in judgement.rules
        ],
        "zombie": judgement.zombie,
        "rule": judgement.rule,
        "due": report.due_stamp(judgement, match),
        "skip": judgement.skip,
        "decision": str(explanation.decision),
        "summary": explanation.summary,
    }


def render_name(explanation: Explanation) -> str:
    """kubectl's ``-o name``, as a filter: ``pod/NAME`` when zombied would delete it now."""
    if explanation.decision is not Decision.DELETE:
        return ""
    return f"pod/{explanation.judgement.pod.name}\n"


def _disruption(reason: str) -> str:
    if not reason:
        return f"{report.NONE} (no DisruptionTarget condition: written since 1.26, GA in 1.31)"
    if reason == "TerminationByKubelet":
        return "TerminationByKubelet (the kubelet ended the pod: a shutdown or an eviction)"
    return reason


def render_table(explanation: Explanation) -> str:
    """The human report: the pod, the vetoes, rule by rule, then the decision."""
    judgement = explanation.judgement
    pod = judgement.pod
    now = explanation.now
    if judgement.since_known:
        since = f"{report.stamp(judgement.since)} ({report.until(judgement.since, now)})"
    else:
        since = "unknown: no container finishedAt, no DisruptionTarget or Ready condition"
    lines = [
        f"Pod:        {pod.namespace}/{pod.name} (uid {pod.uid})",
        f"Phase:      {pod.phase or report.NONE}",
        f"Reason:     {pod.reason or report.NONE}",
        f"Message:    {pod.message or report.NONE}",
        f"Node:       {pod.node or report.NONE}",
        f"Owner:      {pod.owner or report.NONE}",
        f"Disruption: {_disruption(pod.disruption)}",
        f"Terminal:   {since}",
        "",
        "Vetoes:",
    ]
    width = max(len(veto.name) for veto in judgement.vetoes)
    for veto in judgement.vetoes:
        mark = "VETO" if veto.applies else "no  "
        lines.append(f"  {veto.name:<{width}}  {mark}  {veto.evidence}")
    lines += ["", "Rules:"]
    width = max((len(check.rule.name) for check in judgement.rules), default=0)
    for check in judgement.rules:
        age = format_duration(check.rule.min_age)
        if check.matches:
            text = f"MATCH     min age {age}, due {_due(judgement, check, now)}"
        else:
            text = f"no match  {check.mismatch}"
        lines.append(f"  {check.rule.name:<{width}}  {text}")
    if not judgement.rules:
        lines.append("  (no rule enabled)")
    lines += ["", f"Decision:   {explanation.decision}", f"Would:      {explanation.summary}"]
    return "\n".join(lines) + "\n"


#: ``--output`` value -> renderer (``wide`` is refused: the table shows everything).
RENDERERS: Final[dict[str, Callable[[Explanation], str]]] = {
    "table": render_table,
    "json": lambda explanation: report.dump(as_json(explanation), "json"),
    "yaml": lambda explanation: report.dump(as_json(explanation), "yaml"),
    "name": render_name,
}


async def run_explain(config: Config, out: TextIO | None = None) -> int:
    """Read the configured pod, print its explanation; return the exit status."""
    out = out if out is not None else sys.stdout
    namespace, name = config.target
    async with open_kube(
        config.kubeconfig, config.context, pool_size=2, report_access=False
    ) as kube:
        try:
            obj = await kube.request(Request("get", "pods", namespace, name), timeout=30.0)
        except ApiError as exc:
            if exc.kind is Kind.NOT_FOUND:
                raise ZombiedError(
                    f"pod {namespace}/{name} not found (deleted already, or never existed)"
                ) from exc
            raise
    if not isinstance(obj, dict):
        raise ZombiedError(f"cannot read pod {namespace}/{name}: malformed answer")
    try:
        explanation = explain(obj, config, datetime.now(UTC))
    except PodParseError as exc:
        raise ZombiedError(f"pod {namespace}/{name} cannot be read: {exc.reason}") from exc
    out.write(RENDERERS[config.output](explanation))
    out.flush()
    return 0
