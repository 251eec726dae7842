"""Every setting of zombied, from one table, and the configuration a command runs with.

The table is the pydantic model `Options`: a field per option, whose type checks its
value and whose `Option` says how it is given: a flag, an environment variable and a
camelCase key of the ``--config`` file (flag > environment > file > default). Every
value given is checked, whichever source wins; argparse reads the command line. A
command runs with a `Config`: its options, with the rules they enable built. Every
problem is a `ConfigError` naming the option, its source and, in a file, the line.
What makes a rule valid `zombied.rules` decides; which Lease timings are consistent
is decided here, for the elector too. It reads files, never the cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, Literal, NoReturn

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
    RuleError,
    RuleSet,
    RuleSpec,
    Selection,
    build_rules,
    check_kind,
    check_min_age,
)
from zombied.selector import DNS_LABEL, DNS_SUBDOMAIN, LabelSelector

#: The commands that take options, and what each does.
COMMANDS: Final = {
    "run": "watch the cluster and delete zombie pods as they become due",
    "scan": "list the zombie pods once (and with --delete, delete them once)",
    "explain": "explain rule by rule whether and when zombied would delete one pod",
}


class DryRun(StrEnum):
    """Whether deletes are real, only logged (client) or sent with ``dryRun=All``."""

    OFF = "off"
    CLIENT = "client"
    SERVER = "server"


# -- values: pydantic types, read from text (flags, environment, file) or YAML ---------

_LISTEN: Final = re.compile(r"(?P<host>\[[^]\s/]*]|[^][:\s/]*):(?P<port>[0-9]{1,5})", re.ASCII)


def _from_text(parse: Callable[[str], Any]) -> Any:
    """Text parsed by ``parse``; other input is left to the type, which refuses it."""
    return pydantic.BeforeValidator(lambda v: parse(v.strip()) if isinstance(v, str) else v)


def _check(test: Callable[[Any], object], problem: str) -> Any:
    """The value, if ``test`` holds for it; else ``problem`` (``{}``: the value)."""

    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError(problem.format(value))
        return value

    return pydantic.AfterValidator(check)


def _items(value: Any) -> Any:
    """Comma-separated text, or a YAML list: the items stripped, without empty ones or repeats."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, list) and all(isinstance(item, str) for item in items):
        return list(dict.fromkeys(item.strip() for item in items if item.strip()))
    return value


