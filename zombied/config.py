"""Every setting of zombied, from one table; one typed configuration per command.

Each `Option` of `OPTIONS` is read from its flag, its environment variable and its
camelCase key in the ``--config`` file (flag > environment > file > default), and every
value given is checked by the option's one parser, whichever source wins. argparse
reads the command line; pydantic checks the file's shape and places each problem at its
key. Every problem is a `ConfigError` naming the option, its source and, in a file, the
line. What makes a rule valid `zombied.rules` decides, and what is in scope its
`Selection`. It reads files, never the cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, NoReturn

import pydantic
import yaml
from pydantic.alias_generators import to_camel

from zombied.duration import format_duration, parse_duration
from zombied.errors import ConfigError, Source
from zombied.kubectl import context_namespace
from zombied.rules import (
    DEFAULT_MIN_AGE,
    DEFAULT_RULES,
    RULE_NAMES,
    SPEC_FIELDS,
    RuleError,
    RuleSet,
    RuleSpec,
    Selection,
    build_rules,
    check_kind,
    check_min_age,
)
from zombied.selector import LabelSelector

#: The commands that take options, and what each does.
COMMANDS: Final = {
    "run": "watch the cluster and delete zombie pods as they become due",
    "scan": "list the zombie pods once (and with --delete, delete them once)",
    "explain": "explain rule by rule whether and when zombied would delete one pod",
}
ENV_PREFIX: Final = "ZOMBIED_"


class DryRun(StrEnum):
    """Whether deletes are real, only logged (client) or sent with ``dryRun=All``."""

    OFF = "off"
    CLIENT = "client"
    SERVER = "server"


@dataclass(frozen=True, kw_only=True)
class CommonConfig:
    """What every command takes; `load_config` fills every field from the table."""

    command: ClassVar[str]
    config_file: str | None
    kubeconfig: str | None
    context: str | None
    namespaces: tuple[str, ...]  # empty: every namespace
    exclude_namespaces: tuple[str, ...]
    label_selector: str
    rules: RuleSet
    dry_run: DryRun
    log_format: str
    log_level: str

    def __post_init__(self) -> None:
        # The rules judge pods by the selection the watches are built from, whatever made it.
        scope = Selection(self.namespaces, self.exclude_namespaces, self.label_selector)
        object.__setattr__(self, "rules", dataclasses.replace(self.rules, scope=scope))


@dataclass(frozen=True, kw_only=True)
class RunConfig(CommonConfig):
    """``zombied run``: the controller."""

    command: ClassVar[str] = "run"
    qps: float
    burst: int
    max_in_flight: int
    listen_host: str
    listen_port: int
    drain_timeout: float
    leader_elect: bool
    lease_name: str
    lease_namespace: str | None  # None: the pod's own namespace, else "default"
    lease_duration: float
    renew_deadline: float
    retry_period: float
    watch_timeout_min: float
    watch_timeout_max: float


@dataclass(frozen=True, kw_only=True)
class ScanConfig(CommonConfig):
    """``zombied scan``: one listing, and with ``delete`` one reaping pass."""

    command: ClassVar[str] = "scan"
    namespace: str | None  # the namespace listed, as kubectl's; None: all of them (-A)
    qps: float
    burst: int
    max_in_flight: int
    output: str
    no_headers: bool
    delete: bool
    waiting: bool  # also list the pods that match a rule but are not yet due


@dataclass(frozen=True, kw_only=True)
class ExplainConfig(CommonConfig):
    """``zombied explain``: one pod, judged as ``run`` would judge it."""

    command: ClassVar[str] = "explain"
    target: tuple[str, str]  # the pod's namespace and name
    output: str


AnyConfig = RunConfig | ScanConfig | ExplainConfig
#: The daemon's configuration under the name it has always imported.
Config = RunConfig


# -- value parsers: text -> value, raising ValueError with what follows "--flag: " ----

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _checked(words: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """A parser: what ``convert`` makes of the stripped text, unless it fails or gives None."""

    def parse(text: str) -> Any:
        try:
            value = convert(text.strip())
        except (ValueError, LookupError):
            value = None
        if value is None:
            raise ValueError(f"must be {words}, got {text!r}")
        return value

    return parse


def _positive(kind: type[float] | type[int], words: str) -> Callable[[str], Any]:
    return _checked(words, lambda text: v if math.isfinite(v := kind(text)) and v > 0 else None)


def _matching(pattern: re.Pattern[str], words: str) -> Callable[[str], str]:
    return _checked(words, lambda text: text if pattern.fullmatch(text) else None)


def _spelled(words: str, spellings: Mapping[str, Any]) -> Callable[[str], Any]:
    return _checked(words, lambda text: spellings[text.lower()])


def _at_least(least: float, why: str = "") -> Callable[[str], float]:
    def parse(text: str) -> float:
        if (seconds := parse_duration(text)) < least:
            raise ValueError(f"must be at least {format_duration(least)}{why}, got {text!r}")
        return seconds

    return parse


def _min_age(text: str) -> float:
    return check_min_age(parse_duration(text))


def _split(text: str) -> tuple[str, ...]:
    """Comma-separated items, stripped, without empty ones or repeats."""
    return tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


def _namespace_list(*, empty_ok: bool) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = _split(text)
        if not (names or empty_ok):  # an empty list would mean every namespace
            raise ValueError("must name a namespace; to work in every one, leave it unset")
        if bad := [name for name in names if not _DNS_LABEL.fullmatch(name)]:
            raise ValueError(f"{bad[0]!r} is not a valid namespace name")
        return names

    return parse


def _kinds(text: str) -> tuple[str, ...]:
    return tuple(check_kind(kind) for kind in _split(text))


def _rules(text: str) -> tuple[tuple[str, float | None], ...]:
    """``node-shutdown,evicted=10m``: rules by name, each with an optional min age; which
    names exist, and that each is named once, `build_rules` decides."""
    items = [item.partition("=") for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("must name at least one rule")
    return tuple((name.strip(), _min_age(age) if sep else None) for name, sep, age in items)


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        raise ValueError(f"must be HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"IPv6 hosts need brackets, like [::]:8080, got {text!r}")
    if any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"{host!r} is not a host name or address")
    if not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ValueError(f"port must be a number from 0 to 65535, got {port!r}")
    return host or "0.0.0.0", int(port)  # noqa: S104 - ":8080" is every interface, as in Go


def parse_label_selector(text: str) -> str:
    """Validate a label selector with the API server's grammar; return it stripped."""
    try:
        LabelSelector.parse(text.strip())
    except ValueError as exc:
        raise ValueError(f"invalid label selector: {exc}") from None
    return text.strip()


