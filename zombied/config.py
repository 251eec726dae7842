"""Every setting of zombied, from one table, with one-line errors.

`OPTIONS` is the single source of truth: each `Option` names its flag, its
environment variable (``ZOMBIED_<NAME>``), its key in the YAML ``--config`` file, its
parser, default, help text and the commands it applies to. The argument parser, the
environment and file lookups and the README's configuration reference are all
derived from it (the reference by the documentation generator, outside this package),
so they cannot drift apart. Precedence is flag > environment >
file > default, decided per option, but every value given is checked, whichever
wins and whichever command it serves. Rules come in the file as one shape, a list
of ``{name, minAge}`` (a built-in) or ``{name, phases, reasons, message, ownerKinds,
minAge}`` (the operator's own); ``--rules`` enables any of them by name. Every
problem, whatever its source, becomes a `ConfigError` whose one-line message starts
with the option at fault, so the CLI can print it and exit 2. This module only reads
the file it is pointed at; it never talks to the cluster (the lease namespace
default, for one, is resolved by the daemon).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, NoReturn

import yaml

from zombied.errors import ConfigError
from zombied.rules import (
    BUILTIN_RULES,
    DEFAULT_MIN_AGE,
    DEFAULT_RULES,
    OWN_MIN_AGES,
    PHASES,
    RULE_NAMES,
    Pattern,
    Rule,
    RuleSet,
    Selection,
)
from zombied.selector import LabelSelector

__all__ = [
    "COMMANDS",
    "OPTIONS",
    "Config",
    "DryRun",
    "Option",
    "build_parser",
    "format_duration",
    "load_config",
    "parse_duration",
    "parse_label_selector",
]

COMMANDS: Final = ("run", "scan", "explain")
ENV_PREFIX: Final = "ZOMBIED_"


class DryRun(StrEnum):
    """Whether deletes are real, only logged (client) or sent with ``dryRun=All``."""

    OFF = "off"
    CLIENT = "client"
    SERVER = "server"


@dataclass(frozen=True)
class Config:
    """The resolved, validated configuration of one ``zombied`` command.

    There are no defaults here: `load_config` fills every field from the option
    table, the one place a default is written.
    """

    command: str
    config_file: str | None
    target: tuple[str, str] | None  # explain's NAMESPACE/POD
    kubeconfig: str | None
    context: str | None
    namespaces: tuple[str, ...]  # empty: every namespace
    exclude_namespaces: tuple[str, ...]
    label_selector: str
    rules: RuleSet
    qps: float
    burst: int
    max_in_flight: int
    dry_run: DryRun
    listen_host: str
    listen_port: int
    drain_timeout: float
    log_format: str
    log_level: str
    leader_elect: bool
    lease_name: str
    lease_namespace: str | None  # None: the pod's own namespace, else "default"
    lease_duration: float
    renew_deadline: float
    retry_period: float
    watch_timeout_min: float
    watch_timeout_max: float
    output: str
    no_headers: bool
    delete: bool


# -- value parsers: str -> value, raising ValueError with the text after "--flag: " ----

_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_KIND: Final = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``30s``, ``5m``, ``1h30m`` or plain (fractional) seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pos = 0
        seconds = 0.0
        for match in _DURATION_PART.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
            pos = match.end()
        if pos != len(value) or not value:
            raise ValueError(
                f"must be a duration like 500ms, 30s, 5m, 1h30m or seconds, got {text!r}"
            ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"must be a duration >= 0, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest duration string `parse_duration` reads back to ``seconds``."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(hours, "h"), (minutes, "m"), (secs, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n)


def _positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"must be a duration > 0, got {text!r}")
    return seconds


def _watch_timeout(text: str) -> float:
    seconds = parse_duration(text)
    if seconds < 1:
        raise ValueError(f"must be at least 1s (the API counts whole seconds), got {text!r}")
    return seconds


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a number > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"must be a whole number >= 1, got {text!r}")
    return value


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def _non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


def _choice(*choices: str, aliases: Mapping[str, str] | None = None) -> Callable[[str], str]:
    def parse(text: str) -> str:
        lowered = text.strip().lower()
        lowered = (aliases or {}).get(lowered, lowered)
        if lowered not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {text!r}")
        return lowered

    return parse


def _dry_run(text: str) -> DryRun:
    lowered = text.strip().lower()
    aliases = {"none": DryRun.OFF, "off": DryRun.OFF, "false": DryRun.OFF, "true": DryRun.CLIENT}
    if lowered in aliases:
        return aliases[lowered]
    if lowered in (DryRun.CLIENT, DryRun.SERVER):
        return DryRun(lowered)
    raise ValueError(f"must be one of client, server, none, got {text!r}")


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _names(pattern: re.Pattern[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """A parser of comma-separated names, each matching ``pattern``, duplicates dropped."""

    def parse(text: str) -> tuple[str, ...]:
        names: list[str] = []
        for name in _split(text):
            if not pattern.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid {what}")
            if name not in names:
                names.append(name)
        return tuple(names)

    return parse


_namespaces = _names(_DNS_LABEL, "namespace name")
_kinds = _names(_KIND, "kind")


def _dns_label(text: str) -> str:
    value = text.strip()
    if not _DNS_LABEL.fullmatch(value):
        raise ValueError(f"must be a valid namespace name, got {text!r}")
    return value


def _dns_subdomain(text: str) -> str:
    value = text.strip()
    if not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"must be a lowercase DNS name, got {text!r}")
    return value


RuleSpec = tuple[tuple[str, float | None], ...]
_RULE_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _rule_name(name: object) -> str:
    if not isinstance(name, str) or not _RULE_NAME.fullmatch(name):
        raise ValueError(
            f"rule names are lowercase letters, digits and '-' (like node-shutdown), got {name!r}"
        )
    return name


def _rules(text: str) -> RuleSpec:
    """``node-shutdown,evicted=10m``: rules enabled by name, each with an optional min age.

    Built-in names and the names of rules defined in the ``--config`` file are both
    accepted; which of them exist is checked once the file is read.
    """
    specs: list[tuple[str, float | None]] = []
    for item in _split(text):
        name, sep, age = item.partition("=")
        name = _rule_name(name.strip())
        if any(name == seen for seen, _ in specs):
            raise ValueError(f"rule {name!r} listed twice")
        min_age = parse_duration(age) if sep else None
        specs.append((name, min_age))
    if not specs:
        raise ValueError("must name at least one rule")
    return tuple(specs)


def _target(text: str) -> tuple[str, str]:
    namespace, sep, name = text.strip().partition("/")
    if not sep or not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
        raise ValueError(f"must be NAMESPACE/POD, like team-a/web-0, got {text!r}")
    return namespace, name


def _listen(text: str) -> tuple[str, int]:
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if not sep:
        raise ValueError(f"must be HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"IPv6 hosts need brackets, like [::]:8080, got {text!r}")
    if not host:
        host = "0.0.0.0"  # noqa: S104 - ":8080" means every interface, as in Go
    if any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"{host!r} is not a host name or address")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be a number from 0 to 65535, got {port_text!r}")
    return host, port


def parse_label_selector(text: str) -> str:
    """Validate a label selector with the API server's grammar; return it stripped."""
    value = text.strip()
    try:
        LabelSelector.parse(value)
    except ValueError as exc:
        raise ValueError(f"invalid label selector: {exc}") from None
    return value


