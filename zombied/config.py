"""Every setting of zombied, from one table, with one-line errors.

`OPTIONS` is the single source of truth: each `Option` names its flag, its
environment variable (``ZOMBIED_<NAME>``), its key in the YAML ``--config`` file, its
parser, default, help text and the commands it applies to. The argument parser, the
environment and file lookups and the README's configuration reference are all
derived from it, so they cannot drift apart. Precedence is flag > environment >
file > default, decided per option. Every problem, whatever its source, becomes a
`ConfigError` whose one-line message starts with the option at fault, so the CLI
can print it and exit 2. This module only reads the file it is pointed at; it
never talks to the cluster (the lease namespace default, for one, is resolved by the
daemon).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, NoReturn

import yaml

from zombied.errors import ConfigError
from zombied.rules import DEFAULT_MIN_AGE, RULE_NAMES, Rule, RuleSet

__all__ = [
    "COMMANDS",
    "OPTIONS",
    "Config",
    "DryRun",
    "Option",
    "build_parser",
    "format_duration",
    "format_reference",
    "load_config",
    "parse_duration",
    "parse_label_selector",
]

COMMANDS: Final = ("run", "scan")
ENV_PREFIX: Final = "ZOMBIED_"


class DryRun(StrEnum):
    """Whether deletes are real, only logged (client) or sent with ``dryRun=All``."""

    OFF = "off"
    CLIENT = "client"
    SERVER = "server"


@dataclass(frozen=True)
class Config:
    """The resolved, validated configuration of one ``zombied`` command."""

    command: str = "run"
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    exclude_namespaces: tuple[str, ...] = ()
    label_selector: str = ""
    rules: RuleSet = field(default_factory=RuleSet)
    qps: float = 5.0
    burst: int = 10
    max_in_flight: int = 4
    dry_run: DryRun = DryRun.OFF
    listen_host: str = "0.0.0.0"  # noqa: S104 - probes and metrics must be reachable in the pod
    listen_port: int = 8080
    drain_timeout: float = 20.0
    log_format: str = "auto"
    log_level: str = "info"
    leader_elect: bool = False
    lease_name: str = "zombied"
    lease_namespace: str | None = None  # None: the pod's own namespace, else "default"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    watch_timeout_min: float = 300.0
    watch_timeout_max: float = 600.0
    output: str = "table"
    delete: bool = False
    config_file: str | None = None


# -- value parsers: str -> value, raising ValueError with the text after "--flag: " ----

_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
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


def _namespaces(text: str) -> tuple[str, ...]:
    names: list[str] = []
    for name in _split(text):
        if not _DNS_LABEL.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid namespace name")
        if name not in names:
            names.append(name)
    return tuple(names)


def _kinds(text: str) -> tuple[str, ...]:
    kinds: list[str] = []
    for kind in _split(text):
        if not _KIND.fullmatch(kind):
            raise ValueError(f"{kind!r} is not a valid kind")
        if kind not in kinds:
            kinds.append(kind)
    return tuple(kinds)


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


def _rules(text: str) -> RuleSpec:
    """``node-shutdown,evicted=10m``: rule names, each with an optional own min age."""
    specs: list[tuple[str, float | None]] = []
    for item in _split(text):
        name, sep, age = item.partition("=")
        name = name.strip()
        if name not in RULE_NAMES:
            raise ValueError(f"unknown rule {name!r} (known: {', '.join(RULE_NAMES)})")
        if any(name == seen for seen, _ in specs):
            raise ValueError(f"rule {name!r} listed twice")
        min_age = parse_duration(age) if sep else None
        specs.append((name, min_age))
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
    """Validate a label selector (=, ==, !=, in, notin, exists, !exists); return it stripped."""
    value = text.strip()
    if not value:
        return ""
    for requirement in _split_requirements(value):
        _check_requirement(requirement)
    return value


def _split_requirements(selector: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in selector:
        if char == "(":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested parentheses in {selector!r}")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in {selector!r}")
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth:
        raise ValueError(f"unbalanced '(' in {selector!r}")
    parts.append("".join(current).strip())
    if any(not part for part in parts):
        raise ValueError(f"empty requirement in {selector!r}")
    return parts


_SET_REQUIREMENT: Final = re.compile(r"(\S+)\s+(in|notin)\s*\((.*)\)")
_EQUALITY_REQUIREMENT: Final = re.compile(r"([^=!\s]+)\s*(==|!=|=)\s*(.*)")


def _check_requirement(requirement: str) -> None:
    if match := _SET_REQUIREMENT.fullmatch(requirement):
        key, _, values = match.groups()
        _check_label_key(key)
        items = [item.strip() for item in values.split(",")]
        if not any(items):
            raise ValueError(f"{requirement!r} needs at least one value")
        for item in items:
            _check_label_value(item)
        return
    if match := _EQUALITY_REQUIREMENT.fullmatch(requirement):
        key, _, item = match.groups()
        _check_label_key(key)
        _check_label_value(item.strip())
        return
    key = requirement[1:].strip() if requirement.startswith("!") else requirement
    if any(c in key for c in "=!()") or any(c.isspace() for c in key):
        raise ValueError(f"cannot parse requirement {requirement!r}")
    _check_label_key(key)


def _check_label_key(key: str) -> None:
    prefix, sep, name = key.rpartition("/")
    if sep and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"invalid label key prefix in {key!r}")
    if not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"invalid label key {key!r}")


def _check_label_value(value: str) -> None:
    if value and not _LABEL_NAME.fullmatch(value):
        raise ValueError(f"invalid label value {value!r}")


def _label_selector(text: str) -> str:
    try:
        return parse_label_selector(text)
    except ValueError as exc:
        raise ValueError(f"invalid label selector: {exc}") from None


# -- the table -------------------------------------------------------------------------

_BOTH: Final = frozenset(COMMANDS)
_RUN: Final = frozenset({"run"})
_SCAN: Final = frozenset({"scan"})


@dataclass(frozen=True)
class Option:
    """One setting: where it can come from, how it is parsed, what it defaults to."""

    name: str  # snake_case; also the YAML key and, upper-cased, the env var suffix
    parse: Callable[[str], Any]
    default: Any
    help: str
    commands: frozenset[str] = _BOTH
    metavar: str | None = None
    default_text: str | None = None  # how the default reads in --help and the README
    # A flag given without a value means this; None means a value is required.
    const: str | None = None

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
        _label_selector,
        "",
        "only pods matching this label selector (=, ==, !=, in, notin, exists, !exists)",
        metavar="SELECTOR",
        default_text="all pods",
    ),
    Option(
        "rules",
        _rules,
        (("node-shutdown", None),),
        f"comma-separated rules ({', '.join(RULE_NAMES)}); NAME=DURATION gives a rule "
        "its own min age",
        metavar="RULE[=AGE],...",
        default_text="node-shutdown",
    ),
    Option(
        "min_age",
        parse_duration,
        DEFAULT_MIN_AGE,
        "how long a pod must have been terminal before it is deleted, for rules "
        "without their own min age (500ms, 30s, 5m, 1h30m or seconds)",
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
        5.0,
        "DELETE requests per second (token bucket rate)",
        default_text="5",
    ),
    Option("burst", _positive_int, 10, "DELETE requests allowed back to back (bucket size)"),
    Option(
        "max_in_flight",
        _positive_int,
        4,
        "concurrent DELETE requests (delete workers)",
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
        _choice("table", "json"),
        "table",
        "report format",
        _SCAN,
        metavar="table|json",
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
        "--config file. Precedence: flag > environment > file > default.",
    )
    for option in options_for(command):
        kwargs: dict[str, Any] = {
            "dest": option.name,
            "metavar": option.metavar or option.name.upper(),
            "help": f"{option.help} (default: {option.shown_default()}; env {option.env})",
        }
        if option.const is not None:
            kwargs.update(nargs="?", const=option.const)
        parser.add_argument(option.flag, **kwargs)
    return parser


_DESCRIPTIONS: Final = {
    "run": "Watch the cluster and delete zombie pods (left Failed or Succeeded by a node "
    "shutdown) as soon as they become due.",
    "scan": "List the zombie pods once; with --delete, delete them once.",
}


# -- loading ---------------------------------------------------------------------------


def load_config(command: str, argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Resolve the configuration of ``zombied COMMAND`` from flags, env, file, defaults."""
    parser = build_parser(command)
    try:
        namespace = parser.parse_args(list(argv))
    except argparse.ArgumentError as exc:
        raise ConfigError(_rephrase(str(exc), parser.prog)) from None
    flags: dict[str, str] = vars(namespace)

    values: dict[str, Any] = {}
    config_file = flags.get("config", environ.get(_BY_NAME["config"].env))
    file_values: dict[str, Any] = {}
    if config_file is not None:
        file_values = _load_file(config_file, command)
    for option in options_for(command):
        if option.name == "config":
            continue
        if option.name in flags:
            values[option.name] = _parse(option, flags[option.name], option.flag)
        elif option.env in environ:
            values[option.name] = _parse(
                option, environ[option.env], f"{option.flag} (from {option.env})"
            )
        elif option.name in file_values:
            values[option.name] = file_values[option.name]
        else:
            values[option.name] = option.default
    return _build(command, values, config_file)