# -- the table -------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """How an option's value is written, as text (a flag, the environment, a file value)."""

    parse: Callable[[str], Any]
    metavar: str
    many: bool = False  # the file may give a list (joined with commas)
    const: str | None = None  # what the flag alone means; None: it needs a value
    default: str | None = None  # the default of the options that do not give their own


def _one_of(*choices: str, **aliases: str) -> Value:
    """One of ``choices``, in any case, or one of their ``aliases``."""
    spellings = {choice: choice for choice in choices} | aliases
    return Value(_spelled("one of " + ", ".join(choices), spellings), "|".join(choices))


_BOOLEAN: Final = {"true": True, "1": True, "yes": True, "on": True} | dict.fromkeys(
    ("false", "0", "no", "off"), False
)
# "none" is kubectl's spelling of off; an environment variable may say true or false.
_DRY_RUNS: Final = {"client": DryRun.CLIENT, "true": DryRun.CLIENT, "server": DryRun.SERVER}
_TEXT: Final = Value(_matching(re.compile(r"\S.*", re.DOTALL), "a non-empty string"), "NAME")
_DURATION: Final = Value(parse_duration, "DURATION")
_PERIOD: Final = dataclasses.replace(_DURATION, parse=_at_least(0.001))
_MIN_AGE: Final = dataclasses.replace(_DURATION, parse=_min_age)
_NAMESPACE: Final = Value(_matching(_DNS_LABEL, "a valid namespace name"), "NS")
_COUNT: Final = Value(_positive(int, "a whole number >= 1"), "N")
_SWITCH: Final = Value(
    _spelled("true or false", _BOOLEAN), "true|false", const="true", default="false"
)
_NAMES: Final = Value(_namespace_list(empty_ok=True), "NS,...", many=True, default="")