# -- the table -------------------------------------------------------------------------

_ALL: Final = frozenset(COMMANDS)
_RUN: Final = frozenset({"run"})
_SCAN: Final = frozenset({"scan"})
_DELETING: Final = frozenset({"run", "scan"})
_REPORTING: Final = frozenset({"scan", "explain"})


@dataclass(frozen=True)
class Option:
    """One setting: where it can come from, how it is parsed, what it defaults to."""

    name: str  # snake_case; also the YAML key and, upper-cased, the env var suffix
    parse: Callable[[str], Any]
    default: Any
    help: str
    commands: frozenset[str] = _ALL
    metavar: str | None = None
    default_text: str | None = None  # how the default reads in --help and the README
    # A flag given without a value means this; None means a value is required.
    const: str | None = None
    short: str | None = None  # a one-letter alias, kubectl's where there is one
    aliases: tuple[str, ...] = ()  # further long spellings kubectl users type by habit

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)


OPTIONS: Final[tuple[Option, ...]] = (
    Option(
        "config",
        str,
        None,
        "YAML file setting any option below by name (snake_case or kebab-case keys), "
        "and rules with their own min ages",
        metavar="FILE",
        default_text="none",
    ),
    Option(
        "kubeconfig",
        _non_empty,
        None,
        "kubeconfig file; default: in-cluster service account, else $KUBECONFIG or ~/.kube/config",
        metavar="PATH",
        default_text="auto",
    ),
    Option(
        "context",
        _non_empty,
        None,
        "kubeconfig context",
        metavar="NAME",
        default_text="current",
    ),
    Option(
        "namespaces",
        _namespaces,
        (),
        "comma-separated namespaces to watch (one watch each); empty: all namespaces",
        metavar="NS,...",
        default_text="all",
        short="-n",
        aliases=("--namespace",),
    ),
    Option(
        "all_namespaces",
        _boolean,
        False,
        "every namespace (the default; kubectl's spelling, not combinable with --namespaces)",
        _SCAN,
        metavar="true|false",
        const="true",
        short="-A",
    ),
    Option(
        "exclude_namespaces",
        _namespaces,
        (),
        "comma-separated namespaces whose pods are never touched",
        metavar="NS,...",
        default_text="none",
    ),
    Option(
        "label_selector",
        parse_label_selector,
        "",
        "only pods matching this label selector, in the API server's syntax "
        "(a=b, a!=b, a in (x,y), a notin (x), a, !a, a>1, a<1)",
        metavar="SELECTOR",
        default_text="all pods",
    ),
    Option(
        "rules",
        _rules,
        tuple((name, None) for name in DEFAULT_RULES),
        f"comma-separated rules to enable: built-in ({', '.join(RULE_NAMES)}) or defined "
        "in the --config file; NAME=DURATION gives a rule its own min age",
        metavar="RULE[=AGE],...",
        default_text=",".join(DEFAULT_RULES),
    ),
    Option(
        "min_age",
        parse_duration,
        DEFAULT_MIN_AGE,
        "how long a pod must have been terminal before it is deleted, for rules "
        "without their own min age (500ms, 30s, 5m, 1h30m or seconds); "
        + ", ".join(f"{name} has {format_duration(age)}" for name, age in OWN_MIN_AGES.items()),
        metavar="DURATION",
        default_text=format_duration(DEFAULT_MIN_AGE),
    ),
    Option(
        "exclude_owner_kinds",
        _kinds,
        (),
        "comma-separated owner kinds (e.g. Job) whose pods are never touched; case-insensitive",
        metavar="KIND,...",
        default_text="none",
    ),
    Option(
        "qps",
        _positive_float,
        20.0,
        "pod DELETE requests per second at most; 429s, 5xx and timeouts lower the rate at "
        "once, quiet seconds raise it back. Bounds DELETEs only: Reaped Events have their "
        "own 5/s (excess dropped, counted), the lease renews every --retry-period, watches "
        "are not counted",
        _DELETING,
        default_text="20",
    ),
    Option(
        "burst",
        _positive_int,
        100,
        "pod DELETE requests allowed back to back (most of a node's 110 pods at once)",
        _DELETING,
    ),
    Option(
        "max_in_flight",
        _positive_int,
        4,
        "concurrent DELETE requests (delete workers)",
        _DELETING,
        metavar="N",
    ),
    Option(
        "dry_run",
        _dry_run,
        DryRun.OFF,
        "log what would be deleted (client) or send deletes with dryRun=All (server); "
        "a bare --dry-run means client",
        metavar="client|server|none",
        default_text="none",
        const="client",
    ),
    Option(
        "listen",
        _listen,
        ("0.0.0.0", 8080),  # noqa: S104 - see Config.listen_host
        "HOST:PORT for /healthz, /readyz and /metrics; port 0 picks a free port",
        _RUN,
        metavar="HOST:PORT",
        default_text="0.0.0.0:8080",
    ),
    Option(
        "drain_timeout",
        parse_duration,
        20.0,
        "on SIGTERM, how long to finish due deletes before exiting; keep it below the "
        "pod's terminationGracePeriodSeconds",
        _RUN,
        metavar="DURATION",
        default_text="20s",
    ),
    Option(
        "log_format",
        _choice("auto", "json", "console"),
        "auto",
        "auto: console on a terminal, else JSON lines",
        metavar="auto|json|console",
    ),
    Option(
        "log_level",
        _choice("debug", "info", "warning", "error", aliases={"warn": "warning"}),
        "info",
        "minimum level logged",
        metavar="debug|info|warning|error",
    ),
    Option(
        "leader_elect",
        _boolean,
        False,
        "elect a leader through a coordination.k8s.io Lease; only the leader deletes",
        _RUN,
        metavar="true|false",
        const="true",
    ),
    Option("lease_name", _dns_subdomain, "zombied", "name of the Lease", _RUN, metavar="NAME"),
    Option(
        "lease_namespace",
        _dns_label,
        None,
        "namespace of the Lease",
        _RUN,
        metavar="NS",
        default_text="own namespace, else default",
    ),
    Option(
        "lease_duration",
        _positive_duration,
        15.0,
        "how long a Lease is valid without renewal; standbys take over after it",
        _RUN,
        metavar="DURATION",
        default_text="15s",
    ),
    Option(
        "renew_deadline",
        _positive_duration,
        10.0,
        "the leader stops deleting when it could not renew for this long",
        _RUN,
        metavar="DURATION",
        default_text="10s",
    ),
    Option(
        "retry_period",
        _positive_duration,
        2.0,
        "interval between Lease acquire/renew attempts",
        _RUN,
        metavar="DURATION",
        default_text="2s",
    ),
    Option(
        "watch_timeout",
        _watch_timeout,
        300.0,
        "minimum server-side watch timeout; each watch picks at random up to twice this",
        _RUN,
        metavar="DURATION",
        default_text="5m",
    ),
    Option(
        "output",
        _choice("table", "wide", "json", "yaml", "name"),
        "table",
        "report format: a table (wide: scan adds phase, termination time and message), JSON "
        "or YAML, or pod/NAME lines",
        _REPORTING,
        metavar="table|wide|json|yaml|name",
        short="-o",
    ),
    Option(
        "no_headers",
        _boolean,
        False,
        "print the table without its header line",
        _SCAN,
        metavar="true|false",
        const="true",
    ),
    Option(
        "delete",
        _boolean,
        False,
        "delete the zombies found (once); with --dry-run only reports what it would delete",
        _SCAN,
        metavar="true|false",
        const="true",
    ),
)

