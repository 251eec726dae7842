"""Every setting of zombied, from one table; one typed configuration per command.

Each `Option` of `OPTIONS` is read from its flag, its environment variable and its
camelCase key in the ``--config`` file (flag > environment > file > default), and every
value given is checked, whichever source wins. The file is decoded with a msgspec schema
made from the table; each of its errors names the path and line. What makes a rule valid
`zombied.rules` decides. Every problem is a one-line `ConfigError` starting with the
option at fault. Nothing here talks to the cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Final

import msgspec
import yaml

from zombied.errors import ConfigError
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


# -- the configurations: one type per command ----------------------------------------


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
    namespace: str | None  # -n: list this namespace only; None: every watched one
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

_DURATION_PART: Final = r"(\d+\.?\d*|\.\d+)(ms|h|m|s)"
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``30s``, ``5m``, ``1h30m`` or plain (fractional) seconds."""
    value = text.strip()
    unsigned = value.removeprefix("-")
    try:
        seconds = float(unsigned)
    except ValueError:
        if not re.fullmatch(f"({_DURATION_PART})+", unsigned):
            raise ValueError(
                f"must be a duration like 500ms, 30s, 5m, 1h30m or seconds, got {text!r}"
            ) from None
        parts = re.findall(_DURATION_PART, unsigned)
        seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
    # "-5s" is a duration, only not one zombied can wait for: say so, not "like 30s".
    if value.startswith("-") or not math.isfinite(seconds):
        raise ValueError(f"must be a duration >= 0, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest duration string `parse_duration` reads back to ``seconds``."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds != int(seconds):
        return f"{seconds:g}s"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)


def _at_least(least: float, why: str = "") -> Callable[[str], float]:
    def parse(text: str) -> float:
        seconds = parse_duration(text)
        if seconds < least:
            raise ValueError(f"must be at least {format_duration(least)}{why}, got {text!r}")
        return seconds

    return parse


def _min_age(text: str) -> float:
    return check_min_age(parse_duration(text))


def _positive(convert: Callable[[str], float], words: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = convert(text.strip())
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"must be {words}, got {text!r}")
        return value

    return parse


def _spelled(words: str, spellings: Mapping[str, Any]) -> Callable[[str], Any]:
    """The value ``text`` spells, in any case: one of ``spellings``."""

    def parse(text: str) -> Any:
        if text.strip().lower() not in spellings:
            raise ValueError(f"must be {words}, got {text!r}")
        return spellings[text.strip().lower()]

    return parse


_boolean: Final = _spelled(
    "true or false",
    dict.fromkeys(("true", "1", "yes", "on"), True)
    | dict.fromkeys(("false", "0", "no", "off"), False),
)
# "none" is kubectl's spelling of off; an environment variable may say true or false.
_dry_run: Final = _spelled(
    "one of client, server, none",
    {"client": DryRun.CLIENT, "true": DryRun.CLIENT, "server": DryRun.SERVER}
    | dict.fromkeys(("none", "false", "off"), DryRun.OFF),
)


def _split(text: str) -> tuple[str, ...]:
    """Comma-separated items, stripped, without empty ones or repeats."""
    return tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


def _namespaces(text: str) -> tuple[str, ...]:
    names = _split(text)
    for name in names:
        if not _DNS_LABEL.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid namespace name")
    return names


def _kinds(text: str) -> tuple[str, ...]:
    return tuple(check_kind(kind) for kind in _split(text))


