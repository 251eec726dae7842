"""Deciding whether a pod is a zombie, and from when it may be deleted.

`judge` turns a `PodSnapshot` into a `Judgement` (every safety veto with its evidence,
every enabled rule's match or mismatch, the due time); the daemon, ``scan`` and
``explain`` all read that one object, so they cannot disagree. Pure: no clock, no I/O.
A rule is data (a `Pattern`) plus a min age, built-in or from the ``--config`` file,
both through `mismatch`. A pod is timed from when it became terminal, else from
``first_seen``, never from its creation. Vetoes (being deleted, the keep annotation, an
excluded owner kind, outside the `Selection`) win over every rule, and a pod that is
not terminal never matches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Final

from zombied.pod import KEEP_ANNOTATION, MIRROR_ANNOTATION, TERMINAL_PHASES, PodSnapshot
from zombied.selector import DNS_LABEL, LabelSelector

DEFAULT_MIN_AGE: Final = 30.0
#: The longest min age: due times stay far inside the calendar (datetime ends with the
#: year 9999), and a rule that should never delete is better left disabled.
MAX_MIN_AGE: Final = 100 * 365 * 86400.0
#: Every phase a pod can report; rules may only name these.
PHASES: Final = ("Pending", "Running", "Succeeded", "Failed", "Unknown")

# Reasons the kubelet's graceful node shutdown writes, across versions 1.20 to now.
NODE_SHUTDOWN_REASONS: Final = frozenset({"Shutdown", "NodeShutdown", "Terminated"})
# Since 1.26 the kubelet also says so in a DisruptionTarget condition (reason
# TerminationByKubelet), and a pod whose containers exited 0 on SIGTERM carries only
# that: phase Succeeded, no reason, no message. The same condition reason marks the
# kubelet's evictions, so the message tells a shutdown from an eviction.
TERMINATION_BY_KUBELET: Final = "TerminationByKubelet"
NODE_SHUTDOWN_MESSAGE: Final = re.compile(
    r"\APod was terminated in response to imminent node shutdown"
)

# Reasons the kubelet's admission writes when a node returns under the same name and
# rejects the pods still bound to it (1.20 to now); `OutOf<resource>` is a family.
ADMISSION_REJECTED_REASONS: Final = frozenset(
    {"NodeAffinity", "NodePorts", "NodeName", "TaintToleration", "UnexpectedAdmissionError"}
)
_OUT_OF_RESOURCE: Final = re.compile(r"OutOf[A-Za-z0-9][-A-Za-z0-9_./]*")
# The kubelet prefixes "Pod " (up to 1.25) or "Pod was rejected: " (since 1.26) to one
# of its admit handlers' messages: the rule matches genuine kubelet rejections only.
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
SKIP_MIRROR: Final = "mirror-pod"
SKIP_OWNER_EXCLUDED: Final = "owner-excluded"
SKIP_NO_RULE: Final = "no-rule"
SKIP_OUT_OF_SCOPE: Final = "out-of-scope"


@dataclass(frozen=True)
class Pattern:
    """What a pod must look like to match a rule (vetoes and age aside); an empty
    ``reasons`` or ``owner_kinds`` means any. ``message`` is searched in the message."""

    phases: frozenset[str]
    reasons: frozenset[str] = frozenset()
    reason_pattern: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    owner_kinds: frozenset[str] = frozenset()
    #: Instead of the reasons: a ``DisruptionTarget`` condition of reason
    #: `TERMINATION_BY_KUBELET` whose message matches this.
    disruption: re.Pattern[str] | None = None

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


#: The built-in rules in precedence order; custom rules rank before the catch-all ``failed``.
BUILTIN_RULES: Final[dict[str, Pattern]] = {
    "node-shutdown": Pattern(
        TERMINAL_PHASES, NODE_SHUTDOWN_REASONS, disruption=NODE_SHUTDOWN_MESSAGE
    ),
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
#: Built-in rules with a default min age of their own (see docs/rules.md).
OWN_MIN_AGES: Final[dict[str, float]] = {"admission-rejected": 300.0}
#: The rules enabled when nothing is configured: both ways a preemption leaves zombies.
DEFAULT_RULES: Final = ("node-shutdown", "admission-rejected")


@dataclass(frozen=True)
class Rule:
    """One enabled rule and how long a matching pod must have been terminal; without a
    ``pattern``, the built-in of that name."""

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
        check_min_age(self.min_age)

    @property
    def builtin(self) -> bool:
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
class Selection:
    """Which pods zombied looks at at all: namespaces (empty: all), exclusions, labels.

    The one answer to "is this namespace, this pod, in scope?": the watches, the veto,
    ``scan`` and the configuration all ask it. A namespace both named and excluded is
    refused: which of the two was meant cannot be guessed.
    """

    namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    label_selector: str = ""
    _selector: LabelSelector = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if both := [ns for ns in self.exclude_namespaces if ns in self.namespaces]:
            raise ValueError(
                f"{both[0]!r} is also listed in --namespaces; name it in only one of them"
            )
        object.__setattr__(self, "_selector", LabelSelector.parse(self.label_selector))

    @property
    def label_keys(self) -> frozenset[str]:
        """The label keys the selector reads: the only labels a snapshot needs."""
        return frozenset(requirement.key for requirement in self._selector.requirements)

    def excludes_namespace(self, namespace: str) -> str | None:
        """Why the pods of ``namespace`` are outside the selection; None when inside."""
        if self.namespaces and namespace not in self.namespaces:
            return f"namespace {namespace} is not in --namespaces ({', '.join(self.namespaces)})"
        if namespace in self.exclude_namespaces:
            return f"namespace {namespace} is in --exclude-namespaces"
        return None

    def excludes(self, pod: PodSnapshot) -> str | None:
        """Why ``pod`` is outside the selection; None when zombied looks at it."""
        if (why := self.excludes_namespace(pod.namespace)) is not None:
            return why
        if self.label_selector and not self._selector.matches(dict(pod.labels)):
            return f"its labels do not match --label-selector {self.label_selector!r}"
        return None


@dataclass(frozen=True)
class RuleSet:
    """The enabled rules, the owner kinds whose pods are never touched, the selection."""

    rules: tuple[Rule, ...] = field(default_factory=_default_rules)
    exclude_owner_kinds: frozenset[str] = frozenset()
    scope: Selection = field(default_factory=Selection)
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
        return next((rule for rule in self.rules if rule.name == name), None)

    def excludes(self, owner_kind: str) -> bool:
        """Whether pods owned by this kind are never zombies."""
        return bool(owner_kind) and owner_kind.casefold() in self._excluded

    def ordered(self) -> tuple[Rule, ...]:
        """Enabled rules in precedence order."""
        return self._ordered


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
        if not (known or family or _disrupted(pattern, pod)):
            expected = _listing(pattern.reasons)
            if pattern.reason_pattern is not None:
                expected += ", OutOf<resource>"
            alternative = (
                f", and no DisruptionTarget condition ({TERMINATION_BY_KUBELET}) says the "
                "node shut down"
                if pattern.disruption is not None
                else ""
            )
            return f"reason {pod.reason or '<none>'!r} is not one of {expected}{alternative}"
    if pattern.message is not None and pattern.message.search(pod.message) is None:
        return f"message {pod.message!r} does not match /{pattern.message.pattern}/"
    if pattern.owner_kinds and pod.owner_kind.casefold() not in pattern.owner_kinds:
        return (
            f"owner kind {pod.owner_kind or '<none>'!r} is not one of "
            f"{_listing(pattern.owner_kinds)}"
        )
    return None


def _disrupted(pattern: Pattern, pod: PodSnapshot) -> bool:
    return (
        pattern.disruption is not None
        and pod.disruption == TERMINATION_BY_KUBELET
        and pattern.disruption.search(pod.disruption_message) is not None
    )


class Decision(StrEnum):
    """What zombied does with a pod now."""

    DELETE = "delete"  # a zombie past its min age
    WAIT = "wait"  # a zombie, not yet past its min age
    KEEP = "keep"  # vetoed, or no enabled rule matches


@dataclass(frozen=True, slots=True)
class Veto:
    """One safety veto: its stable name, whether it applies, and the evidence for it."""

    name: str
    applies: bool
    evidence: str


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """One enabled rule against the pod: why its pattern does not fit (None: it fits),
    and, when it fits, when the pod is due under it (terminal since + its min age)."""

    rule: Rule
    mismatch: str | None
    due: datetime | None

    @property
    def matches(self) -> bool:
        return self.mismatch is None


@dataclass(frozen=True, slots=True)
class Judgement:
    """Everything `judge` found about one pod: the one decision every front end reads."""

    pod: PodSnapshot
    #: When the pod counts as terminal: its own termination time, else first seen.
    since: datetime
    vetoes: tuple[Veto, ...]
    rules: tuple[RuleMatch, ...]

    @property
    def since_known(self) -> bool:
        """False when the pod carries no termination time (timed from first seen)."""
        return self.pod.terminated_at is not None

    @property
    def veto(self) -> Veto | None:
        """The first safety veto that applies: it wins over every rule."""
        return next((veto for veto in self.vetoes if veto.applies), None)

    @property
    def match(self) -> RuleMatch | None:
        """The first rule in precedence that matches, unless vetoed."""
        if self.veto is not None:
            return None
        return next((check for check in self.rules if check.matches), None)

    @property
    def zombie(self) -> bool:
        return self.match is not None

    @property
    def rule(self) -> str | None:
        match = self.match
        return match.rule.name if match is not None else None

    @property
    def due(self) -> datetime | None:
        match = self.match
        return match.due if match is not None else None

    @property
    def skip(self) -> str | None:
        """Why the pod is kept: a veto's name or ``no-rule``."""
        veto = self.veto
        if veto is not None:
            return veto.name
        return None if self.zombie else SKIP_NO_RULE

    def decision(self, now: datetime) -> Decision:
        """Delete, wait or keep, at ``now``."""
        due = self.due
        if due is None:
            return Decision.KEEP
        return Decision.DELETE if due <= now else Decision.WAIT


