"""Every setting of zombied, from one table; one typed configuration per command.

`OPTIONS` is the single source of truth: each `Option` names its flag, its environment
variable (``ZOMBIED_<NAME>``), its key in the YAML ``--config`` file (camelCase, as in
Kubernetes objects: ``minAge``, ``excludeNamespaces``), its parser, default, help and
the commands that take it. The argument parsers, the environment lookups and the
file's typed schema are derived from it here; the documentation's reference is
derived from it by the documentation generator, outside the package. Precedence is
flag > environment > file > default, per option, and every value given is checked,
whichever wins and whichever command it serves.

Each command gets a configuration of its own type holding only the options it takes:
`RunConfig`, `ScanConfig`, `ExplainConfig`, on a common base (`CommonConfig`: the
cluster, the scope and the rules, which every command judges pods by). The file is
decoded with a msgspec schema built from the table; a problem names its key path and
line (``line 4: rules[0].minAge: ...``). This module checks shapes and option values
only: what makes a rule valid is decided in `zombied.rules` (`build_rules`), whose
`RuleError` this module places at its line. Every problem becomes a `ConfigError`
whose one line starts with the option at fault, so the CLI prints it and exits 2.
This module reads the file it is pointed at and nothing else; it never talks to the
cluster (the lease namespace default, for one, is resolved by the daemon).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Final, NoReturn

import msgspec
import yaml

from zombied.errors import ConfigError
from zombied.rules import (
    DEFAULT_MIN_AGE,
    DEFAULT_RULES,
    OWN_MIN_AGES,
    RULE_NAMES,
    SPEC_FIELDS,
    RuleError,
    RuleSet,
    RuleSpec,
    Selection,
    build_rules,
    check_kind,
    check_rule_name,
)
from zombied.selector import LabelSelector

__all__ = [
    "COMMANDS",
    "OPTIONS",
    "AnyConfig",
    "CommonConfig",
    "Config",
    "DryRun",
    "ExplainConfig",
    "Option",
    "RunConfig",
    "ScanConfig",
    "build_parser",
    "format_duration",
    "load_config",
    "options_for",
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


# -- the configurations: one type per command ----------------------------------------


@dataclass(frozen=True, kw_only=True)
class CommonConfig:
    """What every command takes: the cluster, the scope zombied works in, the rules.

    There are no defaults here: `load_config` fills every field from the option
    table, the one place a default is written.
    """

    command: ClassVar[str]
    config_file: str | None
    kubeconfig: str | None
    context: str | None
    namespaces: tuple[str, ...]  # the watched scope; empty: every namespace
    exclude_namespaces: tuple[str, ...]
    label_selector: str
    rules: RuleSet
    dry_run: DryRun
    log_format: str
    log_level: str


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

_CONFIG_TYPES: Final[dict[str, type[AnyConfig]]] = {
    "run": RunConfig,
    "scan": ScanConfig,
    "explain": ExplainConfig,
}


# -- value parsers: str -> value, raising ValueError with the text after "--flag: " ----

_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
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
        for match in _DURATION_PART.finditer(value.removeprefix("-")):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
            pos = match.end()
        if pos != len(value.removeprefix("-")) or not value.removeprefix("-"):
            raise ValueError(
                f"must be a duration like 500ms, 30s, 5m, 1h30m or seconds, got {text!r}"
            ) from None
        seconds = -seconds if value.startswith("-") else seconds
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


def _unique(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _namespaces(text: str) -> tuple[str, ...]:
    names = _split(text)
    for name in names:
        if not _DNS_LABEL.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid namespace name")
    return _unique(names)


def _kinds(text: str) -> tuple[str, ...]:
    return _unique([check_kind(kind) for kind in _split(text)])


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


EnabledRules = tuple[tuple[str, float | None], ...]


def _rules(text: str) -> EnabledRules:
    """``node-shutdown,evicted=10m``: rules enabled by name, each with an optional min age.

    Built-in names and the names of rules defined in the ``--config`` file are both
    accepted; which of them exist is checked once the file is read.
    """
    specs: list[tuple[str, float | None]] = []
    for item in _split(text):
        name, sep, age = item.partition("=")
        name = check_rule_name(name.strip())
        if any(name == seen for seen, _ in specs):
            raise ValueError(f"rule {name!r} listed twice")
        specs.append((name, parse_duration(age) if sep else None))
    if not specs:
        raise ValueError("must name at least one rule")
    return tuple(specs)


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


# -- what a value looks like in the file -----------------------------------------------


@dataclass(frozen=True)
class Shape:
    """How an option is written in the YAML file: msgspec's type, and in words."""

    type: Any
    words: str