def _matching(pattern: re.Pattern[str], words: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not pattern.fullmatch(text.strip()):
            raise ValueError(f"must be {words}, got {text!r}")
        return text.strip()

    return parse


_non_empty: Final = _matching(re.compile(r"\S.*", re.DOTALL), "a non-empty string")


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
    """How an option's value is written: as text (flag, environment) and in the file."""

    parse: Callable[[str], Any]
    metavar: str
    file_type: Any = str  # what msgspec decodes from the file, before `parse`
    const: str | None = None  # what the flag alone means; None: it needs a value
    default: str | None = None  # the default of the options that do not give their own


def _one_of(*choices: str, **aliases: str) -> Value:
    """One of ``choices``, in any case, or one of their ``aliases``."""
    spellings = {choice: choice for choice in choices} | aliases
    return Value(_spelled("one of " + ", ".join(choices), spellings), "|".join(choices))


_TEXT: Final = Value(_non_empty, "NAME")
_DURATION: Final = Value(parse_duration, "DURATION", str | float)
_PERIOD: Final = dataclasses.replace(_DURATION, parse=_at_least(0.001))
_MIN_AGE: Final = dataclasses.replace(_DURATION, parse=_min_age)
_NAMESPACE: Final = Value(_matching(_DNS_LABEL, "a valid namespace name"), "NS")
_COUNT: Final = Value(_positive(int, "a whole number >= 1"), "N", int)
_SWITCH: Final = Value(_boolean, "true|false", bool, const="true", default="false")
_NAMES: Final = Value(_namespaces, "NS,...", str | list[str], default="")
_KINDS: Final = dataclasses.replace(_NAMES, parse=_kinds, metavar="KIND,...")
_RATE: Final = Value(_positive(float, "a number > 0"), "QPS", float)
_LISTEN: Final = Value(_listen, "HOST:PORT")
_FORMAT: Final = _one_of("auto", "json", "console")
_DRY_RUN: Final = Value(_dry_run, "client|server|none", bool | str, const="client")
_LEVEL: Final = _one_of("debug", "info", "warning", "error", warn="warning")
_LEASE_NAME: Final = Value(_matching(_DNS_SUBDOMAIN, "a lowercase DNS name"), "NAME")
_WATCH: Final = dataclasses.replace(
    _DURATION, parse=_at_least(1, " (the API counts whole seconds)")
)

_ALL: Final = frozenset(COMMANDS)
_RUN: Final = frozenset({"run"})
_SCAN: Final = frozenset({"scan"})
_DELETING: Final = frozenset({"run", "scan"})
_REPORTING: Final = frozenset({"scan", "explain"})


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


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
        return None if self.flag_only or self.name == "config" else _camel(self.name)

    @property
    def const(self) -> str | None:
        return self.value.const

    def spellings(self) -> tuple[str, ...]:
        return tuple(s for s in (self.short, self.flag, *self.aliases) if s)

    def shown_default(self) -> str:
        return self.shown or self.default or "none"


OPTIONS: Final[tuple[Option, ...]] = (
    Option("config", Value(str, "FILE"), "YAML file of these options (by camelCase key) and rules"),
    Option(
        "kubeconfig",
        Value(_non_empty, "PATH"),
        "kubeconfig file",
        shown="in-cluster service account, else $KUBECONFIG or ~/.kube/config",
    ),
    Option("context", _TEXT, "kubeconfig context", shown="current"),
    Option("namespaces", _NAMES, "comma-separated namespaces zombied works in", shown="all"),
    Option(
        "namespace",
        _NAMESPACE,
        "as in kubectl, the namespace listed or explained; --namespaces still decides what "
        "zombied may delete",
        commands=_REPORTING,
        shown="scan: all; explain: from NS/POD",
        short="-n",
        flag_only=True,
    ),
    Option(
        "all_namespaces",
        _SWITCH,
        "list every namespace of --namespaces (not with -n)",
        commands=_SCAN,
        shown="true without -n",
        short="-A",
        flag_only=True,
    ),
    Option("exclude_namespaces", _NAMES, "comma-separated namespaces whose pods are never touched"),
    Option(
        "label_selector",
        Value(parse_label_selector, "SELECTOR", default=""),
        "only pods matching this selector (a=b, a!=b, a in (x,y), a notin (x), a, !a, a>1)",
        shown="all pods",
        short="-l",
        aliases=("--selector",),
    ),
    Option(
        "rules",
        Value(_rules, "RULE[=AGE],..."),
        f"rules to enable, built-in ({', '.join(RULE_NAMES)}) or the file's; NAME=DURATION "
        "gives one its own min age",
        shown=",".join(DEFAULT_RULES),
    ),
    Option(
        "min_age",
        _MIN_AGE,
        "how long a pod must have been terminal before it is deleted, for rules without their own "
        "(a DURATION is 500ms, 30s, 5m, 1h30m or seconds)",
        format_duration(DEFAULT_MIN_AGE),
    ),
    Option("exclude_owner_kinds", _KINDS, "owner kinds (e.g. Job) whose pods are never touched"),
    Option("qps", _RATE, "pod DELETEs per second at most, fewer after errors", "20", _DELETING),
    Option("burst", _COUNT, "pod DELETE requests allowed back to back", "100", _DELETING),
    Option("max_in_flight", _COUNT, "concurrent DELETE requests", "4", _DELETING),
    Option(
        "dry_run", _DRY_RUN, "log deletes (client) or send them with dryRun=All (server)", "none"
    ),
    Option("listen", _LISTEN, "address of /healthz, /readyz and /metrics", "0.0.0.0:8080", _RUN),
    Option(
        "drain_timeout",
        _DURATION,
        "on SIGTERM, how long to finish due deletes; keep it below the pod's grace period",
        "20s",
        _RUN,
    ),
    Option("log_format", _FORMAT, "auto: console on a terminal, else JSON lines", "auto"),
    Option("log_level", _LEVEL, "minimum level logged", "info"),
    Option(
        "leader_elect", _SWITCH, "elect a leader through a Lease; only it deletes", commands=_RUN
    ),
    Option("lease_name", _LEASE_NAME, "name of the Lease", "zombied", _RUN),
    Option(
        "lease_namespace",
        _NAMESPACE,
        "namespace of the Lease",
        commands=_RUN,
        shown="the namespace zombied runs in (in a cluster), else default",
    ),
    Option("lease_duration", _PERIOD, "how long a Lease is valid without renewal", "15s", _RUN),
    Option(
        "renew_deadline",
        _PERIOD,
        "the leader stops deleting after this long unrenewed",
        "10s",
        _RUN,
    ),
    Option("retry_period", _PERIOD, "interval between Lease acquire/renew attempts", "2s", _RUN),
    Option(
        "watch_timeout",
        _WATCH,
        "watch timeout, at random from this to twice this, once the API server has shown "
        "bookmarks (until then at most 90s)",
        "5m",
        _RUN,
    ),
    Option(
        "output",
        _one_of("table", "wide", "json", "yaml", "name"),
        "report format; wide (scan only) adds phase, termination time and message",
        "table",
        _REPORTING,
        short="-o",
    ),
    Option("no_headers", _SWITCH, "print the table without its header line", commands=_SCAN),
    Option(
        "waiting", _SWITCH, "also list pods that match a rule but are not yet due", commands=_SCAN
    ),
    Option(
        "delete", _SWITCH, "delete the zombies found, once (--dry-run: report them)", commands=_SCAN
    ),
)


def options_for(command: str) -> tuple[Option, ...]:
    """The options that apply to ``command``."""
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r} (choose from {', '.join(COMMANDS)})")
    return tuple(option for option in OPTIONS if command in option.commands)