def judge(pod: PodSnapshot, rules: RuleSet, *, first_seen: datetime) -> Judgement:
    """Judge ``pod`` under ``rules``, timed from `PodSnapshot.terminated_at`, else from
    ``first_seen``, never from its creation."""
    since = pod.terminated_at if pod.terminated_at is not None else first_seen
    return Judgement(
        pod=pod,
        since=since,
        vetoes=_vetoes(pod, rules),
        rules=tuple(_check(rule, pod, since) for rule in rules.ordered()),
    )


def _check(rule: Rule, pod: PodSnapshot, since: datetime) -> RuleMatch:
    why = mismatch(rule, pod)
    return RuleMatch(rule, why, _after(since, rule.min_age) if why is None else None)


def _after(since: datetime, seconds: float) -> datetime:
    """``since`` plus ``seconds``; a time past the calendar's end is never due."""
    try:
        return since + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def precluded(pod: PodSnapshot) -> Veto | None:
    """The veto that holds before any rule is read, whatever the configuration: the pod
    is not terminal, or is already being deleted. The cache holds no such pod."""
    return next((veto for veto in _lifecycle_vetoes(pod) if veto.applies), None)


def _lifecycle_vetoes(pod: PodSnapshot) -> tuple[Veto, Veto]:
    return (
        Veto(
            SKIP_NOT_TERMINAL,
            not pod.terminal,
            f"phase is {pod.phase or '<none>'}"
            + ("" if pod.terminal else "; only Failed and Succeeded pods can be zombies"),
        ),
        Veto(
            SKIP_DELETING,
            pod.deleting,
            "deletionTimestamp is set: the pod is already being deleted"
            if pod.deleting
            else "no deletionTimestamp",
        ),
    )


