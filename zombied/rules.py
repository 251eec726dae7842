"""Deciding whether a pod is a zombie, and from when it may be deleted.

Rules are pure functions of a `PodSnapshot`: no clock, no I/O, no logging, so every
decision can be tested exhaustively. The caller supplies ``first_seen`` (when zombied
first saw the pod terminal) as the fallback for pods that carry no termination time;
the pod's creation time is never used, because a pod that ran for a week must not be
deleted the instant it fails. Safety vetoes (being deleted, the opt-out annotation,
an excluded owner kind) always win over any rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from zombied.pod import KEEP_ANNOTATION, TERMINAL_PHASES, PodSnapshot

__all__ = [
    "DEFAULT_MIN_AGE",
    "KEEP_ANNOTATION",
    "NODE_SHUTDOWN_REASONS",
    "RULE_NAMES",
    "SKIP_DELETING",
    "SKIP_KEEP",
    "SKIP_NOT_TERMINAL",
    "SKIP_NO_RULE",
    "SKIP_OWNER_EXCLUDED",
    "Rule",
    "RuleSet",
    "Verdict",
    "classify",
    "describe",
    "is_due",
    "matches",
]

# The order is the precedence: the most specific explanation wins.
RULE_NAMES: Final = ("node-shutdown", "evicted", "failed")
DEFAULT_MIN_AGE: Final = 30.0

# Reasons the kubelet's graceful node shutdown writes, across versions 1.20 to now.
NODE_SHUTDOWN_REASONS: Final = frozenset({"Shutdown", "NodeShutdown", "Terminated"})

SKIP_NOT_TERMINAL: Final = "not-terminal"
SKIP_DELETING: Final = "deleting"
SKIP_KEEP: Final = "keep-annotation"
SKIP_OWNER_EXCLUDED: Final = "owner-excluded"
SKIP_NO_RULE: Final = "no-rule"


@dataclass(frozen=True)
class Rule:
    """One enabled rule and how long a matching pod must have been terminal."""

    name: str
    min_age: float = DEFAULT_MIN_AGE

    def __post_init__(self) -> None:
        if self.name not in RULE_NAMES:
            raise ValueError(f"unknown rule {self.name!r}; known: {', '.join(RULE_NAMES)}")
        if not self.min_age >= 0:  # also rejects NaN
            raise ValueError(f"min age of rule {self.name!r} must be >= 0, got {self.min_age}")


@dataclass(frozen=True)
class RuleSet:
    """The enabled rules and the owner kinds whose pods are never touched."""

    rules: tuple[Rule, ...] = (Rule("node-shutdown"),)
    exclude_owner_kinds: frozenset[str] = frozenset()
    _excluded: frozenset[str] = field(init=False, repr=False, compare=False)
    _ordered: tuple[Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [rule.name for rule in self.rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rules listed more than once: {', '.join(names)}")
        # Kinds are compared case-insensitively: users write "job" as often as "Job".
        object.__setattr__(
            self, "_excluded", frozenset(kind.casefold() for kind in self.exclude_owner_kinds)
        )
        object.__setattr__(
            self, "_ordered", tuple(sorted(self.rules, key=lambda r: RULE_NAMES.index(r.name)))
        )

    @property
    def names(self) -> tuple[str, ...]:
        """Enabled rule names in precedence order."""
        return tuple(rule.name for rule in self._ordered)

    def get(self, name: str) -> Rule | None:
        """The enabled rule called ``name``, if any."""
        return next((rule for rule in self.rules if rule.name == name), None)

    def excludes(self, owner_kind: str) -> bool:
        """Whether pods owned by this kind are never zombies."""
        return bool(owner_kind) and owner_kind.casefold() in self._excluded

    def ordered(self) -> tuple[Rule, ...]:
        """Enabled rules in precedence order (node-shutdown, evicted, failed)."""
        return self._ordered


@dataclass(frozen=True)
class Verdict:
    """The outcome of `classify`.

    A zombie carries the rule that matched and the instant it becomes due; otherwise
    ``skip`` is a short stable reason fit for metrics labels and logs.
    """

    zombie: bool
    rule: str | None = None
    due: datetime | None = None
    skip: str | None = None


def matches(rule_name: str, pod: PodSnapshot) -> bool:
    """Whether the pod fits the named rule's pattern, ignoring vetoes and age."""
    if rule_name == "node-shutdown":
        return pod.phase in TERMINAL_PHASES and pod.reason in NODE_SHUTDOWN_REASONS
    if rule_name == "evicted":
        return pod.phase == "Failed" and pod.reason == "Evicted"
    if rule_name == "failed":
        return pod.phase == "Failed"
    raise ValueError(f"unknown rule {rule_name!r}")


def classify(pod: PodSnapshot, rules: RuleSet, *, first_seen: datetime) -> Verdict:
    """Decide whether ``pod`` is a zombie under ``rules`` and when it becomes due.

    The due time is when the pod became terminal (`PodSnapshot.terminated_at`, else
    ``first_seen``) plus the matching rule's min age.
    """
    if pod.phase not in TERMINAL_PHASES:
        return Verdict(zombie=False, skip=SKIP_NOT_TERMINAL)
    if pod.deleting:
        return Verdict(zombie=False, skip=SKIP_DELETING)
    if pod.keep:
        return Verdict(zombie=False, skip=SKIP_KEEP)
    if rules.excludes(pod.owner_kind):
        return Verdict(zombie=False, skip=SKIP_OWNER_EXCLUDED)
    for rule in rules.ordered():
        if matches(rule.name, pod):
            since = pod.terminated_at if pod.terminated_at is not None else first_seen
            due = since + timedelta(seconds=rule.min_age)
            return Verdict(zombie=True, rule=rule.name, due=due)
    return Verdict(zombie=False, skip=SKIP_NO_RULE)


def is_due(verdict: Verdict, now: datetime) -> bool:
    """Whether a zombie verdict's min age has passed at ``now``."""
    return verdict.zombie and verdict.due is not None and verdict.due <= now


def describe(pod: PodSnapshot) -> dict[str, str]:
    """Stable log fields identifying a pod and why it looks the way it does."""
    fields = {
        "namespace": pod.namespace,
        "pod": pod.name,
        "uid": pod.uid,
        "phase": pod.phase,
        "reason": pod.reason,
        "node": pod.node,
    }
    if pod.owner:
        fields["owner"] = pod.owner
    if pod.terminated_at is not None:
        fields["terminated_at"] = pod.terminated_at.isoformat()
    return fields