# -- the command line ------------------------------------------------------------------

#: explain's formats: scan's, but for ``wide`` (explain's table already shows everything).
_EXPLAIN_OUTPUTS: Final = ("table", "json", "yaml", "name")

#: What a flag of another command means here, for the error naming it.
_ELSEWHERE: Final = {
    ("run", "namespace"): "the namespaces run watches are --namespaces NS,...",
    ("run", "all_namespaces"): "run watches every namespace unless --namespaces names some",
    ("explain", "all_namespaces"): "explain reads one pod: POD -n NS, or NS/POD",
}


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser that prints ``zombied COMMAND --help``; `_read_argv` reads the arguments,
    since argparse would take the value of ``--min-age -1s`` for a flag."""
    options = options_for(command)
    parser = argparse.ArgumentParser(
        prog=f"zombied {command}",
        description=COMMANDS[command].capitalize() + ".",
        allow_abbrev=False,
        epilog="Every option but -n and -A can also be set with its environment variable "
        "or in the --config file. Precedence: flag > environment > file > default; an "
        "invalid value is an error wherever it is, even where another source overrides it.",
    )
    if command == "explain":
        parser.add_argument("target", metavar="[NS/]POD", help="the pod to explain")
    for option in options:
        where = f"; env {option.env}" if option.env else ""
        optional: dict[str, Any] = {"nargs": "?", "const": option.const} if option.const else {}
        metavar = option.value.metavar
        if (command, option.name) == ("explain", "output"):
            metavar = "|".join(_EXPLAIN_OUTPUTS)
        parser.add_argument(
            *option.spellings(),
            metavar=metavar,
            help=f"{option.help} (default: {option.shown_default()}{where})",
            **optional,
        )
    return parser


def _read_argv(command: str, argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The flags given (raw text by option name) and the other arguments, as kubectl reads them:
    a flag takes the next argument whatever it looks like (``--min-age -1s``), a flag with an
    optional value (``--dry-run``) only one it accepts (``explain --dry-run NS/POD``)."""
    prog = f"zombied {command}"
    by_spelling = {s: option for option in options_for(command) for s in option.spellings()}
    flags: dict[str, str] = {}
    others: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg == "--":
            others.extend(argv[index:])
            break
        if arg in ("-h", "--help"):
            build_parser(command).print_help()
            raise SystemExit(0)
        if not arg.startswith("-") or arg == "-":
            others.append(arg)
            continue
        spelling, equals, value = arg.partition("=")
        if not arg.startswith("--"):  # -n team-a, -nteam-a, -n=team-a
            spelling, equals, value = arg[:2], "=" if arg[2:] else "", arg[2:].removeprefix("=")
        option = by_spelling.get(spelling)
        if option is None:
            name = next((o.name for o in OPTIONS if spelling in o.spellings()), "")
            hint = _ELSEWHERE.get((command, name))
            raise ConfigError(
                f"{spelling}: unknown option for '{prog}' (see '{prog} --help')"
                + (f"; {hint}" if hint else "")
            )
        if equals:
            flags[option.name] = value
        elif index < len(argv) and (option.const is None or _accepts(option, argv[index])):
            flags[option.name] = argv[index]
            index += 1
        elif option.const is not None:
            flags[option.name] = option.const
        else:
            raise ConfigError(f"{option.flag}: expected one argument")
    return flags, others