def keep_evidence(pod: PodSnapshot) -> str:
    """What the pod says about being kept, and whether zombied understood it."""
    if pod.keep_value is None:
        return f'no {KEEP_ANNOTATION} annotation or label (write "true" to keep the pod)'
    written = f"{pod.keep_via} {KEEP_ANNOTATION}: {pod.keep_value!r}"
    if pod.keep_unclear:
        return f"{written} is not understood (true or false); kept to be safe"
    return written


def _vetoes(pod: PodSnapshot, rules: RuleSet) -> tuple[Veto, ...]:
    excluded = _listing(rules.exclude_owner_kinds)
    scope = rules.scope.excludes(pod)
    return (
        *_lifecycle_vetoes(pod),
        Veto(SKIP_KEEP, pod.keep, keep_evidence(pod)),
        Veto(
            SKIP_MIRROR,
            pod.mirror,
            f"annotation {MIRROR_ANNOTATION}: the API's copy of a static pod, which its "
            "kubelet owns and brings back"
            if pod.mirror
            else "not a mirror pod",
        ),
        Veto(
            SKIP_OWNER_EXCLUDED,
            rules.excludes(pod.owner_kind),
            f"owner {pod.owner or '<none>'}; excluded owner kinds: {excluded}",
        ),
        Veto(
            SKIP_OUT_OF_SCOPE,
            scope is not None,
            scope or "in a watched namespace and matching the label selector",
        ),
    )