_ALL: Final = frozenset(COMMANDS)
_RUN: Final = frozenset({"run"})
_SCAN: Final = frozenset({"scan"})
_DELETING: Final = frozenset({"run", "scan"})
_REPORTING: Final = frozenset({"scan", "explain"})


@dataclass(frozen=True)
class Option:
    """One setting: its value, help, default (as a flag gives it) and the commands it serves."""

    name: str  # snake_case; upper-cased, the env var suffix; camelCased, the file key
    value: Value
    help: str
    default: str | None = None  # None: the value's default, else unset
    commands: frozenset[str] = _ALL
    shown: str | None = None  # the default in --help and the reference, when not itself
    short: str | None = None  # kubectl's one-letter alias, where it has one
    aliases: tuple[str, ...] = ()  # further long spellings kubectl users type by habit
    flag_only: bool = False  # what one invocation is about (-n, -A): never env or file
    unset: Any = None  # the value without a default, when no source gives one

    def __post_init__(self) -> None:
        if self.default is None:
            object.__setattr__(self, "default", self.value.default)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str | None:
        return None if self.flag_only else ENV_PREFIX + self.name.upper()

    @property
    def key(self) -> str | None:
        """The option's key in the ``--config`` file."""
        return None if self.flag_only or self.name == "config" else to_camel(self.name)

    @property
    def const(self) -> str | None:
        return self.value.const

    def spellings(self) -> tuple[str, ...]:
        return tuple(s for s in (self.short, self.flag, *self.aliases) if s)

    def shown_default(self) -> str:
        return self.shown or self.default or "none"


# fmt: off
OPTIONS: Final[tuple[Option, ...]] = (
    Option("config", Value(str, "FILE"), "YAML file of these options (by camelCase key) and rules"),
    Option("kubeconfig", dataclasses.replace(_TEXT, metavar="PATH"), "kubeconfig file",
           shown="in-cluster service account, else $KUBECONFIG or ~/.kube/config"),
    Option("context", _TEXT, "kubeconfig context", shown="current"),
    Option("namespaces", Value(_namespace_list(empty_ok=False), "NS,...", many=True),
           "comma-separated namespaces zombied works in", shown="all", unset=()),
    Option("namespace", _NAMESPACE, "as in kubectl, the namespace listed or explained; "
           "--namespaces still decides what zombied may delete", commands=_REPORTING,
           shown="the kubeconfig context's, as in kubectl", short="-n", flag_only=True),
    Option("all_namespaces", _SWITCH, "list every namespace zombied works in (not with -n)",
           commands=_SCAN, short="-A", flag_only=True),
    Option("exclude_namespaces", _NAMES, "comma-separated namespaces whose pods are never touched"),
    Option("label_selector", Value(parse_label_selector, "SELECTOR", default=""),
           "only pods matching this selector (a=b, a!=b, a in (x,y), a notin (x), a, !a, a>1)",
           shown="all pods", short="-l", aliases=("--selector",)),
    Option("rules", Value(_rules, "RULE[=AGE],..."), f"rules to enable, built-in "
           f"({', '.join(RULE_NAMES)}) or the file's; NAME=DURATION gives one its own min age",
           shown=",".join(DEFAULT_RULES)),
    Option("min_age", _MIN_AGE, "how long a pod must have been terminal before it is deleted, "
           "for rules without their own (a DURATION is 500ms, 30s, 5m, 1h30m or seconds)",
           format_duration(DEFAULT_MIN_AGE)),
    Option("exclude_owner_kinds", dataclasses.replace(_NAMES, parse=_kinds, metavar="KIND,..."),
           "owner kinds (e.g. Job, ReplicaSet) whose pods are never touched"),
    Option("qps", Value(_positive(float, "a number > 0"), "QPS"),
           "pod DELETEs per second at most, fewer after errors", "20", _DELETING),
    Option("burst", _COUNT, "pod DELETE requests allowed back to back", "100", _DELETING),
    Option("max_in_flight", _COUNT, "concurrent DELETE requests", "4", _DELETING),
    Option("dry_run", Value(_spelled("one of client, server, none", _DRY_RUNS | dict.fromkeys(
           ("none", "false", "off"), DryRun.OFF)), "client|server|none", const="client"),
           "log deletes (client) or send them with dryRun=All (server)", "none"),
    Option("listen", Value(_listen, "HOST:PORT"), "address of /healthz, /readyz and /metrics",
           "0.0.0.0:8080", _RUN),
    Option("drain_timeout", _DURATION, "on SIGTERM, how long to finish due deletes; keep it "
           "below the pod's grace period", "20s", _RUN),
    Option("log_format", _one_of("auto", "json", "console"),
           "auto: console on a terminal, else JSON lines", "auto"),
    Option("log_level", _one_of("debug", "info", "warning", "error", warn="warning"),
           "minimum level logged", "info"),
    Option("leader_elect", _SWITCH, "elect a leader through a Lease; only it deletes",
           commands=_RUN),
    Option("lease_name", Value(_matching(_DNS_SUBDOMAIN, "a lowercase DNS name"), "NAME"),
           "name of the Lease", "zombied", _RUN),
    Option("lease_namespace", _NAMESPACE, "namespace of the Lease", commands=_RUN,
           shown="the namespace zombied runs in (in a cluster), else default"),
    Option("lease_duration", _PERIOD, "how long a Lease is valid without renewal", "15s", _RUN),
    Option("renew_deadline", _PERIOD, "the leader stops deleting after this long unrenewed",
           "10s", _RUN),
    Option("retry_period", _PERIOD, "interval between Lease acquire/renew attempts", "2s", _RUN),
    Option("watch_timeout", dataclasses.replace(_DURATION, parse=_at_least(
           1, " (the API counts whole seconds)")),
           "watch timeout, at random from this to twice this, once the API server has shown "
           "bookmarks (until then at most 90s)", "5m", _RUN),
    Option("output", _one_of("table", "wide", "json", "yaml", "name"), "report format; wide "
           "(scan only) adds phase, termination time and message", "table", _REPORTING,
           short="-o"),
    Option("no_headers", _SWITCH, "print the table without its header line", commands=_SCAN),
    Option("waiting", _SWITCH, "also list pods that match a rule but are not yet due",
           commands=_SCAN),
    Option("delete", _SWITCH, "delete the zombies found, once (--dry-run: report them)",
           commands=_SCAN),
)
# fmt: on