_DURATION: Final = Shape(str | float, "a duration like 10m")
_NUMBER: Final = Shape(float, "a number")
_COUNT: Final = Shape(int, "a whole number")
_BOOL: Final = Shape(bool, "true or false")
_STRING: Final = Shape(str, "a string")
_NAMES: Final = Shape(str | list[str], "a list of strings (or one comma-separated string)")
_DRY_RUN: Final = Shape(bool | str, "one of client, server, none (or true, false)")


# -- the table -------------------------------------------------------------------------

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
    """One setting: where it can come from, how it is parsed, what it defaults to."""

    name: str  # snake_case; upper-cased, the env var suffix; camelCased, the file key
    parse: Callable[[str], Any]
    default: Any
    help: str
    commands: frozenset[str] = _ALL
    shape: Shape = _STRING
    metavar: str | None = None
    default_text: str | None = None  # how the default reads in --help and the reference
    # A flag given without a value means this; None means a value is required.
    const: str | None = None
    short: str | None = None  # a one-letter alias, kubectl's where there is one
    aliases: tuple[str, ...] = ()  # further long spellings kubectl users type by habit
    # What one invocation is about (-n, -A) rather than a setting: a flag only, never
    # read from the environment or the file.
    flag_only: bool = False

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

    def spellings(self) -> tuple[str, ...]:
        return tuple(s for s in (self.short, self.flag, *self.aliases) if s)

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
        "YAML file setting the options below (all but -n and -A) by their camelCase names "
        "(minAge, excludeNamespaces, …), and rules with their own min ages",
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
        "comma-separated namespaces zombied works in: run watches them, scan lists them and "
        "explain judges a pod by them; empty: every namespace",
        shape=_NAMES,
        metavar="NS,...",
        default_text="all",
    ),
    Option(
        "namespace",
        _dns_label,
        None,
        "as in kubectl, the namespace of the pods listed (scan: one of --namespaces) or of "
        "the pod explained (explain POD -n NS, or explain NS/POD)",
        _REPORTING,
        metavar="NS",
        default_text="scan: all; explain: from NS/POD",
        short="-n",
        flag_only=True,
    ),
    Option(
        "all_namespaces",
        _boolean,
        False,
        "list every namespace of --namespaces, as without -n (kubectl's spelling; "
        "not combinable with -n)",
        _SCAN,
        metavar="true|false",
        default_text="true without -n",
        const="true",
        short="-A",
        flag_only=True,
    ),
    Option(
        "exclude_namespaces",
        _namespaces,
        (),
        "comma-separated namespaces whose pods are never touched",
        shape=_NAMES,
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
        short="-l",
        aliases=("--selector",),
    ),
    Option(
        "rules",
        _rules,
        None,
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
        shape=_DURATION,
        metavar="DURATION",
        default_text=format_duration(DEFAULT_MIN_AGE),
    ),
    Option(
        "exclude_owner_kinds",
        _kinds,
        (),
        "comma-separated owner kinds (e.g. Job) whose pods are never touched; case-insensitive",
        shape=_NAMES,
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
        shape=_NUMBER,
        default_text="20",
    ),
    Option(
        "burst",
        _positive_int,
        100,
        "pod DELETE requests allowed back to back (most of a node's 110 pods at once)",
        _DELETING,
        shape=_COUNT,
    ),
    Option(
        "max_in_flight",
        _positive_int,
        4,
        "concurrent DELETE requests (delete workers)",
        _DELETING,
        shape=_COUNT,
        metavar="N",
    ),
    Option(
        "dry_run",
        _dry_run,
        DryRun.OFF,
        "log what would be deleted (client) or send deletes with dryRun=All (server); "
        "a bare --dry-run means client",
        shape=_DRY_RUN,
        metavar="client|server|none",
        default_text="none",
        const="client",
    ),
    Option(
        "listen",
        _listen,
        ("0.0.0.0", 8080),  # noqa: S104 - every interface: the kubelet probes the pod IP
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
        shape=_DURATION,
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
        shape=_BOOL,
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
        default_text="the namespace zombied runs in (in a cluster), else default",
    ),
    Option(
        "lease_duration",
        _positive_duration,
        15.0,
        "how long a Lease is valid without renewal; standbys take over after it",
        _RUN,
        shape=_DURATION,
        metavar="DURATION",
        default_text="15s",
    ),
    Option(
        "renew_deadline",
        _positive_duration,
        10.0,
        "the leader stops deleting when it could not renew for this long",
        _RUN,
        shape=_DURATION,
        metavar="DURATION",
        default_text="10s",
    ),
    Option(
        "retry_period",
        _positive_duration,
        2.0,
        "interval between Lease acquire/renew attempts",
        _RUN,
        shape=_DURATION,
        metavar="DURATION",
        default_text="2s",
    ),
    Option(
        "watch_timeout",
        _watch_timeout,
        300.0,
        "minimum server-side watch timeout; each watch picks at random up to twice this",
        _RUN,
        shape=_DURATION,
        metavar="DURATION",
        default_text="5m",
    ),
    Option(
        "output",
        _choice("table", "wide", "json", "yaml", "name"),
        "table",
        "report format: a table (wide, scan only: adds phase, termination time and "
        "message), JSON or YAML (camelCase keys, RFC 3339 times), or name: pod/NAME of each "
        "pod zombied would delete now",
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
        shape=_BOOL,
        metavar="true|false",
        const="true",
    ),
    Option(
        "waiting",
        _boolean,
        False,
        "also list the pods that match a rule but are not yet past its min age, with when "
        "they become due; they are never deleted",
        _SCAN,
        shape=_BOOL,
        metavar="true|false",
        const="true",
    ),
    Option(
        "delete",
        _boolean,
        False,
        "delete the zombies found (once); with --dry-run only reports what it would delete",
        _SCAN,
        shape=_BOOL,
        metavar="true|false",
        const="true",
    ),
)