def _enabled_rules(text: str) -> tuple[tuple[str, float | None], ...]:
    """``node-shutdown,evicted=10m``: rules by name, each with an optional min age; which
    names exist, and that each is named once, `build_rules` decides."""
    items = [item.partition("=") for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("must name at least one rule")
    return tuple(
        (name.strip(), check_min_age(parse_duration(age)) if sep else None)
        for name, sep, age in items
    )


def _listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, or ``:PORT`` for every interface, as in Go."""
    address = _LISTEN.fullmatch(text)
    if address is None or int(address["port"]) > 65535:
        raise ValueError(f"must be HOST:PORT ([IPv6]:PORT), a port from 0 to 65535, got {text!r}")
    host = address["host"].strip("[]") or "0.0.0.0"  # noqa: S104 - ":8080": every interface
    return host, int(address["port"])


def _selector(text: str) -> str:
    LabelSelector.parse(text)  # ValueError: what is wrong, in the API server's words
    return text


def _lowered(**aliases: str) -> Any:
    return _from_text(lambda text: aliases.get(text.lower(), text.lower()))


def _at_least(least: float) -> Any:
    return _check(lambda seconds: seconds >= least, f"must be at least {format_duration(least)}")


Text = Annotated[str, pydantic.StringConstraints(min_length=1)]
Count = Annotated[int, pydantic.Field(ge=1)]
Duration = Annotated[float, pydantic.Strict(), _from_text(parse_duration)]
Period = Annotated[Duration, _at_least(0.001)]
Namespace = Annotated[str, _check(DNS_LABEL.fullmatch, "{!r} is not a valid namespace name")]
Items = pydantic.BeforeValidator(_items)
Namespaces = Annotated[tuple[Namespace, ...], Items]
Kinds = Annotated[tuple[Annotated[str, pydantic.AfterValidator(check_kind)], ...], Items]
MinAge = Annotated[Duration, pydantic.AfterValidator(check_min_age)]
Selector = Annotated[str, pydantic.AfterValidator(_selector)]


# -- the table -------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """How an option is given: help, the value's name, its default as a flag would give
    it, the commands it serves; its `name` is its field's in `Options`."""

    help: str
    metavar: str
    default: str | None = None  # None: unset unless given
    commands: tuple[str, ...] = tuple(COMMANDS)
    shown: str | None = None  # the default in --help and the reference (given: when not itself)
    short: str | None = None  # kubectl's one-letter alias, where it has one
    aliases: tuple[str, ...] = ()  # further long spellings kubectl users type by habit
    const: str | None = None  # what the flag alone means; None: it needs a value
    flag_only: bool = False  # what one invocation is about (-n, -A): never env or file
    name: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str | None:
        return None if self.flag_only else "ZOMBIED_" + self.name.upper()

    def spellings(self) -> tuple[str, ...]:
        return tuple(s for s in (self.short, self.flag, *self.aliases) if s)


def _switch(text: str, commands: tuple[str, ...], **more: Any) -> Option:
    return Option(text, "true|false", "false", commands, const="true", **more)


#: client-go's JitterFactor: a Lease attempt waits a retry period plus up to this many more.
LEASE_JITTER: Final = 1.2

_DELETING: Final = ("run", "scan")
_REPORTING: Final = ("scan", "explain")


# fmt: off
class Options(pydantic.BaseModel, frozen=True, str_strip_whitespace=True):
    """Every option: its field's type checks its value, its `Option` says how it is given."""

    config: Annotated[str | None, Option(
        "YAML file of these options (by camelCase key) and rules", "FILE")] = None
    kubeconfig: Annotated[Text | None, Option("kubeconfig file", "PATH",
        shown="in-cluster service account, else $KUBECONFIG or ~/.kube/config")] = None
    context: Annotated[Text | None, Option("kubeconfig context", "NAME", shown="current")] = None
    namespaces: Annotated[Namespaces, _check(len, "must name a namespace; to work in every "
        "one, leave it unset"), Option("comma-separated namespaces zombied works in",
        "NS,...", shown="all")] = ()
    namespace: Annotated[Namespace | None, Option("as in kubectl, the namespace listed or "
        "explained; --namespaces still decides what zombied may delete", "NS", None,
        _REPORTING, "the kubeconfig context's, as in kubectl", "-n", flag_only=True)] = None
    all_namespaces: Annotated[bool, _switch("list every namespace zombied works in (not "
        "with -n)", ("scan",), short="-A", flag_only=True)]
    exclude_namespaces: Annotated[Namespaces, Option(
        "comma-separated namespaces whose pods are never touched", "NS,...", "")]
    label_selector: Annotated[Selector, Option("only pods matching this selector (a=b, "
        "a!=b, a in (x,y), a notin (x), a, !a, a>1)", "SELECTOR", "", shown="all pods",
        short="-l", aliases=("--selector",))]
    rules: Annotated[tuple[tuple[str, float | None], ...] | None, _from_text(_enabled_rules),
        Option(f"rules to enable, built-in ({', '.join(RULE_NAMES)}) or the file's; "
        "NAME=DURATION gives one its own min age", "RULE[=AGE],...",
        shown=",".join(DEFAULT_RULES))] = None
    min_age: Annotated[MinAge, Option("how long a pod must have been "
        "terminal before it is deleted, for rules without their own (a DURATION is 500ms, "
        "30s, 5m, 1h30m or seconds)", "DURATION", format_duration(DEFAULT_MIN_AGE))]
    exclude_owner_kinds: Annotated[Kinds, Option(
        "owner kinds (e.g. Job, ReplicaSet) whose pods are never touched", "KIND,...", "")]
    qps: Annotated[float, pydantic.Field(gt=0, allow_inf_nan=False), Option(
        "pod DELETEs per second at most, fewer after errors", "QPS", "20", _DELETING)]
    burst: Annotated[Count, Option(
        "pod DELETE requests allowed back to back", "N", "100", _DELETING)]
    max_in_flight: Annotated[Count, Option("concurrent DELETE requests", "N", "4", _DELETING)]
    dry_run: Annotated[DryRun, _lowered(none="off", false="off", true="client"), Option(
        "log deletes (client) or send them with dryRun=All (server)", "client|server|none",
        "none", const="client")]
    listen: Annotated[tuple[str, int], _from_text(_listen), Option(
        "address of /healthz, /readyz and /metrics", "HOST:PORT", "0.0.0.0:8080", ("run",))]
    drain_timeout: Annotated[Duration, Option("on SIGTERM, how long to finish due deletes; "
        "keep it below the pod's grace period", "DURATION", "20s", ("run",))]
    log_format: Annotated[Literal["auto", "json", "console"], _lowered(), Option(
        "auto: console on a terminal, else JSON lines", "auto|json|console", "auto")]
    log_level: Annotated[Literal["debug", "info", "warning", "error"], _lowered(warn="warning"),
        Option("minimum level logged", "debug|info|warning|error", "info")]
    leader_elect: Annotated[bool, _switch(
        "elect a leader through a Lease; only it deletes", ("run",))]
    lease_name: Annotated[str, _check(DNS_SUBDOMAIN.fullmatch, "{!r} is not a lowercase DNS "
        "name"), Option("name of the Lease", "NAME", "zombied", ("run",))]
    lease_namespace: Annotated[Namespace | None, Option("namespace of the Lease", "NS", None,
        ("run",), "the namespace zombied runs in (in a cluster), else default")] = None
    lease_duration: Annotated[Period, Option(
        "how long a Lease is valid without renewal", "DURATION", "15s", ("run",))]
    renew_deadline: Annotated[Period, Option(
        "the leader stops deleting after this long unrenewed", "DURATION", "10s", ("run",))]
    retry_period: Annotated[Period, Option(
        "interval between Lease acquire/renew attempts", "DURATION", "2s", ("run",))]
    watch_timeout: Annotated[Duration, _at_least(1), Option("watch timeout, at random from "
        "this to twice this, once the API server has shown bookmarks (until then at most "
        "90s)", "DURATION", "5m", ("run",))]
    output: Annotated[Literal["table", "wide", "json", "yaml", "name"], _lowered(), Option(
        "report format; wide (scan only) adds phase, termination time and message",
        "table|wide|json|yaml|name", "table", _REPORTING, short="-o")]
    no_headers: Annotated[bool, _switch("print the table without its header line", ("scan",))]
    waiting: Annotated[bool, _switch(
        "also list pods that match a rule but are not yet due", ("scan",))]
    delete: Annotated[bool, _switch(
        "delete the zombies found, once (--dry-run: report them)", ("scan",))]
# fmt: on


class Config(Options, frozen=True):
    """What a command runs with: its options, each already checked, as `load_config`
    resolves them (the rules built, the namespace kubectl would take, explain's pod)."""

    command: str
    rules: RuleSet  # type: ignore[assignment]  # built from --rules and the file's rules
    target: tuple[str, str] = ("", "")  # explain's pod: its namespace and name

    def model_post_init(self, context: Any, /) -> None:
        # The rules judge pods by the selection the watches are built from, whatever made it.
        scope = Selection(self.namespaces, self.exclude_namespaces, self.label_selector)
        self.__dict__["rules"] = dataclasses.replace(self.rules, scope=scope)


OPTIONS: Final = tuple(
    dataclasses.replace(option, name=name, shown=option.shown or option.default or "none")
    for name, field in Options.model_fields.items()
    for option in field.metadata
    if isinstance(option, Option)
)
_BY_NAME: Final = {o.name: o for o in OPTIONS}
_DEFAULTS: Final = {o.name: o.default for o in OPTIONS if o.default is not None}
#: The file's keys; its ``rules`` are rule specs, not ``--rules``.
_FILE_KEYS: Final = {
    to_camel(o.name): o.name for o in OPTIONS if o.env and o.name not in ("config", "rules")
}


def _validated(
    given: Mapping[str, Any], source: Source, file: _File | None = None
) -> dict[str, Any]:
    """The options ``given`` (by name) from ``source``, each checked by its field's type."""
    try:
        checked = Options.model_validate(_DEFAULTS | dict(given))
    except pydantic.ValidationError as exc:
        (name, *rest), problem = _first(exc)
        option = _BY_NAME[str(name)]
        if file is not None:
            raise file.error((to_camel(option.name), *rest), problem) from None
        where = option.env if source is Source.ENV else None
        raise ConfigError(problem, option=option.flag, source=source, where=where) from None
    return {name: getattr(checked, name) for name in given}


def _first(exc: pydantic.ValidationError) -> tuple[tuple[str | int, ...], str]:
    """Where pydantic's first finding is, and the problem: our own checks' words, or
    pydantic's with the text at fault."""
    first = exc.errors(include_url=False)[0]
    problem = str(first.get("ctx", {}).get("error", first["msg"]))
    if first["type"] == "extra_forbidden":
        problem = "unknown key"
    elif first["type"] != "value_error" and isinstance(first["input"], str):
        problem += f", got {first['input']!r}"
    return first["loc"], problem


def lease_timing_fault(
    lease_duration: float, renew_deadline: float, retry_period: float
) -> tuple[str, str] | None:
    """The setting that breaks client-go's rule, and how: the leader gives up (renew
    deadline) before anyone else may take over (lease duration), with room for one
    jittered retry in between."""
    jittered = LEASE_JITTER * retry_period
    for name, value, bound, what in (
        ("retry_period", retry_period, 0.0, "0s"),
        ("renew_deadline", renew_deadline, jittered, f"{LEASE_JITTER:g} retry periods"),
        ("lease_duration", lease_duration, renew_deadline, "the renew deadline"),
    ):
        if not value > bound:
            bound_text = "" if bound == 0 else f" ({format_duration(bound)})"
            return name, f"must be longer than {what}{bound_text}, got {format_duration(value)}"
    return None


def options_for(command: str) -> tuple[Option, ...]:
    """The options that apply to ``command``."""
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r} (choose from {', '.join(COMMANDS)})")
    return tuple(option for option in OPTIONS if command in option.commands)