def options_for(command: str) -> tuple[Option, ...]:
    """The options that apply to ``command``."""
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r} (choose from {', '.join(COMMANDS)})")
    return tuple(option for option in OPTIONS if command in option.commands)


def _parse(option: Option, text: str, source: Source) -> Any:
    try:
        return option.value.parse(text)
    except ValueError as exc:
        where = option.env if source is Source.ENV else None
        raise ConfigError(str(exc), option=option.flag, source=source, where=where) from None


# -- the command line ------------------------------------------------------------------

#: explain's formats: scan's, but for ``wide`` (explain's table already shows everything).
_EXPLAIN_OUTPUTS: Final = ("table", "json", "yaml", "name")

#: What a flag of another command means here, for the error naming it.
_ELSEWHERE: Final = {
    ("run", "namespace"): "the namespaces run watches are --namespaces NS,...",
    ("run", "all_namespaces"): "run watches every namespace unless --namespaces names some",
    ("explain", "all_namespaces"): "explain reads one pod: POD -n NS, or NS/POD",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see '{self.prog} --help')", source=Source.FLAG)


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``zombied COMMAND``'s arguments, which also prints its ``--help``."""
    options = options_for(command)
    parser = _Parser(
        prog=f"zombied {command}",
        description=COMMANDS[command].capitalize() + ".",
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
        epilog="Every option but -n and -A can also be set with its environment variable "
        "or in the --config file. Precedence: flag > environment > file > default; an "
        "invalid value is an error wherever it is, even where another source overrides it.",
    )
    if command == "explain":
        parser.add_argument("target", metavar="[NS/]POD", nargs="?", help="the pod to explain")
    for option in options:
        where = f"; env {option.env}" if option.env else ""
        optional: dict[str, Any] = {"nargs": "?", "const": option.const} if option.const else {}
        metavar = option.value.metavar
        if (command, option.name) == ("explain", "output"):
            metavar = "|".join(_EXPLAIN_OUTPUTS)
        parser.add_argument(
            *option.spellings(),
            dest=option.name,
            metavar=metavar,
            type=functools.partial(_parse, option, source=Source.FLAG),
            help=f"{option.help} (default: {option.shown_default()}{where})",
            **optional,
        )
    return parser