_BY_NAME: Final = {option.name: option for option in OPTIONS}
_BY_KEY: Final = {option.key: option for option in OPTIONS if option.key is not None}


def options_for(command: str) -> tuple[Option, ...]:
    """The options that apply to ``command``."""
    _check_command(command)
    return tuple(option for option in OPTIONS if command in option.commands)


def _check_command(command: str) -> None:
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r} (choose from {', '.join(COMMANDS)})")


# -- argparse --------------------------------------------------------------------------

#: What a flag that another command takes means here, for the error naming it.
_ELSEWHERE: Final = {
    ("run", "-n"): "the namespaces run watches are --namespaces NS,...",
    ("run", "--namespace"): "the namespaces run watches are --namespaces NS,...",
    ("run", "-A"): "run watches every namespace unless --namespaces names some",
    ("run", "--all-namespaces"): "run watches every namespace unless --namespaces names some",
    ("explain", "-A"): "explain reads one pod: POD -n NS, or NS/POD",
    ("explain", "--all-namespaces"): "explain reads one pod: POD -n NS, or NS/POD",
}


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
            if name.startswith("-") and not name.startswith("--"):
                name = name[:2]
            hint = _ELSEWHERE.get((prog.removeprefix("zombied "), name))
            hint = f"; {hint}" if hint else ""
            return f"{name}: unknown option for '{prog}' (see '{prog} --help'){hint}"
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
        epilog="Every option but -n and -A can also be set with its environment variable "
        "or in the --config file. Precedence: flag > environment > file > default; an "
        "invalid value is an error wherever it is, even where another source overrides it.",
    )
    if command == "explain":
        parser.add_argument(
            "target", metavar="[NS/]POD", help="the pod to explain, in -n NS or in NS/"
        )
    for option in options_for(command):
        where = f"; env {option.env}" if option.env else ""
        kwargs: dict[str, Any] = {
            "dest": option.name,
            "metavar": option.metavar or option.name.upper(),
            "help": f"{option.help} (default: {option.shown_default()}{where})",
        }
        if option.const is not None:
            kwargs.update(nargs="?", const=option.const)
        parser.add_argument(*option.spellings(), **kwargs)
    return parser