# -- the command line ------------------------------------------------------------------


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
        parser.add_argument(
            *option.spellings(),
            dest=option.name,
            # explain's table already shows what wide adds
            metavar=option.metavar.replace("|wide", "" if command == "explain" else "|wide"),
            nargs="?" if option.const else None,
            help=f"{option.help} (default: {option.shown}{where})",
        )
    return parser


def _read_argv(command: str, argv: Sequence[str]) -> tuple[dict[str, Any], str | None]:
    """The options given on the command line, as written, and explain's pod.

    A flag's value is joined to it first, as kubectl reads them: a flag takes the next
    argument whatever it looks like (``--min-age -1s``), and one with an optional value
    (``--dry-run``) only one it accepts (``explain --dry-run NS/POD``)."""
    prog = f"zombied {command}"
    by_spelling = {s: option for option in options_for(command) for s in option.spellings()}
    joined, rest = [], list(argv)
    while rest and (arg := rest.pop(0)) != "--":
        if (option := by_spelling.get(arg)) is not None:
            if option.const is not None and not (rest and _accepts(option, rest[0])):
                rest.insert(0, option.const)
            elif not rest:
                raise ConfigError("expected one argument", option=option.flag, source=Source.FLAG)
            arg = f"{arg}={rest.pop(0)}"
        joined.append(arg)
    rest = ["--", *rest] if rest else []
    given, others = build_parser(command).parse_known_args([*joined, *rest])
    for arg in (arg for arg in others if arg != "--"):
        if arg.startswith("-"):
            spelling = arg.partition("=")[0]
            problem = f"unknown option for '{prog}' (see '{prog} --help')"
            raise ConfigError(problem, option=spelling, source=Source.FLAG)
        raise ConfigError(f"unexpected argument {arg!r} for '{prog}' (see '{prog} --help')")
    values = vars(given)
    return values, values.pop("target", None)