def _joined(options: Sequence[Option], argv: Sequence[str]) -> list[str]:
    """``argv`` with every value joined to its flag, as kubectl reads them: a flag takes
    the next argument whatever it looks like (``--min-age -1s``), a flag with an optional
    value (``--dry-run``) only one it accepts (``explain --dry-run NS/POD``)."""
    by_spelling = {spelling: option for option in options for spelling in option.spellings()}
    joined: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        option = by_spelling.get(arg)
        if arg == "--":
            return [*joined, arg, *rest]
        if option is None:
            joined.append(arg)
        elif option.const is not None:
            accepted = rest and _accepts(option, rest[0])
            joined.append(f"{arg}={rest.pop(0) if accepted else option.const}")
        elif rest:
            joined.append(f"{arg}={rest.pop(0)}")
        else:
            raise ConfigError("expected one argument", option=option.flag, source=Source.FLAG)
    return joined


def _accepts(option: Option, text: str) -> bool:
    try:
        option.value.parse(text)
    except ValueError:
        return False
    return True


def _read_argv(command: str, argv: Sequence[str]) -> tuple[dict[str, Any], str | None]:
    """The options given on the command line, parsed, and explain's pod."""
    prog = f"zombied {command}"
    given, others = build_parser(command).parse_known_args(_joined(options_for(command), argv))
    for arg in others:
        if arg.startswith("-") and arg not in ("-", "--"):
            spelling = arg.partition("=")[0] if arg.startswith("--") else arg[:2]
            name = next((o.name for o in OPTIONS if spelling in o.spellings()), "")
            hint = _ELSEWHERE.get((command, name))
            raise ConfigError(
                f"unknown option for '{prog}' (see '{prog} --help')"
                + (f"; {hint}" if hint else ""),
                option=spelling,
                source=Source.FLAG,
            )
        if arg != "--":
            raise ConfigError(f"unexpected argument {arg!r} for '{prog}' (see '{prog} --help')")
    values = vars(given)
    return values, values.pop("target", None)


def given_options(command: str, argv: Sequence[str]) -> frozenset[str]:
    """The names of the options ``argv`` gives; none when it cannot be read (loading the
    configuration then says why)."""
    try:
        return frozenset(_read_argv(command, argv)[0])
    except ConfigError:
        return frozenset()


# -- loading ---------------------------------------------------------------------------


def load_config(command: str, argv: Sequence[str], environ: Mapping[str, str]) -> AnyConfig:
    """The configuration of ``zombied COMMAND``, from flags, environment, file, defaults."""
    options = options_for(command)
    given, target = _read_argv(command, argv)
    # Every environment value is checked, for every command: one Deployment's
    # environment may serve several commands.
    from_env = {
        option.name: _parse(option, environ[option.env], Source.ENV)
        for option in OPTIONS
        if option.env is not None and option.env in environ
    }
    config_file = given.get("config", from_env.get("config"))
    file = _read_file(config_file) if config_file is not None else _File()
    merged = file.values | from_env | given
    values: dict[str, Any] = {"config_file": config_file}
    for option in options:
        default = option.unset if option.default is None else option.value.parse(option.default)
        values[option.name] = merged.get(option.name, default)
    try:
        rules = build_rules(
            file.rules,
            values["rules"],
            min_age=values["min_age"],
            exclude_owner_kinds=values["exclude_owner_kinds"],
        )
        Selection(values["namespaces"], values["exclude_namespaces"])
    except RuleError as exc:
        if exc.index is not None:
            raise file.error(("rules", exc.index, exc.field), str(exc)) from None
        where = None if "rules" in given else "ZOMBIED_RULES"
        source = Source.ENV if where else Source.FLAG
        raise ConfigError(str(exc), option="--rules", source=source, where=where) from None
    except ValueError as exc:
        raise ConfigError(str(exc), option="--exclude-namespaces") from None
    values["rules"] = rules
    if command == "run":
        _check_lease(values)
        values["listen_host"], values["listen_port"] = values["listen"]
        values["watch_timeout_min"] = values["watch_timeout"]
        values["watch_timeout_max"] = 2 * values["watch_timeout"]
    elif command == "scan":
        if values["namespace"] is not None and values["all_namespaces"]:
            raise ConfigError("cannot be combined with --namespace (-n)", option="--all-namespaces")
        if values["namespace"] is None and not values["all_namespaces"]:
            values["namespace"] = context_namespace(
                values["kubeconfig"], values["context"], environ
            )
    else:
        if values["output"] not in _EXPLAIN_OUTPUTS:
            raise ConfigError(
                "wide is scan's; explain's table already shows everything "
                f"(choose from {', '.join(_EXPLAIN_OUTPUTS)})",
                option="--output",
            )
        namespace = values["namespace"] or context_namespace(
            values["kubeconfig"], values["context"], environ
        )
        values["target"] = _target(target, values["namespace"], namespace)
    cls: type[AnyConfig] = {"run": RunConfig, "scan": ScanConfig, "explain": ExplainConfig}[command]
    return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})


