"""``zombied explain NAMESPACE/POD``: why zombied would, or would not, delete one pod.

`explain` is a pure function from the pod as the API serves it, the configuration
and the current time to an `Explanation`: every safety veto and whether it applies,
every enabled rule and why it does not match, when the pod becomes due and what
zombied would do now. It decides nothing of its own: the verdict is `rules.classify`
with the configured rules, the same call the daemon makes, so the explanation cannot
disagree with the controller. Renderers (`RENDERERS`, keyed by ``--output``) only
format an `Explanation`; a new output format is a new function there. `run_explain`
is the thin I/O shell: one GET, never a write. It must never delete or patch anything.

Exit codes: 0 the pod was read and explained (whatever the verdict), 1 the pod could
not be read: not found (it may have been deleted already, by zombied or anyone), no
permission, or the API unreachable, 2 invalid configuration or usage.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TextIO

import aiohttp
import yaml
from kubernetes_asyncio import client

from zombied.config import DryRun, format_duration
from zombied.errors import ZombiedError
from zombied.kube import API_FAILURES, open_api_client, read_body, request_error, status_of
from zombied.pod import KEEP_ANNOTATION, PodParseError, PodSnapshot, parse_pod
from zombied.rules import Verdict, classify, mismatch
from zombied.selector import LabelSelector

if TYPE_CHECKING:
    from zombied.config import Config

__all__ = [
    "ACTION_DELETE",
    "ACTION_KEEP",
    "ACTION_WAIT",
    "RENDERERS",
    "Explanation",
    "RuleCheck",
    "VetoCheck",
    "as_json",
    "explain",
    "render_table",
    "run_explain",
]

ACTION_DELETE: Final = "delete"
ACTION_WAIT: Final = "wait"
ACTION_KEEP: Final = "keep"

_GET_TIMEOUT: Final = 30.0


@dataclass(frozen=True)
class VetoCheck:
    """One safety veto: its stable name, whether it applies, and the evidence."""

    name: str
    applies: bool
    detail: str


@dataclass(frozen=True)
class RuleCheck:
    """One enabled rule against the pod; ``why_not`` is None when its pattern matches."""

    rule: str
    builtin: bool
    min_age: float
    why_not: str | None
    due: datetime | None

    @property
    def matches(self) -> bool:
        return self.why_not is None


@dataclass(frozen=True)
class Explanation:
    """Everything `explain` found out about one pod, in the order an operator asks."""

    pod: PodSnapshot
    now: datetime
    since: datetime  # when the pod counts as terminal from (first_seen if unknown)
    since_known: bool  # False: the pod carries no termination time
    vetoes: tuple[VetoCheck, ...]
    rules: tuple[RuleCheck, ...]
    verdict: Verdict
    action: str  # ACTION_DELETE, ACTION_WAIT or ACTION_KEEP
    summary: str  # what zombied would do now, in one sentence


def explain(obj: Mapping[str, Any], config: Config, now: datetime) -> Explanation:
    """Explain what zombied, configured by ``config``, does with pod ``obj`` at ``now``.

    Raises `zombied.pod.PodParseError` when the object lacks namespace, name or uid.
    """
    pod = parse_pod(obj)
    # A pod without a termination time is timed from when zombied first sees it:
    # for a process asked now, that is now.
    since = pod.terminated_at if pod.terminated_at is not None else now
    verdict = classify(pod, config.rules, first_seen=now)
    scope = _out_of_scope(config, pod.namespace, _labels(obj))
    vetoes = _vetoes(pod, config, scope)
    checks = tuple(
        RuleCheck(
            rule=rule.name,
            builtin=rule.builtin,
            min_age=rule.min_age,
            why_not=mismatch(rule, pod),
            due=since + timedelta(seconds=rule.min_age),
        )
        for rule in config.rules.ordered()
    )
    action, summary = _decide(verdict, scope, vetoes, config.dry_run, now)
    return Explanation(
        pod=pod,
        now=now,
        since=since,
        since_known=pod.terminated_at is not None,
        vetoes=vetoes,
        rules=checks,
        verdict=verdict,
        action=action,
        summary=summary,
    )


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def _out_of_scope(config: Config, namespace: str, labels: Mapping[str, str]) -> str | None:
    """Why the watches never see this pod; None when it is in scope."""
    if config.namespaces and namespace not in config.namespaces:
        return f"namespace {namespace} is not in --namespaces ({', '.join(config.namespaces)})"
    if namespace in config.exclude_namespaces:
        return f"namespace {namespace} is in --exclude-namespaces"
    if not LabelSelector.parse(config.label_selector).matches(labels):
        return f"its labels do not match --label-selector {config.label_selector!r}"
    return None


def _vetoes(pod: PodSnapshot, config: Config, scope: str | None) -> tuple[VetoCheck, ...]:
    excluded = sorted(config.rules.exclude_owner_kinds)
    return (
        VetoCheck(
            "not-terminal",
            not pod.terminal,
            f"phase is {pod.phase or '<none>'}"
            + ("" if pod.terminal else "; only Failed and Succeeded pods can be zombies"),
        ),
        VetoCheck(
            "deleting",
            pod.deleting,
            "deletionTimestamp is set: the pod is already being deleted"
            if pod.deleting
            else "no deletionTimestamp",
        ),
        VetoCheck(
            "keep-annotation",
            pod.keep,
            f'annotation {KEEP_ANNOTATION}: "true"'
            if pod.keep
            else f'no {KEEP_ANNOTATION}: "true" annotation',
        ),
        VetoCheck(
            "owner-excluded",
            config.rules.excludes(pod.owner_kind),
            f"owner {pod.owner or '<none>'}; --exclude-owner-kinds: "
            f"{', '.join(excluded) or '<none>'}",
        ),
        VetoCheck(
            "out-of-scope",
            scope is not None,
            scope or "in a watched namespace and matching the label selector",
        ),
    )


def _decide(
    verdict: Verdict,
    scope: str | None,
    vetoes: tuple[VetoCheck, ...],
    dry_run: DryRun,
    now: datetime,
) -> tuple[str, str]:
    if scope is not None:
        return ACTION_KEEP, f"keep: zombied never sees this pod ({scope})"
    applied = next((veto for veto in vetoes if veto.applies), None)
    if applied is not None:
        return ACTION_KEEP, f"keep: vetoed by {applied.name} ({applied.detail})"
    if not verdict.zombie or verdict.rule is None or verdict.due is None:
        return ACTION_KEEP, "keep: no enabled rule matches"
    how = {
        DryRun.OFF: "delete it",
        DryRun.CLIENT: "log that it would delete it (--dry-run=client)",
        DryRun.SERVER: "send a dry-run DELETE (--dry-run=server)",
    }[dry_run]
    if verdict.due <= now:
        return ACTION_DELETE, f"{how} now: rule {verdict.rule} matches and its min age has passed"
    wait = format_duration(round((verdict.due - now).total_seconds()))
    return (
        ACTION_WAIT,
        f"{how} at {_stamp(verdict.due)} (in {wait}): rule {verdict.rule} matches, "
        "min age not yet reached",
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
    pod = explanation.pod
    verdict = explanation.verdict
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
        "terminalSince": _stamp(explanation.since) if explanation.since_known else None,
        "vetoes": [
            {"name": veto.name, "applies": veto.applies, "detail": veto.detail}
            for veto in explanation.vetoes
        ],
        "rules": [
            {
                "name": check.rule,
                "builtin": check.builtin,
                "matches": check.matches,
                "whyNot": check.why_not,
                "minAge": format_duration(check.min_age),
                "due": _stamp(check.due) if check.due is not None else None,
            }
            for check in explanation.rules
        ],
        "verdict": {
            "zombie": verdict.zombie,
            "rule": verdict.rule,
            "due": _stamp(verdict.due) if verdict.due is not None else None,
            "skip": verdict.skip,
        },
        "action": explanation.action,
        "summary": explanation.summary,
    }


def render_json(explanation: Explanation) -> str:
    return json.dumps(as_json(explanation), indent=2) + "\n"


def render_yaml(explanation: Explanation) -> str:
    """The ``--output json`` document as YAML, as kubectl's ``-o yaml`` mirrors ``-o json``."""
    return yaml.safe_dump(as_json(explanation), sort_keys=False)