# Every check of what makes a rule valid lives here; the configuration only decodes the
# shapes and places a `RuleError` at its line in the file or on its flag.

_KIND: Final = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
#: The built-in kinds that own pods (a static pod's mirror is owned by its Node).
_POD_OWNERS: Final = (
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "ReplicationController",
    "Node",
)
#: Built-in workloads whose pods belong to a kind they create, and that kind.
_OWNS_NO_POD: Final = {"Deployment": "ReplicaSet", "CronJob": "Job"}
#: The fields of a rule in the ``--config`` file, as the operator writes them.
SPEC_FIELDS: Final = ("name", "minAge", "phases", "reasons", "message", "ownerKinds")


class RuleError(ValueError):
    """A rule that cannot be built: ``field`` is the spec field at fault, ``index`` the
    spec's position (None: the fault is in the names ``--rules`` enables)."""

    def __init__(self, field: str, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.index = index


@dataclass(frozen=True)
class RuleSpec:
    """A rule as the operator writes it, unchecked: a built-in (``name``, at most
    ``min_age``) or one of their own (with ``reasons``)."""

    name: str
    min_age: float | None = None
    phases: tuple[str, ...] | None = None
    reasons: tuple[str, ...] | None = None
    message: str | None = None
    owner_kinds: tuple[str, ...] | None = None


def check_rule_name(name: str) -> str:
    """``name`` if it can name a rule (a DNS label, like a namespace); `ValueError` otherwise."""
    if not DNS_LABEL.fullmatch(name):
        raise ValueError(
            f"rule names are lowercase letters, digits and '-' (like node-shutdown), got {name!r}"
        )
    return name


def check_min_age(seconds: float) -> float:
    """``seconds`` if it can be a rule's min age; `ValueError` otherwise."""
    if not 0 <= seconds <= MAX_MIN_AGE:  # also rejects NaN
        raise ValueError(f"a rule's min age must be from 0s to 100 years, got {seconds:g}s")
    return seconds


def check_kind(kind: str) -> str:
    """``kind`` if it can name the owner of a pod (``ReplicaSet``); `ValueError` otherwise.

    Custom controllers own pods too, so an unknown kind is accepted; but a built-in kind
    that never owns a pod itself, or a plural, would match no pod and protect nothing."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"{kind!r} is not a valid kind")
    known = {name.casefold(): name for name in (*_POD_OWNERS, *_OWNS_NO_POD)}
    exact = known.get(kind.casefold())
    name = exact or known.get(kind.casefold().removesuffix("s"))
    if name in _OWNS_NO_POD:
        owner = _OWNS_NO_POD[name]
        raise ValueError(f"{kind!r}: a {name} never owns a pod itself, its {owner}s do")
    if name is not None and exact is None:
        raise ValueError(f"{kind!r} is a plural; kinds are singular, like {name}")
    return kind


def build_rules(
    specs: Sequence[RuleSpec],
    enabled: Sequence[tuple[str, float | None]] | None,
    *,
    min_age: float,
    exclude_owner_kinds: Iterable[str] = (),
) -> RuleSet:
    """The enabled rules, from the file's ``specs`` and the names ``enabled`` (``--rules``;
    None: every spec, else `DEFAULT_RULES`). A rule's min age is the first given of:
    with its name in ``enabled``, its spec's, `OWN_MIN_AGES`, ``min_age``."""
    defined: dict[str, tuple[Pattern | None, float | None]] = {}
    for index, spec in enumerate(specs):
        try:
            defined[spec.name] = (_spec_pattern(spec, list(defined)), spec.min_age)
        except RuleError as exc:
            raise RuleError(exc.field, str(exc), index) from None
    if enabled is None:
        enabled = [(name, None) for name in defined] or [(name, None) for name in DEFAULT_RULES]
    rules: list[Rule] = []
    for name, given in enabled:
        if name not in defined and name not in BUILTIN_RULES:
            where = f"; the file defines {', '.join(defined)}" if defined else ""
            raise RuleError(
                "name",
                f"unknown rule {name!r}: a built-in ({', '.join(RULE_NAMES)}) or a rule with "
                f"reasons in the --config file's rules{where}",
            )
        pattern, own = defined.get(name, (None, None))
        age = next(age for age in (given, own, OWN_MIN_AGES.get(name), min_age) if age is not None)
        rules.append(Rule(name, age, pattern))
    try:
        return RuleSet(tuple(rules), frozenset(exclude_owner_kinds))
    except ValueError as exc:
        raise RuleError("name", str(exc)) from None