def _check_lease(values: Mapping[str, Any]) -> None:
    # client-go's rule: the leader gives up (renew deadline) before anyone else may take
    # over (lease duration), with room for one jittered retry in between.
    lease, deadline = values["lease_duration"], values["renew_deadline"]
    for flag, value, bound, what in (
        ("--lease-duration", lease, deadline, "--renew-deadline"),
        ("--renew-deadline", deadline, 1.2 * values["retry_period"], "1.2 x --retry-period"),
    ):
        if not value > bound:
            raise ConfigError(
                f"must be longer than {what} ({format_duration(bound)}), "
                f"got {format_duration(value)}",
                option=flag,
            )


def _target(text: str | None, given: str | None, namespace: str) -> tuple[str, str]:
    """The pod ``explain`` reads: ``NS/POD``, or ``POD`` in ``-n NS``, else in ``namespace``
    (the kubeconfig context's, as kubectl takes it)."""
    if text is None:
        raise ConfigError("zombied explain: which pod? give POD -n NAMESPACE, or NAMESPACE/POD")
    named, slash, name = text.strip().rpartition("/")
    if slash and given not in (None, named):
        raise ConfigError(
            f"{text!r} is in namespace {named}, not {given}; give the namespace once",
            option="--namespace",
        )
    named = named if slash else namespace
    if not (_DNS_LABEL.fullmatch(named) and _DNS_SUBDOMAIN.fullmatch(name)):
        raise ConfigError(
            f"zombied explain: must be POD or NAMESPACE/POD, like team-a/web-0, got {text!r}"
        )
    return named, name


# -- the YAML file ---------------------------------------------------------------------


def _from_file(option: Value) -> Callable[[object], Any]:
    """The parser of a file's value: YAML, parsed as the text of the option's flag."""

    def parse(value: object) -> Any:
        if value is None:  # `key:` with no value leaves the default
            return None
        if isinstance(value, list) and option.many and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if isinstance(value, list | dict):
            shape = "a string or a list of strings" if option.many else "one value"
            kind = "list" if isinstance(value, list) else "mapping"
            raise ValueError(f"must be {shape}, got a {kind}")  # noqa: TRY004 - pydantic's kind
        if isinstance(value, bool):
            value = str(value).lower()
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # as written: YAML reads `qps: -1.0` and `qps: -1` alike
        return option.parse(str(value))

    return parse


class _FileRule(pydantic.BaseModel, extra="forbid", alias_generator=to_camel):
    name: str
    min_age: Annotated[float | None, pydantic.PlainValidator(_from_file(_MIN_AGE))] = None
    phases: tuple[str, ...] | None = None
    reasons: tuple[str, ...] | None = None
    message: str | None = None
    owner_kinds: tuple[str, ...] | None = None


