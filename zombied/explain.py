"""``zombied explain NAMESPACE/POD``: why zombied would, or would not, delete one pod.

`explain` is a pure function from the pod as the API serves it, the configuration
and the current time to an `Explanation`: every safety veto and whether it applies,
every enabled rule and why it does not match, when the pod becomes due and what
zombied would do now. It decides nothing of its own: it prints `rules.judge` with the
configured rules, the same judgement the daemon queues by and ``scan`` lists by, so the
explanation cannot disagree with the controller. Renderers (`RENDERERS`, keyed by ``--output``) only
format an `Explanation`; a new output format is a new function there. `run_explain`
is the thin I/O shell: one GET, never a write. It must never delete or patch anything.

Exit codes: 0 the pod was read and explained (whatever the verdict), 1 the pod could
not be read: not found (it may have been deleted already, by zombied or anyone), no
permission, or the API unreachable, 2 invalid configuration or usage.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TextIO

import msgspec
import yaml

from zombied.config import DryRun, format_duration
from zombied.errors import ZombiedError
from zombied.kube import ApiError, Kind, Kube, Request, open_kube
from zombied.pod import PodParseError, PodSnapshot, parse_pod
from zombied.rules import SKIP_OUT_OF_SCOPE, Decision, Judgement, judge

if TYPE_CHECKING:
    from zombied.config import ExplainConfig

__all__ = [
    "RENDERERS",
    "Explanation",
    "as_json",
    "explain",
    "render_table",
    "run_explain",
]

_GET_TIMEOUT: Final = 30.0


@dataclass(frozen=True)
class Explanation:
    """The judgement on one pod at ``now``, and what zombied would do, in one sentence."""

    judgement: Judgement
    now: datetime
    action: Decision
    summary: str

    @property
    def pod(self) -> PodSnapshot:
        """The pod explained."""
        return self.judgement.pod


def explain(obj: Mapping[str, Any], config: ExplainConfig, now: datetime) -> Explanation:
    """Explain what zombied, configured by ``config``, does with pod ``obj`` at ``now``.

    Raises `zombied.pod.PodParseError` when the object lacks namespace, name or uid.
    """
    rules = config.rules
    pod = parse_pod(obj, label_keys=rules.scope.label_keys)
    # A pod without a termination time is timed from when zombied first sees it:
    # for a process asked now, that is now.
    judgement = judge(pod, rules, first_seen=now)
    action = judgement.decision(now)
    return Explanation(judgement, now, action, _summary(judgement, action, config.dry_run, now))


def _summary(judgement: Judgement, action: Decision, dry_run: DryRun, now: datetime) -> str:
    veto = judgement.veto
    if veto is not None and veto.name == SKIP_OUT_OF_SCOPE:
        return f"keep: zombied never sees this pod ({veto.evidence})"
    if veto is not None:
        return f"keep: vetoed by {veto.name} ({veto.evidence})"
    if judgement.due is None:
        return "keep: no enabled rule matches"
    how = {
        DryRun.OFF: "delete it",
        DryRun.CLIENT: "log that it would delete it (--dry-run=client)",
        DryRun.SERVER: "send a dry-run DELETE (--dry-run=server)",
    }[dry_run]
    if action is Decision.DELETE:
        return f"{how} now: rule {judgement.rule} matches and its min age has passed"
    wait = format_duration(round((judgement.due - now).total_seconds()))
    return (
        f"{how} at {_stamp(judgement.due)} (in {wait}): rule {judgement.rule} matches, "
        "min age not yet reached"
    )


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _ago(moment: datetime, now: datetime) -> str:
    seconds = round((now - moment).total_seconds())
    return (
        f"{format_duration(abs(seconds))} ago"
        if seconds >= 0
        else f"in {format_duration(-seconds)}"
    )


# -- rendering ---------------------------------------------------------------------------


def as_json(explanation: Explanation) -> dict[str, Any]:
    """The ``--output json`` document; stable keys, timestamps in RFC 3339."""
    judgement = explanation.judgement
    pod = judgement.pod
    return {
        "pod": {
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
            "phase": pod.phase,
            "reason": pod.reason,
            "message": pod.message,
            "node": pod.node,
            "owner": pod.owner,
        },
        "now": _stamp(explanation.now),
        "terminalSince": _stamp(judgement.since) if judgement.since_known else None,
        "vetoes": [
            {"name": veto.name, "applies": veto.applies, "detail": veto.evidence}
            for veto in judgement.vetoes
        ],
        "rules": [
            {
                "name": check.rule.name,
                "builtin": check.rule.builtin,
                "matches": check.matches,
                "whyNot": check.mismatch,
                "minAge": format_duration(check.rule.min_age),
                "due": _stamp(check.due),
            }
            for check in judgement.rules
        ],
        "verdict": {
            "zombie": judgement.zombie,
            "rule": judgement.rule,
            "due": _stamp(judgement.due) if judgement.due is not None else None,
            "skip": judgement.skip,
        },
        "action": str(explanation.action),
        "summary": explanation.summary,
    }


def render_json(explanation: Explanation) -> str:
    return msgspec.json.format(msgspec.json.encode(as_json(explanation))).decode() + "\n"


def render_yaml(explanation: Explanation) -> str:
    """The ``--output json`` document as YAML, as kubectl's ``-o yaml`` mirrors ``-o json``."""
    return yaml.safe_dump(as_json(explanation), sort_keys=False)