_DESCRIPTIONS: Final = {
    "run": "Watch the cluster and delete zombie pods (left Failed or Succeeded by a node "
    "shutdown) as soon as they become due.",
    "scan": "List the zombie pods once; with --delete, delete them once.",
    "explain": "Read one pod and explain, rule by rule, whether zombied would delete it, "
    "when, and what stops it. Deletes nothing.",
}


def _normalize(command: str, argv: Sequence[str]) -> list[str]:
    """``argv`` with every value attached to its flag, as kubectl's flag parser reads it.

    A flag that needs a value takes the next argument whatever it looks like
    (``--min-age -1s`` is the value ``-1s``, to be refused by the option itself, not
    by argparse). A flag with an optional value (``--dry-run``) takes the next argument
    only when it is a value the option accepts, so ``explain --dry-run NS/POD`` keeps
    its pod.
    """
    by_spelling = {
        spelling: option for option in options_for(command) for spelling in option.spellings()
    }
    out: list[str] = []
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg[:1] == "-" and arg[2:3] == "=" and arg[:2] in by_spelling:
            arg = arg[:2] + arg[3:]  # -n=team-a, as kubectl takes it
        option = by_spelling.get(arg)
        if arg == "--":
            out.extend(args[index - 1 :])
            break
        if option is None:
            out.append(arg)
            continue
        joined = f"{arg}=" if arg.startswith("--") else arg
        if index < len(args) and (option.const is None or _accepts(option, args[index])):
            out.append(joined + args[index])
            index += 1
        elif option.const is not None:
            out.append(joined + option.const)
        else:
            out.append(arg)  # argparse says the value is missing
    return out


def _accepts(option: Option, text: str) -> bool:
    try:
        option.parse(text)
    except ValueError:
        return False
    return True


# -- loading ---------------------------------------------------------------------------


