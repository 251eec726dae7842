"""How ``scan`` and ``explain`` write what they found, in one style.

JSON and YAML in Kubernetes' style (camelCase, RFC 3339 UTC times, ``null`` for what a
pod lacks), tables with ``<none>`` and kubectl's ages. It formats only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
import yaml

from zombied.duration import format_duration
from zombied.pod import PodSnapshot
from zombied.rules import Judgement, RuleMatch

#: What a table cell says for a field the pod does not have.
NONE: Final = "<none>"


def stamp(moment: datetime) -> str:
    """RFC 3339 in UTC, to the second: ``2026-03-01T12:00:03Z``."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def age(seconds: float | None) -> str:
    """kubectl's age: 42s, 5m, 3h, 12d; ``<unknown>`` without a termination time."""
    if seconds is None:
        return "<unknown>"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def until(moment: datetime, now: datetime) -> str:
    """``in 4m30s`` or ``2m ago``, whole seconds, as a sentence says it."""
    seconds = round((moment - now).total_seconds())
    if seconds > 0:
        return f"in {format_duration(seconds)}"
    return f"{format_duration(-seconds)} ago"


def due(judgement: Judgement, check: RuleMatch, now: datetime) -> str:
    """When ``check`` makes the pod due, as a sentence says it: ``in 4m30s``, ``2m ago``,
    or ``30s after first seen`` for a pod timed from when zombied first sees it (a one-off
    report cannot know when that is); `NONE` when the rule does not match."""
    if check.due is None:
        return NONE
    if not judgement.since_known:
        return f"{format_duration(check.rule.min_age)} after first seen"
    return until(check.due, now)


def due_stamp(judgement: Judgement, check: RuleMatch | None) -> str | None:
    """The due time of ``-o json`` and ``-o yaml``: null when the rule does not match or
    the pod carries no termination time to count from."""
    if check is None or check.due is None or not judgement.since_known:
        return None
    return stamp(check.due)


def pod_json(pod: PodSnapshot) -> dict[str, Any]:
    """The pod as every JSON and YAML report shows it; what it lacks is null."""
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "phase": pod.phase or None,
        "reason": pod.reason or None,
        "message": pod.message or None,
        "node": pod.node or None,
        "owner": pod.owner or None,
        "disruptionTarget": pod.disruption or None,
        "terminatedAt": stamp(pod.terminated_at) if pod.terminated_at else None,
    }


def dump(document: object, output: str) -> str:
    """``document`` as ``-o json`` (indented) or ``-o yaml`` (the same keys, in order)."""
    if output == "json":
        return msgspec.json.format(msgspec.json.encode(document)).decode() + "\n"
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def table(rows: Sequence[Sequence[str]], *, skip_first: bool = False) -> str:
    """Rows aligned in columns three spaces apart, like kubectl's; ``skip_first`` drops
    the first column."""
    first = 1 if skip_first else 0
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    lines = (
        "   ".join(row[i].ljust(widths[i]) for i in range(first, len(row))).rstrip() for row in rows
    )
    return "".join(line + "\n" for line in lines)