def _spec_pattern(spec: RuleSpec, defined: Sequence[str]) -> Pattern | None:
    """The pattern of an operator's own rule; None for a built-in enabled by name."""
    try:
        check_rule_name(spec.name)
    except ValueError as exc:
        raise RuleError("name", str(exc)) from None
    if spec.name in defined:
        first = defined.index(spec.name)
        raise RuleError("name", f"{spec.name!r} is already defined by rules[{first}]")
    values = (spec.phases, spec.reasons, spec.message, spec.owner_kinds)
    given = [name for name, value in zip(SPEC_FIELDS[2:], values, strict=True) if value is not None]
    if spec.reasons is None:
        if spec.name not in BUILTIN_RULES:
            raise RuleError(
                "reasons",
                f"a rule of your own needs reasons (built-in rules: {', '.join(RULE_NAMES)})",
            )
        if given:
            raise RuleError(given[0], "a built-in rule takes only minAge")
        return None
    if spec.name in BUILTIN_RULES:
        raise RuleError("name", "is a built-in rule; give your own rule another name")
    if spec.phases is None:
        raise RuleError("phases", "is required: Failed, Succeeded or both")
    for field_name, items in (("phases", spec.phases), ("reasons", spec.reasons)):
        if not items:
            raise RuleError(field_name, "must not be empty")
        if not all(items):
            raise RuleError(field_name, "must not hold an empty string")
    message: re.Pattern[str] | None = None
    if spec.message is not None:
        if not spec.message:
            raise RuleError("message", "must be a regular expression, not empty")
        try:
            message = re.compile(spec.message)
        except re.error as exc:
            raise RuleError("message", f"not a valid regular expression: {exc}") from None
    for kind in spec.owner_kinds or ():
        try:
            check_kind(kind)
        except ValueError as exc:
            raise RuleError("ownerKinds", str(exc)) from None
    try:
        return Pattern(
            frozenset(spec.phases),
            frozenset(spec.reasons),
            None,
            message,
            frozenset(spec.owner_kinds or ()),
        )
    except ValueError as exc:  # Pattern names the field: "phases: unknown phase 'Faild'"
        field_name, _, text = str(exc).partition(": ")
        raise RuleError(field_name, text) from None