_BY_NAME: Final = {option.name: option for option in OPTIONS}


def options_for(command: str) -> tuple[Option, ...]:
    """The options that apply to ``command``."""
    _check_command(command)
    return tuple(option for option in OPTIONS if command in option.commands)


def _check_command(command: str) -> None:
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r} (choose from {', '.join(COMMANDS)})")


# -- argparse --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports problems as `ConfigError` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(_rephrase(message, self.prog))


def _rephrase(message: str, prog: str) -> str:
    if message.startswith("argument "):
        # "argument --qps: expected one argument" -> "--qps: expected one argument"
        flags, _, rest = message[len("argument ") :].partition(": ")
        return f"{flags.split('/')[-1]}: {rest}"
    if message.startswith("unrecognized arguments: "):
        first = message[len("unrecognized arguments: ") :].split(maxsplit=1)[0]
        name = first.split("=", 1)[0]
        if name.startswith("-"):
            return f"{name}: unknown option for '{prog}' (see '{prog} --help')"
        return f"{first}: unexpected argument for '{prog}' (see '{prog} --help')"
    return f"{prog}: {message}"


def build_parser(command: str) -> argparse.ArgumentParser:
    """The argument parser of ``zombied COMMAND``; every error raises `ConfigError`.

    Values are kept as given (strings); an option not on the command line is absent
    from the namespace, so the environment and the file can fill it in.
    """
    _check_command(command)
    parser = _Parser(
        prog=f"zombied {command}",
        description=_DESCRIPTIONS[command],
        argument_default=argparse.SUPPRESS,
        allow_abbrev=False,
        exit_on_error=False,
        epilog="Every option can also be set with its environment variable or in the "
        "--config file. Precedence: flag > environment > file > default; an invalid value "
        "is an error wherever it is, even where another source overrides it.",
    )
    if command == "explain":
        parser.add_argument("target", metavar="NAMESPACE/POD", help="the pod to explain")
    for option in options_for(command):
        kwargs: dict[str, Any] = {
            "dest": option.name,
            "metavar": option.metavar or option.name.upper(),
            "help": f"{option.help} (default: {option.shown_default()}; env {option.env})",
        }
        if option.const is not None:
            kwargs.update(nargs="?", const=option.const)
        flags = (option.short, option.flag) if option.short else (option.flag,)
        parser.add_argument(*flags, *option.aliases, **kwargs)
    return parser