def render_name(explanation: Explanation) -> str:
    """kubectl's ``-o name``: ``pod/NAME``."""
    return f"pod/{explanation.pod.name}\n"


def render_table(explanation: Explanation) -> str:
    """The human report: the pod, the vetoes, rule by rule, then the decision."""
    judgement = explanation.judgement
    pod = judgement.pod
    now = explanation.now
    if judgement.since_known:
        since = f"{_stamp(judgement.since)} ({_ago(judgement.since, now)})"
    else:
        since = "unknown: timed from when zombied first sees the pod terminal"
    lines = [
        f"Pod:        {pod.namespace}/{pod.name} (uid {pod.uid})",
        f"Phase:      {pod.phase or '<none>'}",
        f"Reason:     {pod.reason or '<none>'}",
        f"Message:    {pod.message or '<none>'}",
        f"Node:       {pod.node or '<none>'}",
        f"Owner:      {pod.owner or '<none>'}",
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
        age = f"min age {format_duration(check.rule.min_age)}"
        if check.matches:
            text = f"MATCH     {age}, due {_stamp(check.due)} ({_ago(check.due, now)})"
        else:
            text = f"no match  {check.mismatch}"
        lines.append(f"  {check.rule.name:<{width}}  {text}")
    if not judgement.rules:
        lines.append("  (no rule enabled)")
    lines += ["", f"Decision:   {explanation.action}", f"Would:      {explanation.summary}"]
    return "\n".join(lines) + "\n"


#: ``--output`` value -> renderer. Add a format by adding a function here.
RENDERERS: Final[dict[str, Callable[[Explanation], str]]] = {
    "table": render_table,
    "wide": render_table,  # the report already shows everything
    "json": render_json,
    "yaml": render_yaml,
    "name": render_name,
}


# -- I/O -------------------------------------------------------------------------------


async def read_pod(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """GET one pod as the raw JSON object; a missing pod is a one-line error."""
    try:
        obj = await kube.request(Request("get", "pods", namespace, name), timeout=_GET_TIMEOUT)
    except ApiError as exc:
        if exc.kind is Kind.NOT_FOUND:
            raise ZombiedError(
                f"pod {namespace}/{name} not found (deleted already, or never existed)"
            ) from exc
        raise
    if not isinstance(obj, dict):
        raise ZombiedError(f"cannot read pod {namespace}/{name}: malformed answer")
    return obj


async def run_explain(config: ExplainConfig, out: TextIO | None = None) -> int:
    """Read the configured pod, print its explanation; return the exit status."""
    out = out if out is not None else sys.stdout
    if config.target is None:
        raise ZombiedError("zombied explain needs NAMESPACE/POD")
    namespace, name = config.target
    async with open_kube(config.kubeconfig, config.context, pool_size=2) as kube:
        obj = await read_pod(kube, namespace, name)
    try:
        explanation = explain(obj, config, datetime.now(UTC))
    except PodParseError as exc:
        raise ZombiedError(f"pod {namespace}/{name} cannot be read: {exc.reason}") from exc
    out.write(RENDERERS[config.output](explanation))
    out.flush()
    return 0