#: The options a file may set, by key; its ``rules`` are rule specs, not ``--rules``.
_FILE_OPTIONS: Final = {o.key: o for o in OPTIONS if o.key is not None and o.name != "rules"}
_FILE_FIELDS: Final[dict[str, Any]] = {
    o.name: (
        Annotated[Any, pydantic.PlainValidator(_from_file(o.value))],
        pydantic.Field(None, alias=key),
    )
    for key, o in _FILE_OPTIONS.items()
}
_FileSchema: Final = pydantic.create_model(
    "File",
    __config__=pydantic.ConfigDict(extra="forbid"),
    rules=(tuple[_FileRule, ...] | None, None),
    **_FILE_FIELDS,
)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key set twice is an error, not the last one silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key in (key for key, _ in node.value if isinstance(key, yaml.ScalarNode)):
            if key.value in seen:
                problem = f"{key.value}: already set on line {seen[key.value]}"
                raise yaml.constructor.ConstructorError(None, None, problem, key.start_mark)
            seen[key.value] = key.start_mark.line + 1
        return super().construct_mapping(node, deep)


@dataclass
class _File:
    """What a ``--config`` file sets, and its YAML nodes, to place a problem at its line."""

    path: str = ""
    root: yaml.Node | None = None
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    rules: list[RuleSpec] = dataclasses.field(default_factory=list)

    def error(self, loc: Sequence[str | int], problem: str) -> ConfigError:
        """The problem of the value at ``loc``, at the line of what is written nearest."""
        node, line = self.root, None
        for step in loc:
            if isinstance(node, yaml.MappingNode):
                pair = next(((k, v) for k, v in node.value if k.value == step), None)
                node, line = (pair[1], pair[0].start_mark.line + 1) if pair else (None, line)
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
                node = node.value[step] if step < len(node.value) else None
                line = node.start_mark.line + 1 if node is not None else line
        path = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in loc)
        line = line or (self.root.start_mark.line + 1 if self.root is not None else None)
        return ConfigError(
            problem, option=path.lstrip(".") or None, source=Source.FILE, where=self.path, line=line
        )


def _read_file(path: str) -> _File:
    """Every option the file sets, parsed (those of every command), and its rules."""
    file = _File(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise file.error((), f"cannot read the file: {reason}") from None
    loader = _Loader(text)
    try:
        file.root = loader.get_single_node()
        if file.root is None or file.root.tag == "tag:yaml.org,2002:null":
            # A ConfigMap mounted under the wrong key shows up as an empty file: running
            # with the defaults (every namespace) instead would widen what is deleted.
            raise file.error((), "the file sets nothing; give at least one option")
        document = loader.construct_document(file.root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(
            f"not valid YAML: {' '.join(str(problem).split())}",
            source=Source.FILE,
            where=path,
            line=line,
        ) from None
    except (ValueError, RecursionError) as exc:  # a date like 2024-13-01, a 5000-digit int
        raise ConfigError(f"not valid YAML: {exc}", source=Source.FILE, where=path) from None
    finally:
        loader.dispose()
    try:
        decoded = _FileSchema.model_validate(document)
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise file.error(first["loc"], _problem(first)) from None
    file.values = {name: value for name, value in decoded if value is not None and name != "rules"}
    file.rules = [RuleSpec(**dict(rule)) for rule in getattr(decoded, "rules", None) or ()]
    return file


def _problem(error: Any) -> str:
    """pydantic's finding in the words of this file: its kind is structured, its text is
    the option's own parser's, or pydantic's own."""
    kind, loc = error["type"], error["loc"]
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind == "missing":
        return "is required"
    if kind == "invalid_key":
        return "keys must be option and field names"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "must be a mapping" + ("" if loc else " of option names to values")
    if kind != "extra_forbidden":
        return str(error["msg"])
    if loc[0] == "rules":
        return f"unknown field (a rule takes {', '.join(SPEC_FIELDS)})"
    keys = [*_FILE_OPTIONS, "rules"]
    camel = to_camel(str(loc[0]).replace("-", "_"))
    if camel in keys and camel != loc[0]:
        return f"unknown key; keys are camelCase: {camel}"
    close = difflib.get_close_matches(str(loc[0]), keys, n=1, cutoff=0.8)
    return "unknown key" + (f"; did you mean {close[0]}?" if close else "")