def _parse(option: Option, text: str, origin: str) -> Any:
    try:
        return option.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def _build(command: str, values: Mapping[str, Any], config_file: str | None) -> Config:
    def get(name: str) -> Any:
        # Options of the other command are absent: they read as the table's default.
        return values[name] if name in values else _BY_NAME[name].default

    namespaces: tuple[str, ...] = get("namespaces")
    excluded: tuple[str, ...] = get("exclude_namespaces")
    overlap = [name for name in excluded if name in namespaces]
    if overlap:
        raise ConfigError(
            f"--exclude-namespaces: {overlap[0]!r} is also listed in --namespaces; "
            "name it in only one of them"
        )
    min_age: float = get("min_age")
    rule_specs: RuleSpec = get("rules")
    rules = RuleSet(
        rules=tuple(Rule(name, min_age if age is None else age) for name, age in rule_specs),
        exclude_owner_kinds=frozenset(get("exclude_owner_kinds")),
    )
    host, port = get("listen")
    watch_timeout: float = get("watch_timeout")
    config = Config(
        command=command,
        kubeconfig=get("kubeconfig"),
        context=get("context"),
        namespaces=namespaces,
        exclude_namespaces=excluded,
        label_selector=get("label_selector"),
        rules=rules,
        qps=get("qps"),
        burst=get("burst"),
        max_in_flight=get("max_in_flight"),
        dry_run=get("dry_run"),
        listen_host=host,
        listen_port=port,
        drain_timeout=get("drain_timeout"),
        log_format=get("log_format"),
        log_level=get("log_level"),
        leader_elect=get("leader_elect"),
        lease_name=get("lease_name"),
        lease_namespace=get("lease_namespace"),
        lease_duration=get("lease_duration"),
        renew_deadline=get("renew_deadline"),
        retry_period=get("retry_period"),
        watch_timeout_min=watch_timeout,
        watch_timeout_max=2 * watch_timeout,
        output=get("output"),
        delete=get("delete"),
        config_file=config_file,
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

_RULE_AGE_KEYS: Final = ("minAge", "min_age", "min-age")


def _load_file(path: str, command: str) -> dict[str, Any]:
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
        if command not in option.commands:
            continue  # one file can serve both `run` and `scan`
        raw = _construct(value_node, where)
        if raw is None:
            continue  # `key:` with no value leaves the default
        try:
            if name == "rules":
                values[name] = _file_rules(raw)
            else:
                values[name] = option.parse(_as_text(raw, option))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{prefix}: {key}: {exc}") from None
    return values


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


def _file_rules(value: object) -> RuleSpec:
    """Rules in the file: a string, a list of names or of {name, minAge}, or a mapping."""
    if isinstance(value, str):
        return _rules(value)
    items: list[tuple[object, object]] = []
    if isinstance(value, list):
        for entry in value:
            if isinstance(entry, str):
                items.append((entry, None))
            elif isinstance(entry, dict):
                extra = set(entry) - {"name", *_RULE_AGE_KEYS}
                if extra:
                    raise ValueError(f"unknown key {sorted(map(str, extra))[0]!r} in a rule")
                if "name" not in entry:
                    raise ValueError("every rule needs a name")
                items.append((entry["name"], _rule_age(entry)))
            else:
                raise TypeError(f"each rule must be a name or a mapping, got {_yaml_type(entry)}")
    elif isinstance(value, dict):
        for name, setting in value.items():
            if isinstance(setting, dict):
                extra = set(setting) - set(_RULE_AGE_KEYS)
                if extra:
                    raise ValueError(f"unknown key {sorted(map(str, extra))[0]!r} in rule {name!r}")
                items.append((name, _rule_age(setting)))
            else:
                items.append((name, setting))
    else:
        raise TypeError(f"must be a list or mapping of rules, got {_yaml_type(value)}")
    specs: list[str] = []
    for name, age in items:
        if not isinstance(name, str):
            raise TypeError(f"rule names must be strings, got {_yaml_type(name)}")
        if "=" in name or "," in name:
            raise ValueError(f"unknown rule {name!r} (known: {', '.join(RULE_NAMES)})")
        if age is None:
            specs.append(name)
        elif isinstance(age, str | int | float) and not isinstance(age, bool):
            specs.append(f"{name}={age}")
        else:
            raise ValueError(f"min age of rule {name!r} must be a duration, got {_yaml_type(age)}")
    return _rules(",".join(specs))


def _rule_age(entry: Mapping[object, object]) -> object:
    ages = [entry[key] for key in _RULE_AGE_KEYS if key in entry]
    if len(ages) > 1:
        raise ValueError("a rule's min age is given twice")
    return ages[0] if ages else None


# -- documentation ---------------------------------------------------------------------


def format_reference(options: Iterable[Option] = OPTIONS) -> str:
    """The configuration reference as a markdown table (generated into the README)."""
    lines = [
        "| Flag | Environment | Default | Commands | Description |",
        "|---|---|---|---|---|",
    ]
    for option in options:
        flag = option.flag
        if option.const is not None:
            flag += f"[={option.metavar}]"
        elif option.metavar:
            flag += f" {option.metavar}"
        commands = ", ".join(c for c in COMMANDS if c in option.commands)
        cells = [
            f"`{flag}`",
            f"`{option.env}`",
            option.shown_default(),
            commands,
            option.help,
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