def render_name(explanation: Explanation) -> str:
    """kubectl's ``-o name``: ``pod/NAME``."""
    return f"pod/{explanation.pod.name}\n"


def render_table(explanation: Explanation) -> str:
    """The human report: the pod, the vetoes, rule by rule, then the decision."""
    pod = explanation.pod
    now = explanation.now
    if explanation.since_known:
        since = f"{_stamp(explanation.since)} ({_ago(explanation.since, now)})"
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
    width = max(len(veto.name) for veto in explanation.vetoes)
    for veto in explanation.vetoes:
        mark = "VETO" if veto.applies else "no  "
        lines.append(f"  {veto.name:<{width}}  {mark}  {veto.detail}")
    lines += ["", "Rules:"]
    width = max((len(check.rule) for check in explanation.rules), default=0)
    for check in explanation.rules:
        age = f"min age {format_duration(check.min_age)}"
        if check.matches and check.due is not None:
            text = f"MATCH     {age}, due {_stamp(check.due)} ({_ago(check.due, now)})"
        else:
            text = f"no match  {check.why_not}"
        lines.append(f"  {check.rule:<{width}}  {text}")
    if not explanation.rules:
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


async def read_pod(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """GET one pod as the raw JSON object; API failures become one-line errors."""
    # The generated method is typed as returning V1Pod; with _preload_content=False it
    # returns the raw response, which is what parse_pod wants.
    core: Any = client.CoreV1Api(api)
    try:
        response = await core.read_namespaced_pod(
            name,
            namespace,
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=_GET_TIMEOUT),
        )
        body = await read_body(response)
    except API_FAILURES as exc:
        if status_of(exc).code == 404:
            raise ZombiedError(
                f"pod {namespace}/{name} not found (deleted already, or never existed)"
            ) from exc
        raise request_error(
            exc, f"read pod {namespace}/{name}", verb="get", resource="pods", namespace=namespace
        ) from exc
    try:
        obj = json.loads(body)
    except ValueError as exc:
        raise ZombiedError(f"cannot read pod {namespace}/{name}: malformed answer") from exc
    if not isinstance(obj, dict):
        raise ZombiedError(f"cannot read pod {namespace}/{name}: malformed answer")
    return obj


async def run_explain(config: Config, out: TextIO | None = None) -> int:
    """Read the configured pod, print its explanation; return the exit status."""
    out = out if out is not None else sys.stdout
    if config.target is None:
        raise ZombiedError("zombied explain needs NAMESPACE/POD")
    namespace, name = config.target
    async with open_api_client(config.kubeconfig, config.context, pool_size=2) as api:
        obj = await read_pod(api, namespace, name)
    try:
        explanation = explain(obj, config, datetime.now(UTC))
    except PodParseError as exc:
        raise ZombiedError(f"pod {namespace}/{name} cannot be read: {exc.reason}") from exc
    out.write(RENDERERS[config.output](explanation))
    out.flush()
    return 0
