"""Deciding whether a pod is a zombie, and from when it may be deleted.

Rules are pure functions of a `PodSnapshot`: no clock, no I/O, no logging, so every
decision can be tested exhaustively. A rule is data (a `Pattern`: phases, reasons, an
optional message expression and owner-kind filter) plus a min age; the built-in rules
are the same data, written here, so an operator's rule from the ``--config`` file and
``node-shutdown`` go through one code path (`mismatch`). The caller supplies
``first_seen`` (when zombied first saw the pod terminal) as the fallback for pods that
carry no termination time; the pod's creation time is never used, because a pod that
ran for a week must not be deleted the instant it fails. Safety vetoes (being deleted,
the opt-out annotation, an excluded owner kind) always win over any rule, and no rule
can match a pod that is not terminal: a Pending pod a scheduler could not place, or a
Running one, is never a zombie whatever its reason says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from zombied.pod import TERMINAL_PHASES, PodSnapshot

__all__ = [
    "ADMISSION_REJECTED_REASONS",
    "BUILTIN_RULES",
    "DEFAULT_MIN_AGE",
    "DEFAULT_RULES",
    "NODE_SHUTDOWN_REASONS",
    "OWN_MIN_AGES",
    "PHASES",
    "RULE_NAMES",
    "SKIP_DELETING",
    "SKIP_KEEP",
    "SKIP_NOT_TERMINAL",
    "SKIP_NO_RULE",
    "SKIP_OWNER_EXCLUDED",
    "Pattern",
    "Rule",
    "RuleSet",
    "Verdict",
    "classify",
    "is_due",
    "matches",
    "mismatch",
    "veto",
]

DEFAULT_MIN_AGE: Final = 30.0
#: Every phase a pod can report; rules may only name these.
PHASES: Final = ("Pending", "Running", "Succeeded", "Failed", "Unknown")

# Reasons the kubelet's graceful node shutdown writes, across versions 1.20 to now.
NODE_SHUTDOWN_REASONS: Final = frozenset({"Shutdown", "NodeShutdown", "Terminated"})

# Reasons the kubelet's admission writes when a node that returns under the same name
# rejects the pods still bound to it (pkg/kubelet/lifecycle/predicate.go and the
# device, CPU and memory managers' admit handlers, 1.20 to now). `OutOf<resource>` is
# the one open family: `InsufficientResourcePrefix` + the resource name.
ADMISSION_REJECTED_REASONS: Final = frozenset(
    {"NodeAffinity", "NodePorts", "NodeName", "TaintToleration", "UnexpectedAdmissionError"}
)
_OUT_OF_RESOURCE: Final = re.compile(r"OutOf[A-Za-z0-9][-A-Za-z0-9_./]*")
# The kubelet's rejectPod prefixes every message: "Pod " up to 1.25, "Pod was rejected: "
# since 1.26. What follows is one of the admit handlers' message shapes; requiring it
# keeps the rule to genuine kubelet rejections, not any object that copies a reason.
_ADMISSION_MESSAGE: Final = re.compile(
    r"\APod (?:was rejected: )?(?:"
    r"Predicate (?:NodeAffinity|NodePorts|NodeName|TaintToleration) failed"
    r"|Node didn't have enough resource: "
    r"|Update plugin resources failed due to "
    r"|Allocate failed due to "
    r"|Unexpected error while attempting to recover from admission failure: "
    r")"
)

SKIP_NOT_TERMINAL: Final = "not-terminal"
SKIP_DELETING: Final = "deleting"
SKIP_KEEP: Final = "keep-annotation"
SKIP_OWNER_EXCLUDED: Final = "owner-excluded"
SKIP_NO_RULE: Final = "no-rule"


@dataclass(frozen=True)
class Pattern:
    """What a pod must look like to match a rule (vetoes and age aside).

    ``reasons`` are exact ``status.reason`` strings; empty means any reason (only the
    built-in ``failed`` rule has none). ``reason_pattern`` is for built-ins whose
    reasons form a family (``OutOf<resource>``). ``message`` is searched in
    ``status.message``. ``owner_kinds`` empty means any owner, or none.
    """

    phases: frozenset[str]
    reasons: frozenset[str] = frozenset()
    reason_pattern: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    owner_kinds: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError("phases: must name Failed, Succeeded or both")
        for phase in sorted(self.phases):
            if phase not in PHASES:
                raise ValueError(f"phases: unknown phase {phase!r} (known: {', '.join(PHASES)})")
            if phase not in TERMINAL_PHASES:
                raise ValueError(
                    f"phases: {phase} is not terminal; only Failed and Succeeded pods are zombies"
                )
        # Kinds are compared case-insensitively: users write "job" as often as "Job".
        object.__setattr__(
            self, "owner_kinds", frozenset(kind.casefold() for kind in self.owner_kinds)
        )


#: The built-in rules in precedence order (the most specific explanation wins; custom
#: rules come after ``evicted`` and before the catch-all ``failed``).
BUILTIN_RULES: Final[dict[str, Pattern]] = {
    "node-shutdown": Pattern(TERMINAL_PHASES, NODE_SHUTDOWN_REASONS),
    "admission-rejected": Pattern(
        frozenset({"Failed"}),
        ADMISSION_REJECTED_REASONS,
        reason_pattern=_OUT_OF_RESOURCE,
        message=_ADMISSION_MESSAGE,
    ),
    "evicted": Pattern(frozenset({"Failed"}), frozenset({"Evicted"})),
    "failed": Pattern(frozenset({"Failed"})),
}
RULE_NAMES: Final = tuple(BUILTIN_RULES)
_CATCH_ALL: Final = "failed"
#: Built-in rules with a default min age of their own; the others use ``--min-age``.
#: Admission rejections wait longer, so the Event and status of a genuinely misplaced
#: pod stay visible for a while (see the README's "Rules").
OWN_MIN_AGES: Final[dict[str, float]] = {"admission-rejected": 300.0}
#: The rules enabled when nothing is configured: both ways a preemption leaves zombies.
DEFAULT_RULES: Final = ("node-shutdown", "admission-rejected")


@dataclass(frozen=True)
class Rule:
    """One enabled rule and how long a matching pod must have been terminal.

    Without a ``pattern`` the rule is the built-in of that name; with one it is an
    operator's own rule, and its name must not shadow a built-in.
    """

    name: str
    min_age: float = DEFAULT_MIN_AGE
    pattern: Pattern | None = None

    def __post_init__(self) -> None:
        if self.pattern is None:
            builtin = BUILTIN_RULES.get(self.name)
            if builtin is None:
                raise ValueError(
                    f"unknown rule {self.name!r}; a rule of your own needs reasons "
                    f"(built-in: {', '.join(RULE_NAMES)})"
                )
            object.__setattr__(self, "pattern", builtin)
        elif self.name in BUILTIN_RULES and self.pattern != BUILTIN_RULES[self.name]:
            raise ValueError(f"{self.name!r} is a built-in rule; give your own rule another name")
        if not self.min_age >= 0:  # also rejects NaN
            raise ValueError(f"min age of rule {self.name!r} must be >= 0, got {self.min_age}")

    @property
    def builtin(self) -> bool:
        """Whether this is one of the built-in rules."""
        return self.name in BUILTIN_RULES

    @property
    def rank(self) -> int:
        """Precedence: built-ins in their order, custom rules before ``failed``."""
        if self.name == _CATCH_ALL:
            return len(RULE_NAMES) + 1
        return RULE_NAMES.index(self.name) if self.builtin else len(RULE_NAMES)


def _default_rules() -> tuple[Rule, ...]:
    return tuple(Rule(name, OWN_MIN_AGES.get(name, DEFAULT_MIN_AGE)) for name in DEFAULT_RULES)


@dataclass(frozen=True)
class RuleSet:
    """The enabled rules and the owner kinds whose pods are never touched."""

    rules: tuple[Rule, ...] = field(default_factory=_default_rules)
    exclude_owner_kinds: frozenset[str] = frozenset()
    _excluded: frozenset[str] = field(init=False, repr=False, compare=False)
    _ordered: tuple[Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [rule.name for rule in self.rules]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"rule {twice[0]!r} is listed more than once")
        object.__setattr__(
            self, "_excluded", frozenset(kind.casefold() for kind in self.exclude_owner_kinds)
        )
        # sorted() is stable: custom rules keep the order they were listed in.
        object.__setattr__(self, "_ordered", tuple(sorted(self.rules, key=lambda r: r.rank)))

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
        """Enabled rules in precedence order."""
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


def _listing(values: Iterable[str]) -> str:
    return ", ".join(sorted(values)) or "<none>"


def mismatch(rule: Rule, pod: PodSnapshot) -> str | None:
    """Why the pod does not fit the rule's pattern (vetoes and age aside); None if it does."""
    pattern = rule.pattern or BUILTIN_RULES[rule.name]
    if pod.phase not in pattern.phases:
        return f"phase {pod.phase or '<none>'} is not {' or '.join(sorted(pattern.phases))}"
    if pattern.reasons or pattern.reason_pattern is not None:
        known = pod.reason in pattern.reasons
        family = pattern.reason_pattern is not None and pattern.reason_pattern.fullmatch(pod.reason)
        if not (known or family):
            expected = _listing(pattern.reasons)
            if pattern.reason_pattern is not None:
                expected += ", OutOf<resource>"
            return f"reason {pod.reason or '<none>'!r} is not one of {expected}"
    if pattern.message is not None and pattern.message.search(pod.message) is None:
        return f"message {pod.message!r} does not match /{pattern.message.pattern}/"
    if pattern.owner_kinds and pod.owner_kind.casefold() not in pattern.owner_kinds:
        return (
            f"owner kind {pod.owner_kind or '<none>'!r} is not one of "
            f"{_listing(pattern.owner_kinds)}"
        )
    return None