def load_config(command: str, argv: Sequence[str], environ: Mapping[str, str]) -> AnyConfig:
    """Resolve the configuration of ``zombied COMMAND`` from flags, env, file, defaults.

    Every value given is parsed, whichever source wins: a broken environment variable
    is an error even when a flag overrides it (and a file value even when the
    environment does), so a mistake never waits for the day the override goes away.
    """
    parser = build_parser(command)
    try:
        namespace = parser.parse_args(_normalize(command, argv))
    except argparse.ArgumentError as exc:
        raise ConfigError(_rephrase(str(exc), parser.prog)) from None
    flags: dict[str, str] = vars(namespace)

    config_file = flags.get("config", environ.get(ENV_PREFIX + "CONFIG"))
    document = _read_file(config_file) if config_file is not None else _Document({}, ())
    # Every environment value is checked, for every command: one Deployment's
    # environment may serve several commands, and a typo must not lie in wait.
    env_values = {
        option.name: _parse(option, environ[option.env], f"{option.flag} (from {option.env})")
        for option in OPTIONS
        if option.env is not None and option.name != "config" and option.env in environ
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
        elif option.name in document.values:
            values[option.name] = document.values[option.name]
        else:
            values[option.name] = option.default
    values["config_file"] = config_file
    values["rules"] = _rule_set(values, origins, document)
    return _build(command, values, flags.get("target"))


def _parse(option: Option, text: str, origin: str) -> Any:
    try:
        return option.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def _rule_set(values: Mapping[str, Any], origins: Mapping[str, str], doc: _Document) -> RuleSet:
    """The enabled rules: named by --rules, else listed in the file, else the defaults."""
    enabled: EnabledRules | None = values["rules"] if "rules" in origins else None
    try:
        return build_rules(
            doc.rules,
            enabled,
            min_age=values["min_age"],
            exclude_owner_kinds=values["exclude_owner_kinds"],
            scope=Selection(
                values["namespaces"], values["exclude_namespaces"], values["label_selector"]
            ),
        )
    except RuleError as exc:
        if exc.index is not None:
            path = f"rules[{exc.index}].{exc.field}"
            raise ConfigError(f"{doc.where}: line {doc.line(path)}: {path}: {exc}") from None
        raise ConfigError(f"{origins.get('rules', '--rules')}: {exc}") from None


def _build(command: str, values: dict[str, Any], target: str | None) -> AnyConfig:
    namespaces: tuple[str, ...] = values["namespaces"]
    overlap = [name for name in values["exclude_namespaces"] if name in namespaces]
    if overlap:
        raise ConfigError(
            f"--exclude-namespaces: {overlap[0]!r} is also listed in --namespaces; "
            "name it in only one of them"
        )
    if command == "run":
        values["listen_host"], values["listen_port"] = values["listen"]
        values["watch_timeout_min"] = values["watch_timeout"]
        values["watch_timeout_max"] = 2 * values["watch_timeout"]
    elif command == "scan" and values["namespace"] is not None and values["all_namespaces"]:
        raise ConfigError("--all-namespaces: cannot be combined with --namespace (-n)")
    elif command == "explain":
        values["target"] = _target(target or "", values["namespace"])
        if values["output"] == "wide":
            raise ConfigError(
                "--output: wide is scan's; explain's table already shows everything "
                "(choose from table, json, yaml, name)"
            )
    cls = _CONFIG_TYPES[command]
    config = cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})
    if isinstance(config, RunConfig):
        _check_lease_timing(config)
    return config


def _target(text: str, namespace: str | None) -> tuple[str, str]:
    """The pod ``explain`` reads: ``POD`` in ``-n NS``, or ``NS/POD``."""
    value = text.strip()
    if "/" in value:
        named, _, name = value.partition("/")
        if not _DNS_LABEL.fullmatch(named) or not _DNS_SUBDOMAIN.fullmatch(name):
            raise ConfigError(
                f"zombied explain: must be POD or NAMESPACE/POD, like team-a/web-0, got {text!r}"
            )
        if namespace is not None and namespace != named:
            raise ConfigError(
                f"--namespace: {text!r} is in namespace {named}, not {namespace}; "
                "give the namespace once"
            )
        return named, name
    if not _DNS_SUBDOMAIN.fullmatch(value):
        raise ConfigError(f"zombied explain: must be a pod name, like web-0, got {text!r}")
    if namespace is None:
        raise ConfigError(
            f"zombied explain: which namespace is pod {value!r} in? "
            f"give -n NAMESPACE {value}, or NAMESPACE/{value}"
        )
    return namespace, value


def _check_lease_timing(config: RunConfig) -> None:
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
#
# Three steps: PyYAML composes the node tree (syntax errors, with their line), a walk
# over it checks what PyYAML lets through (keys that are not strings, keys set twice),
# and msgspec decodes the constructed document into a schema generated from the table.
# Each error names a path (``rules[0].minAge``); the node tree turns it into a line.