_DESCRIPTIONS: Final = {
    "run": "Watch the cluster and delete zombie pods (left Failed or Succeeded by a node "
    "shutdown) as soon as they become due.",
    "scan": "List the zombie pods once; with --delete, delete them once.",
    "explain": "Read one pod and explain, rule by rule, whether zombied would delete it, "
    "when, and what stops it. Deletes nothing.",
}


# -- loading ---------------------------------------------------------------------------


def load_config(command: str, argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Resolve the configuration of ``zombied COMMAND`` from flags, env, file, defaults.

    Every value given is parsed, whichever source wins: a broken environment variable
    is an error even when a flag overrides it (and a file value even when the
    environment does), so a mistake never waits for the day the override goes away.
    """
    parser = build_parser(command)
    try:
        namespace = parser.parse_args(list(argv))
    except argparse.ArgumentError as exc:
        raise ConfigError(_rephrase(str(exc), parser.prog)) from None
    flags: dict[str, str] = vars(namespace)

    config_file = flags.get("config", environ.get(_BY_NAME["config"].env))
    file_values: dict[str, Any] = {}
    rule_defs: tuple[_RuleDef, ...] = ()
    if config_file is not None:
        file_values, rule_defs = _load_file(config_file)
    # Every environment value is checked, for every command: one Deployment's
    # environment may serve several commands, and a typo must not lie in wait.
    env_values = {
        option.name: _parse(option, environ[option.env], f"{option.flag} (from {option.env})")
        for option in OPTIONS
        if option.name != "config" and option.env in environ
    }
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for option in options_for(command):
        if option.name in flags and option.name != "config":
            values[option.name] = _parse(option, flags[option.name], option.flag)
            origins[option.name] = option.flag
        elif option.name in env_values:
            values[option.name] = env_values[option.name]
            origins[option.name] = f"{option.flag} (from {option.env})"
        elif option.name in file_values:
            values[option.name] = file_values[option.name]
            origins[option.name] = f"--config {config_file}"
        else:
            values[option.name] = option.default
    if command == "explain":
        try:
            values["target"] = _target(flags["target"])
        except ValueError as exc:
            raise ConfigError(f"zombied explain: {exc}") from None
    values["rules"] = _rule_set(values, origins, rule_defs, config_file)
    values["config_file"] = config_file
    return _build(command, values)


def _parse(option: Option, text: str, origin: str) -> Any:
    try:
        return option.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def _rule_set(
    values: Mapping[str, Any],
    origins: Mapping[str, str],
    defined: Sequence[_RuleDef],
    config_file: str | None,
) -> RuleSet:
    """The enabled rules: named by --rules, else listed in the file, else the defaults."""
    by_name = {rule.name: rule for rule in defined}
    min_age: float = values["min_age"]
    enabled: RuleSpec
    if "rules" in origins and not origins["rules"].startswith("--config"):
        enabled, origin = values["rules"], origins["rules"]
    elif defined:
        enabled, origin = tuple((rule.name, None) for rule in defined), f"--config {config_file}"
    else:
        enabled, origin = values["rules"], "--rules"
    rules: list[Rule] = []
    for name, given in enabled:
        definition = by_name.get(name)
        if definition is None and name not in BUILTIN_RULES:
            where = f"; the file defines {', '.join(by_name)}" if by_name else ""
            raise ConfigError(
                f"{origin}: unknown rule {name!r}: a built-in ({', '.join(RULE_NAMES)}) or a "
                f"rule with reasons in the --config file's rules{where}"
            )
        age = given if given is not None else definition.min_age if definition else None
        if age is None:
            age = OWN_MIN_AGES.get(name, min_age)
        rules.append(Rule(name, age, definition.pattern if definition else None))
    scope = Selection(values["namespaces"], values["exclude_namespaces"], values["label_selector"])
    return RuleSet(tuple(rules), frozenset(values["exclude_owner_kinds"]), scope)


_DERIVED: Final = frozenset(
    {"listen", "watch_timeout", "min_age", "exclude_owner_kinds", "all_namespaces"}
)


def _build(command: str, values: Mapping[str, Any]) -> Config:
    def get(name: str) -> Any:
        # Options of other commands are absent: they read as the table's default.
        return values[name] if name in values else _BY_NAME[name].default

    namespaces: tuple[str, ...] = get("namespaces")
    excluded: tuple[str, ...] = get("exclude_namespaces")
    if namespaces and get("all_namespaces"):
        raise ConfigError("--all-namespaces: cannot be combined with --namespaces (-n)")
    overlap = [name for name in excluded if name in namespaces]
    if overlap:
        raise ConfigError(
            f"--exclude-namespaces: {overlap[0]!r} is also listed in --namespaces; "
            "name it in only one of them"
        )
    host, port = get("listen")
    watch_timeout: float = get("watch_timeout")
    # Options named like a field fill it as they are; the rest are derived below.
    fields = {
        option.name: get(option.name)
        for option in OPTIONS
        if option.name not in _DERIVED and option.name not in ("config", "rules")
    }
    config = Config(
        command=command,
        config_file=values["config_file"],
        target=values.get("target"),
        rules=values["rules"],
        listen_host=host,
        listen_port=port,
        watch_timeout_min=watch_timeout,
        watch_timeout_max=2 * watch_timeout,
        **fields,
    )
    if command == "run":
        _check_lease_timing(config)
    return config


def _check_lease_timing(config: Config) -> None:
    # client-go's rule: the leader must give up (renew deadline) before anyone else
    # may take over (lease duration), with room for one jittered retry in between.
    if not config.lease_duration > config.renew_deadline:
        raise ConfigError(
            f"--lease-duration: must be longer than --renew-deadline "
            f"({format_duration(config.renew_deadline)}), "
            f"got {format_duration(config.lease_duration)}"
        )
    if not config.renew_deadline > 1.2 * config.retry_period:
        raise ConfigError(
            f"--renew-deadline: must be longer than 1.2 x --retry-period "
            f"({format_duration(1.2 * config.retry_period)}), "
            f"got {format_duration(config.renew_deadline)}"
        )


# -- the YAML file ---------------------------------------------------------------------


@dataclass(frozen=True)
class _RuleDef:
    """A rule as the file lists it: a built-in by name, or one of the operator's own."""

    name: str
    min_age: float | None
    pattern: Pattern | None


def _load_file(path: str) -> tuple[dict[str, Any], tuple[_RuleDef, ...]]:
    """Every option the file sets, parsed, and its rules; options of every command."""
    where = f"--config {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{where}: cannot read the file: {reason}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: {_yaml_problem(exc)}") from None
    if root is None or root.tag == "tag:yaml.org,2002:null":
        # A ConfigMap mounted under the wrong key shows up as an empty file: running
        # with the defaults (every namespace) instead would widen what zombied deletes.
        raise ConfigError(f"{where}: the file sets nothing; give at least one option")
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(
            f"{where}: line {root.start_mark.line + 1}: must be a mapping of option names to values"
        )
    values: dict[str, Any] = {}
    rules: tuple[_RuleDef, ...] = ()
    seen: dict[str, int] = {}
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        prefix = f"{where}: line {line}"
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{prefix}: keys must be option names")
        name = key.replace("-", "_")
        option = _BY_NAME.get(name)
        if option is None or name == "config":
            raise ConfigError(f"{prefix}: unknown key {key!r}")
        if name in seen:
            raise ConfigError(f"{prefix}: {key!r} is already set on line {seen[name]}")
        seen[name] = line
        if name == "rules":
            if value_node.tag != "tag:yaml.org,2002:null":  # `rules:` alone: the default
                rules = _file_rules(value_node, where)
            continue
        raw = _construct(value_node, where)
        if raw is None:
            continue  # `key:` with no value leaves the default
        try:
            values[name] = option.parse(_as_text(raw, option))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{prefix}: {key}: {exc}") from None
    return values, rules