def matches(rule: Rule, pod: PodSnapshot) -> bool:
    """Whether the pod fits the rule's pattern, ignoring vetoes and age."""
    return mismatch(rule, pod) is None


def veto(pod: PodSnapshot, rules: RuleSet) -> str | None:
    """The skip reason of the first safety veto that applies to ``pod``, if any."""
    if pod.phase not in TERMINAL_PHASES:
        return SKIP_NOT_TERMINAL
    if pod.deleting:
        return SKIP_DELETING
    if pod.keep:
        return SKIP_KEEP
    if rules.excludes(pod.owner_kind):
        return SKIP_OWNER_EXCLUDED
    return None


def classify(pod: PodSnapshot, rules: RuleSet, *, first_seen: datetime) -> Verdict:
    """Decide whether ``pod`` is a zombie under ``rules`` and when it becomes due.

    The due time is when the pod became terminal (`PodSnapshot.terminated_at`, else
    ``first_seen``) plus the matching rule's min age.
    """
    skip = veto(pod, rules)
    if skip is not None:
        return Verdict(zombie=False, skip=skip)
    for rule in rules.ordered():
        if matches(rule, pod):
            since = pod.terminated_at if pod.terminated_at is not None else first_seen
            due = since + timedelta(seconds=rule.min_age)
            return Verdict(zombie=True, rule=rule.name, due=due)
    return Verdict(zombie=False, skip=SKIP_NO_RULE)


def is_due(verdict: Verdict, now: datetime) -> bool:
    """Whether a zombie verdict's min age has passed at ``now``."""
    return verdict.zombie and verdict.due is not None and verdict.due <= now