def _accepts(option: Option, text: str) -> bool:
    try:
        option.value.parse(text)
    except ValueError:
        return False
    return True


# -- loading ---------------------------------------------------------------------------


def load_config(command: str, argv: Sequence[str], environ: Mapping[str, str]) -> AnyConfig:
    """The configuration of ``zombied COMMAND``, from flags, environment, file, defaults."""
    flags, others = _read_argv(command, argv)
    prog = f"zombied {command}"
    target = others.pop(0) if command == "explain" and others else None
    if others:
        raise ConfigError(f"{others[0]}: unexpected argument for '{prog}' (see '{prog} --help')")
    config_file = flags.get("config", environ.get(ENV_PREFIX + "CONFIG"))
    file = _read_file(config_file) if config_file is not None else _File()
    # Every environment value is checked, for every command: one Deployment's
    # environment may serve several commands.
    from_env = {
        option.name: _parse(option, environ[option.env], f"{option.flag} (from {option.env})")
        for option in OPTIONS
        if option.env is not None and option.env in environ
    }
    given = {o.name: _parse(o, flags[o.name], o.flag) for o in OPTIONS if o.name in flags}
    values: dict[str, Any] = {"config_file": config_file}
    for option in options_for(command):
        sources = (given, from_env, file.values)
        default = None if option.default is None else option.value.parse(option.default)
        values[option.name] = next((s[option.name] for s in sources if option.name in s), default)
    try:
        values["rules"] = build_rules(
            file.rules,
            values["rules"],
            min_age=values["min_age"],
            exclude_owner_kinds=values["exclude_owner_kinds"],
        )
    except RuleError as exc:
        if exc.index is not None:
            raise file.error(f"rules[{exc.index}].{exc.field}", str(exc)) from None
        origin = "--rules" if "rules" in flags else "--rules (from ZOMBIED_RULES)"
        raise ConfigError(f"{origin}: {exc}") from None
    if overlap := [ns for ns in values["exclude_namespaces"] if ns in values["namespaces"]]:
        raise ConfigError(
            f"--exclude-namespaces: {overlap[0]!r} is also listed in --namespaces; "
            "name it in only one of them"
        )
    if command == "run":
        values["listen_host"], values["listen_port"] = values["listen"]
        values["watch_timeout_min"] = values["watch_timeout"]
        values["watch_timeout_max"] = 2 * values["watch_timeout"]
        # client-go's rule: the leader gives up (renew deadline) before anyone else may take
        # over (lease duration), with room for one jittered retry in between.
        lease, deadline = values["lease_duration"], values["renew_deadline"]
        for flag, value, bound, what in (
            ("--lease-duration", lease, deadline, "--renew-deadline"),
            ("--renew-deadline", deadline, 1.2 * values["retry_period"], "1.2 x --retry-period"),
        ):
            if not value > bound:
                raise ConfigError(
                    f"{flag}: must be longer than {what} ({format_duration(bound)}), "
                    f"got {format_duration(value)}"
                )
    if command == "scan" and values["namespace"] is not None and values["all_namespaces"]:
        raise ConfigError("--all-namespaces: cannot be combined with --namespace (-n)")
    if command == "explain":
        values["target"] = _target(target, values["namespace"])
    if command == "explain" and values["output"] not in _EXPLAIN_OUTPUTS:
        raise ConfigError(
            "--output: wide is scan's; explain's table already shows everything "
            f"(choose from {', '.join(_EXPLAIN_OUTPUTS)})"
        )
    cls: type[AnyConfig] = {"run": RunConfig, "scan": ScanConfig, "explain": ExplainConfig}[command]
    return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})