def _construct(node: yaml.Node, where: str) -> object:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: {_yaml_problem(exc)}") from None
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``line N: not valid YAML: <problem>`` in one line, whatever PyYAML raised."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    line = f"line {mark.line + 1}: " if mark is not None else ""
    return f"{line}not valid YAML: {' '.join(str(problem).split())}"


def _as_text(value: object, option: Option) -> str:
    """A YAML value as the string its flag would take; rejects the wrong shapes."""
    if isinstance(value, bool):
        if option.parse not in (_boolean, _dry_run):
            raise ValueError(f"must be a {_shape(option)}, got a boolean")
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list) and option.name in _LIST_OPTIONS:
        if not all(isinstance(item, str) for item in value):
            raise ValueError("must be a list of strings")
        return ",".join(value)
    raise ValueError(f"must be a {_shape(option)}, got {_yaml_type(value)}")


_LIST_OPTIONS: Final = frozenset({"namespaces", "exclude_namespaces", "exclude_owner_kinds"})


def _shape(option: Option) -> str:
    return "string or a list of strings" if option.name in _LIST_OPTIONS else "single value"


def _yaml_type(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


_RULE_KEYS: Final = ("name", "minAge", "phases", "reasons", "message", "ownerKinds")


def _file_rules(node: yaml.Node, where: str) -> tuple[_RuleDef, ...]:
    """``rules:``, a list of ``{name, minAge}`` (built-in) or ``{name, phases, reasons,
    message, ownerKinds, minAge}`` (the operator's own); errors name the rule and field."""
    if not isinstance(node, yaml.SequenceNode):
        raise ConfigError(
            f"{where}: line {node.start_mark.line + 1}: rules: must be a list of rules, "
            "each a mapping with a name"
        )
    rules: list[_RuleDef] = []
    lines: dict[str, int] = {}
    for item in node.value:
        line = item.start_mark.line + 1
        entry = _construct(item, where)
        prefix = f"{where}: line {line}: rules"
        if not isinstance(entry, dict):
            raise ConfigError(f"{prefix}: each rule must be a mapping with a name")
        try:
            name = _rule_name(entry.get("name"))
        except ValueError as exc:
            raise ConfigError(f"{prefix}: name: {exc}") from None
        prefix = f"{prefix}: rule {name!r}"
        if name in lines:
            raise ConfigError(f"{prefix}: name: already defined on line {lines[name]}")
        lines[name] = line
        try:
            rules.append(_file_rule(name, entry))
        except _FieldError as exc:
            # Point at the field's own line when it is written out.
            field_line = next(
                (
                    key.start_mark.line + 1
                    for key, _ in item.value
                    if isinstance(key, yaml.ScalarNode) and key.value == exc.field
                ),
                line,
            )
            prefix = prefix.replace(f": line {line}: ", f": line {field_line}: ", 1)
            raise ConfigError(f"{prefix}: {exc.field}: {exc}") from None
    return tuple(rules)


class _FieldError(ValueError):
    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


def _file_rule(name: str, entry: Mapping[object, object]) -> _RuleDef:
    for key in entry:
        if key not in _RULE_KEYS:
            raise _FieldError(str(key), f"unknown field (rules take {', '.join(_RULE_KEYS)})")
    min_age: float | None = None
    if entry.get("minAge") is not None:
        age = entry["minAge"]
        if isinstance(age, bool) or not isinstance(age, str | int | float):
            raise _FieldError("minAge", f"must be a duration like 10m, got {_yaml_type(age)}")
        try:
            min_age = parse_duration(str(age))
        except ValueError as exc:
            raise _FieldError("minAge", str(exc)) from None
    pattern_keys = [key for key in _RULE_KEYS[2:] if key in entry]
    if "reasons" not in entry:
        if name not in BUILTIN_RULES:
            raise _FieldError(
                "reasons",
                f"a rule of your own needs reasons (built-in rules: {', '.join(RULE_NAMES)})",
            )
        if pattern_keys:
            raise _FieldError(pattern_keys[0], "a built-in rule takes only minAge")
        return _RuleDef(name, min_age, None)
    if name in BUILTIN_RULES:
        raise _FieldError("name", "is a built-in rule; give your own rule another name")
    phases = _string_list(entry, "phases", required=True)
    unknown = [phase for phase in phases if phase not in PHASES]
    if unknown:
        raise _FieldError("phases", f"unknown phase {unknown[0]!r} (known: {', '.join(PHASES)})")
    reasons = _string_list(entry, "reasons", required=True)
    message = entry.get("message")
    compiled: re.Pattern[str] | None = None
    if message is not None:
        if not isinstance(message, str) or not message:
            raise _FieldError("message", "must be a regular expression (a non-empty string)")
        try:
            compiled = re.compile(message)
        except re.error as exc:
            raise _FieldError("message", f"not a valid regular expression: {exc}") from None
    kinds = _string_list(entry, "ownerKinds", required=False)
    for kind in kinds:
        if not _KIND.fullmatch(kind):
            raise _FieldError("ownerKinds", f"{kind!r} is not a valid kind")
    try:
        pattern = Pattern(frozenset(phases), frozenset(reasons), None, compiled, frozenset(kinds))
    except ValueError as exc:
        field_name, _, text = str(exc).partition(": ")
        raise _FieldError(field_name, text) from None
    return _RuleDef(name, min_age, pattern)


def _string_list(entry: Mapping[object, object], key: str, *, required: bool) -> list[str]:
    value = entry.get(key)
    if value is None:
        if required:
            raise _FieldError(key, "is required: a list of strings")
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _FieldError(key, f"must be a list of non-empty strings, got {_yaml_type(value)}")
    if required and not value:
        raise _FieldError(key, "must not be empty")
    return list(value)