class _FileRule(msgspec.Struct, forbid_unknown_fields=True, rename="camel", kw_only=True):
    name: str
    min_age: str | float | None = None
    phases: list[str] | None = None
    reasons: list[str] | None = None
    message: str | None = None
    owner_kinds: list[str] | None = None


_FILE_OPTIONS: Final = tuple(o for o in OPTIONS if o.key is not None and o.name != "rules")
_FileSchema: Final = msgspec.defstruct(
    "File",
    [(o.name, o.shape.type | None, None) for o in _FILE_OPTIONS]
    + [("rules", list[_FileRule] | None, None)],
    forbid_unknown_fields=True,
    rename="camel",
    kw_only=True,
)
#: What each path of the file must be, for the errors that say so.
_RULE_WORDS: Final = {
    "name": "a rule name like node-shutdown",
    "minAge": _DURATION.words,
    "phases": "a list of phases (Failed, Succeeded)",
    "reasons": "a list of status.reason strings",
    "message": "a regular expression (a string)",
    "ownerKinds": "a list of kinds like ReplicaSet",
}
_PATH_PART: Final = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_MSGSPEC_ERROR: Final = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$")

PathPart = str | int


@dataclass(frozen=True)
class _Document:
    """The options a file sets (parsed) and its rules, with what locates its errors."""

    values: Mapping[str, Any]
    rules: tuple[RuleSpec, ...]
    where: str = ""
    root: yaml.Node | None = None

    def line(self, path: str) -> int:
        """The line of ``path`` (``rules[0].minAge``), or of its nearest written parent."""
        return _line(self.root, _parse_path(path)) if self.root is not None else 1


def _read_file(path: str) -> _Document:
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
    _check_keys(root, where)
    loader = yaml.SafeLoader("")
    try:
        document = loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: {_yaml_problem(exc)}") from None
    finally:
        loader.dispose()
    try:
        decoded: Any = msgspec.convert(document, _FileSchema)
    except msgspec.ValidationError as exc:
        at, problem = _schema_problem(str(exc), document)
        raise ConfigError(f"{where}: line {_line(root, at)}: {problem}") from None
    values: dict[str, Any] = {}
    for option in _FILE_OPTIONS:
        value = getattr(decoded, option.name)
        if value is None:
            continue  # `key:` with no value leaves the default
        try:
            values[option.name] = option.parse(_as_text(value))
        except ValueError as exc:
            line = _line(root, [option.key or option.name])
            raise ConfigError(f"{where}: line {line}: {option.key}: {exc}") from None
    rules = tuple(
        _rule_spec(rule, f"rules[{index}]", where, root)
        for index, rule in enumerate(decoded.rules or ())
    )
    return _Document(values, rules, where, root)


def _rule_spec(rule: _FileRule, path: str, where: str, root: yaml.Node) -> RuleSpec:
    min_age: float | None = None
    if rule.min_age is not None:
        try:
            min_age = parse_duration(_as_text(rule.min_age))
        except ValueError as exc:
            line = _line(root, _parse_path(f"{path}.minAge"))
            raise ConfigError(f"{where}: line {line}: {path}.minAge: {exc}") from None

    def strings(value: list[str] | None) -> tuple[str, ...] | None:
        return tuple(value) if value is not None else None

    return RuleSpec(
        rule.name,
        min_age,
        strings(rule.phases),
        strings(rule.reasons),
        rule.message,
        strings(rule.owner_kinds),
    )