def _parse(option: Option, text: str, origin: str) -> Any:
    try:
        return option.value.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def _target(text: str | None, namespace: str | None) -> tuple[str, str]:
    """The pod ``explain`` reads: ``POD`` in ``-n NS``, or ``NS/POD``."""
    if text is None:
        raise ConfigError("zombied explain: which pod? give POD -n NAMESPACE, or NAMESPACE/POD")
    named, slash, name = text.strip().rpartition("/")
    if not slash and namespace is None:
        raise ConfigError(
            f"zombied explain: which namespace is pod {name!r} in? "
            f"give -n NAMESPACE {name}, or NAMESPACE/{name}"
        )
    if slash and namespace not in (None, named):
        raise ConfigError(
            f"--namespace: {text!r} is in namespace {named}, not {namespace}; "
            "give the namespace once"
        )
    named = named if slash else namespace or ""
    if not (_DNS_LABEL.fullmatch(named) and _DNS_SUBDOMAIN.fullmatch(name)):
        raise ConfigError(
            f"zombied explain: must be POD or NAMESPACE/POD, like team-a/web-0, got {text!r}"
        )
    return named, name


# -- the YAML file ---------------------------------------------------------------------
# PyYAML composes the nodes; a walk over them refuses keys that are not strings or are set
# twice and notes each path's line; msgspec decodes the document and names the path.