def _accepts(option: Option, text: str) -> bool:
    try:
        _validated({option.name: text}, Source.FLAG)
    except ConfigError:
        return False
    return True


def given_options(command: str, argv: Sequence[str]) -> frozenset[str]:
    """The names of the options ``argv`` gives; none when it cannot be read (loading the
    configuration then says why)."""
    try:
        return frozenset(_read_argv(command, argv)[0])
    except ConfigError:
        return frozenset()


# -- loading ---------------------------------------------------------------------------


def load_config(command: str, argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """The configuration of ``zombied COMMAND``, from flags, environment, file, defaults."""
    flags, target = _read_argv(command, argv)
    given = _validated(flags, Source.FLAG)
    # Every environment value is checked, for every command: one Deployment's
    # environment may serve several commands.
    env = {o.name: environ[o.env] for o in OPTIONS if o.env is not None and o.env in environ}
    from_env = _validated(env, Source.ENV)
    config_file = given.get("config", from_env.get("config"))
    file = _read_file(config_file) if config_file is not None else _File()
    values = dict(Options.model_validate(_DEFAULTS)) | file.values | from_env | given
    if command == "run":
        timing = {
            name: values[name] for name in ("lease_duration", "renew_deadline", "retry_period")
        }
        if (fault := lease_timing_fault(**timing)) is not None:
            raise ConfigError(fault[1], option=_BY_NAME[fault[0]].flag)
    elif values["all_namespaces"] and "namespace" in given:
        raise ConfigError("cannot be combined with --namespace (-n)", option="--all-namespaces")
    elif not values["all_namespaces"]:
        values["namespace"] = given.get("namespace") or context_namespace(
            values["kubeconfig"], values["context"], environ
        )
    if command == "explain":
        if values["output"] == "wide":
            raise ConfigError("wide is scan's; explain's table shows everything", option="--output")
        values["target"] = _target(target, given.get("namespace"), values["namespace"])
    try:
        values["rules"] = build_rules(
            file.rules,
            values["rules"],
            min_age=values["min_age"],
            exclude_owner_kinds=values["exclude_owner_kinds"],
        )
        return Config.model_construct(command=command, **values)
    except RuleError as exc:
        if exc.index is not None:
            raise file.error(("rules", exc.index, exc.field), str(exc)) from None
        source, where = (Source.FLAG, None) if "rules" in given else (Source.ENV, "ZOMBIED_RULES")
        raise ConfigError(str(exc), option="--rules", source=source, where=where) from None
    except ValueError as exc:  # the Selection: a namespace both named and excluded
        raise ConfigError(str(exc), option="--exclude-namespaces") from None


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
    if not (DNS_LABEL.fullmatch(named) and DNS_SUBDOMAIN.fullmatch(name)):
        raise ConfigError(
            f"zombied explain: must be POD or NAMESPACE/POD, like team-a/web-0, got {text!r}"
        )
    return named, name


# -- the YAML file ---------------------------------------------------------------------


class _FileRule(pydantic.BaseModel, extra="forbid", alias_generator=to_camel):
    name: str
    min_age: MinAge | None = None
    phases: tuple[str, ...] | None = None
    reasons: tuple[str, ...] | None = None
    message: str | None = None
    owner_kinds: tuple[str, ...] | None = None


_FILE_RULES: Final = pydantic.TypeAdapter(tuple[_FileRule, ...])


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
    """Every option the file sets, checked (those of every command), and its rules."""
    file = _File(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, a NUL in the path
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
    except (yaml.YAMLError, ValueError, RecursionError) as exc:  # ValueError: 2024-13-01
        mark = getattr(exc, "problem_mark", None)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split("\n")[0].split())
        line = mark.line + 1 if mark is not None else None
        error = ConfigError(f"not valid YAML: {problem}", source=Source.FILE, where=path, line=line)
        raise error from None
    finally:
        loader.dispose()
    if not isinstance(document, dict):
        raise file.error((), "must be a mapping of option names to values")
    if unknown := [key for key in document if key not in (*_FILE_KEYS, "rules")]:
        raise file.error(unknown[:1], "unknown key")
    # Read as its flag would be: YAML's numbers and booleans from their text.
    given = {
        _FILE_KEYS[key]: str(value) if isinstance(value, int | float) else value
        for key, value in document.items()
        if key != "rules" and value is not None  # `key:` with no value leaves the default
    }
    file.values = _validated(given, Source.FILE, file)
    try:
        rules = _FILE_RULES.validate_python(document.get("rules") or ())
    except pydantic.ValidationError as exc:
        loc, problem = _first(exc)
        raise file.error(("rules", *loc), problem) from None
    file.rules = [RuleSpec(**dict(rule)) for rule in rules]
    return file