def _as_text(value: object) -> str:
    """A decoded file value as the string its flag would take."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # as written: msgspec reads `qps: -1` as -1.0
    return str(value)


def _check_keys(root: yaml.Node, where: str) -> None:
    """Keys are strings, each set once, in every mapping (PyYAML keeps the last)."""
    seen: set[int] = set()  # aliases share nodes: visit each once
    pending: list[tuple[yaml.Node, list[PathPart]]] = [(root, [])]
    while pending:
        node, path = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending.extend((item, [*path, index]) for index, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, value in node.value:
                line = key.start_mark.line + 1
                if not isinstance(key, yaml.ScalarNode) or key.tag != "tag:yaml.org,2002:str":
                    what = "option names" if node is root else "field names"
                    raise ConfigError(f"{where}: line {line}: keys must be {what}")
                at = _show_path([*path, key.value])
                if key.value in lines:
                    raise ConfigError(
                        f"{where}: line {line}: {at}: already set on line {lines[key.value]}"
                    )
                lines[key.value] = line
                pending.append((value, [*path, key.value]))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``line N: not valid YAML: <problem>`` in one line, whatever PyYAML raised."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    line = f"line {mark.line + 1}: " if mark is not None else ""
    return f"{line}not valid YAML: {' '.join(str(problem).split())}"


def _parse_path(text: str) -> list[PathPart]:
    """``rules[0].minAge`` (or msgspec's ``.rules[0].minAge``) as ``["rules", 0, "minAge"]``."""
    if not text.startswith((".", "[")):
        text = "." + text
    return [key if key else int(index) for key, index in _PATH_PART.findall(text)]


def _show_path(path: Sequence[PathPart]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)[1:]


def _schema_problem(message: str, document: object) -> tuple[list[PathPart], str]:
    """msgspec's complaint about ``document`` as (path, ``path: what is wrong``)."""
    match = _MSGSPEC_ERROR.match(message)
    what = match.group("what") if match else message
    path: list[PathPart] = _parse_path(match.group("path") or "") if match else []
    field = re.search(r"field `([^`]+)`", what)
    if what.startswith("Object contains unknown field") and field is not None:
        path = [*path, field.group(1)]
        return path, f"{_show_path(path)}: {_unknown(path)}"
    if what.startswith("Object missing required field") and field is not None:
        path = [*path, field.group(1)]
        return path, f"{_show_path(path)}: is required"
    got = _describe(_lookup(document, path))
    words = _words(path)
    if not path:
        return path, f"must be {words}, got {got}"
    return path, f"{_show_path(path)}: must be {words}, got {got}"


def _unknown(path: Sequence[PathPart]) -> str:
    key = str(path[-1])
    if len(path) > 1:
        return f"unknown field (a rule takes {', '.join(SPEC_FIELDS)})"
    camel = _camel(key.replace("-", "_"))
    if camel in _BY_KEY and camel != key:
        return f"unknown key; keys are camelCase: {camel}"
    close = difflib.get_close_matches(key, [*_BY_KEY], n=1, cutoff=0.8)
    return "unknown key" + (f"; did you mean {close[0]}?" if close else "")


def _words(path: Sequence[PathPart]) -> str:
    if not path:
        return "a mapping of option names to values"
    if path[0] == "rules":
        if len(path) == 1:
            return "a list of rules, each a mapping with a name"
        if len(path) == 2:
            return "a mapping with a name (a rule)"
        if len(path) == 3:
            return _RULE_WORDS.get(str(path[2]), "a string")
        return "a string"
    option = _BY_KEY.get(str(path[0]))
    if option is None or len(path) > 1:
        return "a string"
    return option.shape.words


def _lookup(document: object, path: Sequence[PathPart]) -> object:
    for part in path:
        try:
            document = document[part]  # type: ignore[index]
        except (LookupError, TypeError):
            return None
    return document


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _line(root: yaml.Node | None, path: Sequence[PathPart]) -> int:
    """The line of the key (or item) at ``path``; its nearest parent's when not written."""
    if root is None:
        return 1
    line = root.start_mark.line + 1
    node: yaml.Node = root
    for part in path:
        if isinstance(node, yaml.MappingNode):
            entry = next(((k, v) for k, v in node.value if k.value == part), None)
            if entry is None:
                break
            line, node = entry[0].start_mark.line + 1, entry[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