class _FileRule(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    name: str
    min_age: str | float | None = None
    phases: tuple[str, ...] | None = None
    reasons: tuple[str, ...] | None = None
    message: str | None = None
    owner_kinds: tuple[str, ...] | None = None


#: The options a file may set, by key; its ``rules`` are rule specs, not ``--rules``.
_FILE_OPTIONS: Final = {o.key: o for o in OPTIONS if o.key is not None and o.name != "rules"}
_FileSchema: Final = msgspec.defstruct(
    "File",
    [(o.name, o.value.file_type | None, None) for o in _FILE_OPTIONS.values()]
    + [("rules", tuple[_FileRule, ...] | None, None)],
    forbid_unknown_fields=True,
    rename="camel",
)
#: msgspec's names of the types a file holds, in the words of its errors.
_TYPE_WORDS: Final = {
    "object": "a mapping",
    "array": "a list",
    "str": "a string",
    "float": "a number",
    "int": "a whole number",
    "bool": "a boolean (true or false)",
}


@dataclass
class _File:
    """What a ``--config`` file sets, and the line of each of its paths."""

    where: str = ""
    lines: dict[str, int] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    rules: list[RuleSpec] = field(default_factory=list)

    def error(self, path: str, problem: str) -> ConfigError:
        """``--config FILE: line N: path: problem``; N is the line of the nearest path written."""
        written = path
        while written and written not in self.lines:
            written = written[: max(written.rfind("."), written.rfind("["), 0)]
        at = f"{path}: " if path else ""
        return ConfigError(f"{self.where}: line {self.lines.get(written, 1)}: {at}{problem}")


def _read_file(path: str) -> _File:
    """Every option the file sets, parsed (those of every command), and its rules."""
    file = _File(f"--config {path}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{file.where}: cannot read the file: {reason}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is None or root.tag == "tag:yaml.org,2002:null":
            # A ConfigMap mounted under the wrong key shows up as an empty file: running
            # with the defaults (every namespace) instead would widen what is deleted.
            raise ConfigError(f"{file.where}: the file sets nothing; give at least one option")
        _walk(file, root, "", set())
        document = yaml.SafeLoader("").construct_document(root)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file.where}: {_yaml_problem(exc)}") from None
    except (ValueError, RecursionError) as exc:  # a date like 2024-13-01, a 5000-digit int
        raise ConfigError(f"{file.where}: not valid YAML: {exc}") from None
    try:
        decoded: Any = msgspec.convert(document, _FileSchema)
    except msgspec.ValidationError as exc:
        raise file.error(*_schema_problem(str(exc))) from None
    for key, option in _FILE_OPTIONS.items():
        value = getattr(decoded, option.name)
        if value is not None:  # `key:` with no value leaves the default
            try:
                file.values[option.name] = option.value.parse(_as_text(value))
            except ValueError as exc:
                raise file.error(key, str(exc)) from None
    for index, rule in enumerate(decoded.rules or ()):
        try:
            min_age = None if rule.min_age is None else _min_age(_as_text(rule.min_age))
        except ValueError as exc:
            raise file.error(f"rules[{index}].minAge", str(exc)) from None
        file.rules.append(
            RuleSpec(rule.name, min_age, rule.phases, rule.reasons, rule.message, rule.owner_kinds)
        )
    return file


def _as_text(value: object) -> str:
    """A decoded file value as the text its flag would take."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # as written: msgspec reads `qps: -1` as -1.0
    return str(value)


def _walk(file: _File, node: yaml.Node, path: str, seen: set[int]) -> None:
    """Note the line of ``path`` and below; keys must be strings, each set once."""
    file.lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in seen:  # aliases share nodes: walk each once
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(file, item, f"{path}[{index}]", seen)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            line = key.start_mark.line + 1
            if not isinstance(key, yaml.ScalarNode) or key.tag != "tag:yaml.org,2002:str":
                what = "field names" if path else "option names"
                raise ConfigError(f"{file.where}: line {line}: keys must be {what}")
            at = f"{path}.{key.value}" if path else key.value
            if at in file.lines:  # PyYAML would keep the last one silently
                raise ConfigError(
                    f"{file.where}: line {line}: {at}: already set on line {file.lines[at]}"
                )
            file.lines[at] = line
            _walk(file, value, at, seen)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``line N: not valid YAML: <problem>`` in one line, whatever PyYAML raised."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    line = f"line {mark.line + 1}: " if mark is not None else ""
    return f"{line}not valid YAML: {' '.join(str(problem).split())}"


def _schema_problem(message: str) -> tuple[str, str]:
    """msgspec's complaint as (path, what is wrong there)."""
    what, _, at = message.partition(" - at `$")
    path = at.removesuffix("`").removeprefix(".")
    field_name = re.search(r"field `([^`]+)`", what)
    if field_name is not None:  # unknown or missing: the path is the field's parent
        path = f"{path}.{field_name[1]}" if path else field_name[1]
        return path, "is required" if what.startswith("Object missing") else _unknown(path)
    types = re.fullmatch(r"Expected `([^`]+)`, got `([^`]+)`", what)
    if types is None:
        return path, what
    expected = [_TYPE_WORDS.get(name, name) for name in types[1].split(" | ") if name != "null"]
    if not path:
        expected = ["a mapping of option names to values"]
    return path, f"must be {' or '.join(expected)}, got {_TYPE_WORDS.get(types[2], types[2])}"


def _unknown(path: str) -> str:
    if path.startswith("rules["):
        return f"unknown field (a rule takes {', '.join(SPEC_FIELDS)})"
    keys = [*_FILE_OPTIONS, "rules"]
    camel = _camel(path.replace("-", "_"))
    if camel in keys and camel != path:
        return f"unknown key; keys are camelCase: {camel}"
    close = difflib.get_close_matches(path, keys, n=1, cutoff=0.8)
    return "unknown key" + (f"; did you mean {close[0]}?" if close else "")
