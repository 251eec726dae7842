"""load_config: flags, environment, YAML file, precedence, one typed config per command."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic.alias_generators import to_camel
from zombied.config import (
    COMMANDS,
    OPTIONS,
    Config,
    DryRun,
    build_parser,
    load_config,
)
from zombied.duration import format_duration, parse_duration
from zombied.errors import ConfigError, Source
from zombied.kubectl import context_namespace
from zombied.rules import Rule, RuleSet, Selection


def load(command: str, *argv: str, env: dict[str, str] | None = None) -> Config:
    return load_config(command, argv, env or {})


def run(*argv: str, env: dict[str, str] | None = None) -> Config:
    return load("run", *argv, env=env)


def changed(config: Config, /, **changes: Any) -> Config:
    """``config`` with ``changes``, made as `load_config` makes a configuration."""
    return Config.model_construct(**{**dict(config), **changes})


def failure(*argv: str, env: dict[str, str] | None = None, command: str = "run") -> ConfigError:
    """The configuration error of ``zombied COMMAND ARGV``; its line is one line."""
    with pytest.raises(ConfigError) as info:
        load_config(command, argv, env or {})
    assert "\n" not in str(info.value)
    return info.value


def fault(error: ConfigError) -> tuple[str | None, Source | None, str | None, int | None]:
    """What a configuration error names: option, source, where, line."""
    return error.option, error.source, error.where, error.line


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "zombied.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def file_fault(tmp_path: Path, text: str, command: str = "run") -> tuple[str | None, int | None]:
    """The key and line the error of a file names; it names the file as its source."""
    path = write(tmp_path, text)
    error = failure("--config", path, command=command)
    assert (error.source, error.where) == (Source.FILE, path)
    return error.option, error.line


class TestShape:
    def test_defaults(self) -> None:
        config = run()
        assert config.namespaces == ()
        assert config.rules == RuleSet(
            (Rule("node-shutdown", 30.0), Rule("admission-rejected", 300.0))
        )
        assert config.rules == RuleSet()  # one default, whichever way it is asked
        assert config.dry_run is DryRun.OFF
        assert config.listen == ("0.0.0.0", 8080)
        assert (config.qps, config.burst, config.max_in_flight) == (20.0, 100, 4)
        lease = (config.lease_duration, config.renew_deadline, config.retry_period)
        assert lease == (15.0, 10.0, 2.0)
        assert config.watch_timeout == 300.0
        assert (config.lease_namespace, config.leader_elect) == (None, False)
        scan = load("scan")
        assert (scan.namespace, scan.output, scan.delete, scan.waiting) == (
            "default",
            "table",
            False,
            False,
        )

    def test_the_rules_select_the_pods_the_configuration_names(self) -> None:
        config = run("--namespaces", "a,b", "--exclude-namespaces", "c", "-l", "app")
        assert config.rules.scope == Selection(("a", "b"), ("c",), "app")
        # However a configuration is made: the selection cannot drift from its fields.
        moved = changed(config, namespaces=("d",), label_selector="")
        assert moved.rules.scope == Selection(("d",), ("c",), "")

    def test_every_option_has_a_flag_and_an_env_unless_flag_only(self) -> None:
        for option in OPTIONS:
            assert option.flag == "--" + option.name.replace("_", "-")
            assert option.help
            assert set(option.commands) <= set(COMMANDS)
            assert option.env == (None if option.flag_only else "ZOMBIED_" + option.name.upper())
        assert {o.name for o in OPTIONS if o.flag_only} == {"namespace", "all_namespaces"}

    def test_unknown_command(self) -> None:
        for make in (lambda: load_config("nope", [], {}), lambda: build_parser("nope")):
            with pytest.raises(ConfigError, match="'nope'"):
                make()


class TestKubectlNamespace:
    """scan and explain work in the namespace kubectl would: -n, else the context's."""

    def test_the_context_namespace_is_scans_and_explains_default(self, tmp_path: Path) -> None:
        path = write(
            tmp_path,
            "current-context: a\ncontexts:\n- {name: a, context: {namespace: shop}}\n"
            "- {name: b, context: {}}\n",
        )
        assert load("scan", "--kubeconfig", path).namespace == "shop"
        assert load("scan", "--kubeconfig", path, "--context", "b").namespace == "default"
        assert load("scan", "--kubeconfig", path, "-A").namespace is None
        assert load("scan", "--kubeconfig", path, "-n", "ops").namespace == "ops"
        assert load("explain", "web-0", env={"KUBECONFIG": path}).target == ("shop", "web-0")
        assert load("explain", "ops/web-0", env={"KUBECONFIG": path}).target == ("ops", "web-0")

    def test_kubeconfig_files_merge_as_in_kubectl(self, tmp_path: Path) -> None:
        first, second, broken = tmp_path / "a", tmp_path / "b", tmp_path / "broken"
        first.write_text("contexts: [{name: a, context: {namespace: shop}}]")
        second.write_text("current-context: a\ncontexts: [{name: a, context: {namespace: x}}]")
        broken.write_text("{not yaml")
        listed = os.pathsep.join(map(str, [broken, tmp_path / "missing", first, second]))
        assert context_namespace(None, None, {"KUBECONFIG": listed}) == "shop"
        assert context_namespace(None, "b", {"KUBECONFIG": listed}) == "default"
        assert context_namespace(None, None, {}) == "default"
        (tmp_path / "home" / ".kube").mkdir(parents=True)
        (tmp_path / "home" / ".kube" / "config").write_text(second.read_text())
        assert context_namespace(None, None, {"HOME": str(tmp_path / "home")}) == "x"


class TestDurations:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        zip(
            ["0", "2.5", "500ms", "5m", "1h30m15s", "1m500ms", "1.5h", ".5s", " 10s "],
            [0, 2.5, 0.5, 300, 5415, 60.5, 5400, 0.5, 10],
            strict=True,
        ),
    )
    def test_duration(self, text: str, seconds: float) -> None:
        assert parse_duration(text) == pytest.approx(seconds)

    @pytest.mark.parametrize(
        "text", ["", "s", "10x", "1d", "-5s", "-1", "10 s", "1h 30m", "m5", "nan", "inf", "5s5"]
    )
    def test_not_a_duration(self, text: str) -> None:
        with pytest.raises(ValueError, match="duration"):
            parse_duration(text)

    @pytest.mark.parametrize(
        ("seconds", "text"),
        [(0, "0s"), (0.001, "1ms"), (2.4, "2.4s"), (90, "1m30s"), (3600, "1h"), (5415, "1h30m15s")],
    )
    def test_format_duration_round_trips(self, seconds: float, text: str) -> None:
        assert format_duration(seconds) == text
        assert parse_duration(text) == pytest.approx(seconds)


#: Every option of ``run`` once, one flag (and its value) a line.
EVERY_FLAG = """
--kubeconfig=/k
--context prod
--namespaces a, b,a,,c
--exclude-namespaces kube-system
-l app=web
--rules failed=1h,node-shutdown
--min-age 1m
--exclude-owner-kinds Job,DaemonSet
--qps 2.5
--burst 3
--max-in-flight 8
--dry-run=server
--listen 127.0.0.1:0
--drain-timeout 5s
--log-format JSON
--log-level warn
--leader-elect
--lease-name zombied-prod
--lease-namespace ops
--lease-duration 30s
--renew-deadline 20s
--retry-period 4s
--watch-timeout 2m
"""

#: The same options in a file, and those of scan.
EVERY_KEY = """
# a comment
kubeconfig: /k
context: prod
namespaces: [a, b, c, a]
excludeNamespaces: kube-system
labelSelector: app=web
rules:
  - name: failed
    minAge: 1h
  - name: node-shutdown
minAge: 1m
excludeOwnerKinds:
  - Job
  - DaemonSet
qps: 2.5
burst: 3
maxInFlight: 8
dryRun: server
listen: 127.0.0.1:0
drainTimeout: 5
logFormat: json
logLevel: warn
leaderElect: true
leaseName: zombied-prod
leaseNamespace: ops
leaseDuration: 30s
renewDeadline: 20s
retryPeriod: 4s
watchTimeout: 2m
output: json
noHeaders: true
waiting: true
delete: true
"""


def everything(**changes: Any) -> Config:
    """The configuration that EVERY_FLAG (or EVERY_KEY) gives."""
    return changed(
        run(),
        kubeconfig="/k",
        context="prod",
        namespaces=("a", "b", "c"),
        exclude_namespaces=("kube-system",),
        label_selector="app=web",
        rules=RuleSet(
            (Rule("failed", 3600.0), Rule("node-shutdown", 60.0)), frozenset({"Job", "DaemonSet"})
        ),
        min_age=60.0,
        exclude_owner_kinds=("Job", "DaemonSet"),
        qps=2.5,
        burst=3,
        max_in_flight=8,
        dry_run=DryRun.SERVER,
        listen=("127.0.0.1", 0),
        drain_timeout=5.0,
        log_format="json",
        log_level="warning",
        leader_elect=True,
        lease_name="zombied-prod",
        lease_namespace="ops",
        lease_duration=30.0,
        renew_deadline=20.0,
        retry_period=4.0,
        watch_timeout=120.0,
        **changes,
    )


class TestSources:
    def test_every_flag(self) -> None:
        argv = [part for line in EVERY_FLAG.splitlines() if line for part in line.split(" ", 1)]
        assert run(*argv) == everything()

    def test_every_file_key(self, tmp_path: Path) -> None:
        path = write(tmp_path, EVERY_KEY)
        scan = {"output": "json", "no_headers": True, "waiting": True, "delete": True}
        assert run("--config", path) == everything(config=path, **scan)
        scan |= {"command": "scan", "namespace": "default"}  # the kubeconfig context's
        assert load("scan", "--config", path) == everything(config=path, **scan)

    def test_every_environment_variable(self) -> None:
        env = {"UNRELATED": "x", "ZOMBIED_UNKNOWN": "x", "ZOMBIED_NAMESPACE": "-n is no variable"}
        for line in EVERY_FLAG.strip().splitlines():
            spelling, value = re.fullmatch(r"(\S+?)(?:[= ](.*))?", line).groups()  # type: ignore[union-attr]
            option = next(option for option in OPTIONS if spelling in option.spellings())
            env[str(option.env)] = value or "true"
        assert run(env=env) == everything()

    @pytest.mark.parametrize(
        ("command", "argv", "expected"),
        [
            ("run", ("--dry-run",), {"dry_run": DryRun.CLIENT}),
            ("run", ("--dry-run", "--qps", "1"), {"dry_run": DryRun.CLIENT}),
            ("run", ("--dry-run=NONE",), {"dry_run": DryRun.OFF}),
            ("run", ("--dry-run=true",), {"dry_run": DryRun.CLIENT}),
            ("run", ("--leader-elect", "no"), {"leader_elect": False}),
            ("run", ("--dry-run", "server"), {"dry_run": DryRun.SERVER}),
            ("run", ("--listen", ":9090"), {"listen": ("0.0.0.0", 9090)}),
            ("run", ("--listen", "[::1]:65535"), {"listen": ("::1", 65535)}),
            ("run", ("--qps", "1", "--qps", "2"), {"qps": 2.0}),  # the last flag wins
            ("run", ("--selector", " app "), {"label_selector": "app"}),
            ("run", ("--exclude-namespaces=",), {"exclude_namespaces": ()}),  # excluding none
            (
                "run",
                ("--rules", "evicted=0", "--min-age", "1h"),
                {"rules": RuleSet((Rule("evicted", 0),))},
            ),
            ("scan", ("-n", "team-a"), {"namespace": "team-a"}),
            ("scan", ("-nteam-a", "--namespaces", "team-a,team-b"), {"namespace": "team-a"}),
            ("scan", ("-A", "--namespaces", "a,b"), {"namespace": None, "namespaces": ("a", "b")}),
            ("scan", ("-o", "json", "--delete", "--dry-run"), {"output": "json", "delete": True}),
            ("scan", ("--waiting", "--no-headers"), {"waiting": True, "no_headers": True}),
            ("explain", ("team-a/web-0",), {"target": ("team-a", "web-0")}),
            ("explain", ("web-0", "-n", "team-a"), {"target": ("team-a", "web-0")}),
            ("explain", ("team-a/web-0", "--namespace", "team-a"), {"target": ("team-a", "web-0")}),
            # the scope zombied works in does not name the pod's namespace
            ("explain", ("team-a/web-0", "--namespaces", "b"), {"target": ("team-a", "web-0")}),
            # a flag with an optional value leaves the pod alone
            ("explain", ("--dry-run", "team-a/web-0"), {"target": ("team-a", "web-0")}),
        ],
    )
    def test_flags(self, command: str, argv: tuple[str, ...], expected: dict[str, object]) -> None:
        config = load(command, *argv)
        assert {name: getattr(config, name) for name in expected} == expected


class TestPrecedence:
    def test_flag_over_env_over_file_over_default(self, tmp_path: Path) -> None:
        path = write(tmp_path, "qps: 3\nburst: 3\nmaxInFlight: 3\n")
        env = {"ZOMBIED_QPS": "2", "ZOMBIED_BURST": "2"}
        config = run("--config", path, "--qps", "1", env=env)
        merged = (config.qps, config.burst, config.max_in_flight, config.drain_timeout)
        assert merged == (1.0, 2, 3, 20.0)
        assert run(env={"ZOMBIED_CONFIG": path}).qps == 3.0
        assert run("--config", path, env={"ZOMBIED_CONFIG": "/nonexistent"}).qps == 3.0

    def test_a_bad_value_fails_wherever_it_is(self, tmp_path: Path) -> None:
        # A typo must never hide behind a source that happens to override it, nor
        # behind a command that does not use it: one environment may serve every command.
        path = write(tmp_path, "qps: -1\n")
        assert fault(failure("--config", path, "--qps", "1")) == ("qps", Source.FILE, path, 1)
        error = failure("--qps", "1", env={"ZOMBIED_QPS": "abc"})
        assert fault(error) == ("--qps", Source.ENV, "ZOMBIED_QPS", None)
        assert failure(env={"ZOMBIED_OUTPUT": "xml"}, command="run").option == "--output"
        assert failure("--config", write(tmp_path, "listen: x\n"), command="scan").line == 1

    def test_min_age_of_a_rule(self, tmp_path: Path) -> None:
        # --rules NAME=AGE, then the file's minAge, then the rule's own, then --min-age.
        path = write(tmp_path, "minAge: 2m\nrules: [{name: evicted, minAge: 1s}, {name: failed}]\n")
        assert run("--config", path).rules.rules == (Rule("evicted", 1.0), Rule("failed", 120.0))
        config = run("--config", path, "--min-age", "5m", "--rules", "evicted,failed=1m")
        assert config.rules.rules == (Rule("evicted", 1.0), Rule("failed", 60.0))
        config = run("--config", path, "--rules", "admission-rejected,evicted=1m")
        assert config.rules.rules == (Rule("admission-rejected", 300.0), Rule("evicted", 60.0))


#: A value each option refuses, written the same way as a flag, a variable or a file value.
REFUSED = {
    "kubeconfig": " ",
    "context": "",
    "namespaces": "Bad_NS",
    "exclude_namespaces": "a/b",
    "label_selector": "app in (a",
    "rules": "failed,failed",
    "min_age": "soon",
    "exclude_owner_kinds": "Deployment",  # owns no pod: it would protect nothing
    "qps": "0",
    "burst": "1.5",
    "max_in_flight": "x",
    "dry_run": "maybe",
    "listen": "8080",
    "drain_timeout": "1d",
    "log_format": "xml",
    "log_level": "trace",
    "leader_elect": "maybe",
    "lease_name": "Bad Name",
    "lease_namespace": "a.b",
    "lease_duration": "0s",
    "renew_deadline": "0s",
    "retry_period": "0s",
    "watch_timeout": "500ms",  # the API counts whole seconds
    "output": "xml",
    "no_headers": "maybe",
    "waiting": "maybe",
    "delete": "maybe",
}


class TestErrors:
    """Each error names the option at fault and its source, on one line."""

    def test_every_option_refuses_a_bad_value(self) -> None:
        assert set(REFUSED) == {o.name for o in OPTIONS if o.env} - {"config"}

    @pytest.mark.parametrize(("name", "value"), REFUSED.items())
    def test_from_every_source(self, tmp_path: Path, name: str, value: str) -> None:
        option = next(option for option in OPTIONS if option.name == name)
        command = option.commands[0]
        error = failure(f"{option.flag}={value}", command=command)
        assert fault(error) == (option.flag, Source.FLAG, None, None)
        assert str(error).startswith(option.flag + ": ")
        error = failure(env={str(option.env): value}, command=command)
        assert fault(error) == (option.flag, Source.ENV, option.env, None)
        if name != "rules":  # the file's rules are rule specs
            text = f"# zombied\n{to_camel(name)}: {json.dumps(value)}\n"
            key, line = file_fault(tmp_path, text, command)
            assert (str(key).partition("[")[0], line) == (to_camel(name), 2)

    @pytest.mark.parametrize(
        ("command", "argv", "option"),
        [
            ("run", ("--min-age", "-1s"), "--min-age"),  # a value that looks like a flag
            ("run", ("--min-age", "99999999999h"), "--min-age"),  # past the calendar
            ("run", ("--rules", "failed=1000000h"), "--rules"),
            ("run", ("--rules", ""), "--rules"),
            ("run", ("--rules", "bogus"), "--rules"),
            ("run", ("--namespaces", " , "), "--namespaces"),  # never every namespace by accident
            ("run", ("--qps", "nan"), "--qps"),
            ("run", ("--listen", "h:70000"), "--listen"),
            ("run", ("--listen", "::1:80"), "--listen"),
            ("run", ("--qps",), "--qps"),
            ("scan", ("-n",), "--namespace"),
            ("scan", ("-n", "Team"), "--namespace"),
            ("run", ("--bogus=1",), "--bogus"),
            ("run", ("--q", "1"), "--q"),  # no abbreviations
            ("run", ("-n", "team-a"), "-n"),  # another command's flag
            ("run", ("--output", "json"), "--output"),
            ("scan", ("--listen", ":80"), "--listen"),
            ("explain", ("a/b", "-A"), "-A"),
        ],
    )
    def test_flags(self, command: str, argv: tuple[str, ...], option: str) -> None:
        assert fault(failure(*argv, command=command)) == (option, Source.FLAG, None, None)

    @pytest.mark.parametrize(
        ("command", "argv", "option"),
        [
            # Whichever sources they come from: the problem is their combination.
            ("run", ("--namespaces", "a,b", "--exclude-namespaces", "c,b"), "--exclude-namespaces"),
            ("run", ("--lease-duration", "10s"), "--lease-duration"),
            ("run", ("--lease-duration", "5s", "--renew-deadline", "5s"), "--lease-duration"),
            ("run", ("--retry-period", "9s"), "--renew-deadline"),
            ("scan", ("-A", "-n", "x"), "--all-namespaces"),
            ("explain", ("a/b", "-o", "wide"), "--output"),  # explain's table shows it all
            ("explain", ("team-a/web-0", "-n", "team-b"), "--namespace"),
            # explain's pod
            ("explain", (), None),
            ("explain", ("team-a/",), None),
            ("explain", ("/web-0",), None),
            ("explain", ("Team/web",), None),
            ("explain", ("a/b/c",), None),
            ("explain", ("Web_0", "-n", "a"), None),
            ("explain", ("a/b", "c/d"), None),
            ("run", ("stray",), None),
        ],
    )
    def test_arguments(self, command: str, argv: tuple[str, ...], option: str | None) -> None:
        assert failure(*argv, command=command).option == option

    def test_lease_timing_boundary(self) -> None:
        config = run("--lease-duration", "3s", "--renew-deadline", "2.5s", "--retry-period", "2s")
        assert config.renew_deadline == 2.5
        assert load("scan", env={"ZOMBIED_LEASE_DURATION": "1s"}).command == "scan"


class TestFile:
    @pytest.mark.parametrize(
        ("rules", "expected"),
        [
            ("[{name: failed}]", (Rule("failed", 30.0),)),
            ("[{name: failed, minAge: 1.5}]", (Rule("failed", 1.5),)),
            ("[{name: failed, minAge: null}]", (Rule("failed", 30.0),)),
            ("[{name: admission-rejected}]", (Rule("admission-rejected", 300.0),)),
            ("[{name: admission-rejected, minAge: 0}]", (Rule("admission-rejected", 0.0),)),
            ("", RuleSet().rules),  # `rules:` alone, like `qps:` alone, leaves the default
        ],
    )
    def test_rule_shapes(self, tmp_path: Path, rules: str, expected: tuple[Rule, ...]) -> None:
        config = run("--config", write(tmp_path, f"qps:\nrules: {rules}\n"))
        assert (config.rules.rules, config.qps) == (expected, 20.0)

    @pytest.mark.parametrize(
        ("text", "key", "line"),
        [
            # Running with the defaults (every namespace) would widen what is deleted.
            ("", None, None),
            ("# only a comment\n", None, None),
            ("~\n", None, 1),
            ("qps: 1\nburst: 2\nfoo: 3\n", "foo", 3),
            ("config: other.yaml\n", "config", 1),
            ("namespace: a\n", "namespace", 1),  # what one command line is about
            ("min_age: 1s\n", "min_age", 1),  # one key style, Kubernetes' own
            ("0: a\n", "[0]", 1),  # a key, however falsy, is named
            ("- qps\n", None, 1),
            ("qps: true\n", "qps", 1),
            ("qps: {a: 1}\n", "qps", 1),
            ("drainTimeout: [1]\n", "drainTimeout", 1),
            ("namespaces: []\n", "namespaces", 1),
            ("namespaces: {a: b}\n", "namespaces", 1),
            ("namespaces: [a, 1]\n", "namespaces[1]", 1),
            ("qps: 1\nqps: 2\n", None, 2),  # PyYAML would keep the last one silently
            ("a: 2024-13-01\n", None, None),
            ("a: " + "9" * 5000 + "\n", None, None),
            ("[" * 5000, None, None),
            ("qps: [1\n", None, 2),
            ("a: 1\n---\nb: 2\n", None, 2),
            ("qps: !!python/object:os.system x\n", None, 1),
        ],
    )
    def test_errors_name_the_key_and_its_line(
        self, tmp_path: Path, text: str, key: str | None, line: int | None
    ) -> None:
        assert file_fault(tmp_path, text) == (key, line)

    def test_unreadable(self, tmp_path: Path) -> None:
        binary = tmp_path / "bad.yaml"
        binary.write_bytes(b"qps: \xff\xfe\n")
        for path in (str(tmp_path / "missing.yaml"), str(tmp_path), str(binary), "a\x00.yaml"):
            assert fault(failure("--config", path)) == (None, Source.FILE, path, None)


class TestOwnRules:
    GPU = """
rules:
  - name: node-shutdown          # a built-in rule, enabled by name
    minAge: 1m
  - name: gpu-not-ready          # a custom rule: it has `reasons`
    phases: [Failed]
    reasons: [UnexpectedAdmissionError]
    message: "nvidia\\\\.com/gpu"
    ownerKinds: [ReplicaSet, StatefulSet]
    minAge: 10m
"""

    def test_the_documented_example(self, tmp_path: Path) -> None:
        config = run("--config", write(tmp_path, self.GPU))
        shutdown, gpu = config.rules.rules
        assert shutdown == Rule("node-shutdown", 60.0)
        assert (gpu.name, gpu.min_age, gpu.builtin) == ("gpu-not-ready", 600.0, False)
        assert gpu.pattern is not None
        assert gpu.pattern.phases == {"Failed"}
        assert gpu.pattern.reasons == {"UnexpectedAdmissionError"}
        assert gpu.pattern.message is not None
        assert gpu.pattern.message.pattern == r"nvidia\.com/gpu"
        assert gpu.pattern.owner_kinds == {"replicaset", "statefulset"}

    def test_rules_flag_enables_a_file_rule_by_name(self, tmp_path: Path) -> None:
        path = write(tmp_path, self.GPU)
        config = run("--config", path, "--rules", "gpu-not-ready=1s,evicted")
        assert config.rules.names == ("evicted", "gpu-not-ready")
        assert config.rules.get("gpu-not-ready") == replace(config.rules.rules[0], min_age=1.0)
        env = {"ZOMBIED_RULES": "gpu-not-ready"}
        assert run("--config", path, env=env).rules.names == ("gpu-not-ready",)
        assert fault(failure("--config", path, "--rules", "gpu")) == (
            "--rules",
            Source.FLAG,
            None,
            None,
        )

    @pytest.mark.parametrize(
        ("rule", "field"),
        [
            ("{name: x, phases: [Faild], reasons: [A]}", "phases"),
            ("{name: x, phases: [Running], reasons: [A]}", "phases"),  # never terminal
            ("{name: x, phases: [], reasons: [A]}", "phases"),
            ("{name: x, reasons: [A]}", "phases"),
            ("{name: x, phases: Failed, reasons: [A]}", "phases"),
            ("{name: x, phases: [Failed], reasons: [A], message: '(unclosed'}", "message"),
            ("{name: x, phases: [Failed], reasons: [A], message: 5}", "message"),
            ("{name: x, phases: [Failed], reasons: []}", "reasons"),
            ("{name: x, phases: [Failed], reasons: ['']}", "reasons"),
            ("{name: x, phases: [Failed], reasons: [1]}", "reasons[0]"),
            ("{name: x, phases: [Failed]}", "reasons"),
            ("{name: x, phases: [Failed], reasons: [A], ownerKinds: [replica-set]}", "ownerKinds"),
            ("{name: x, phases: [Failed], reasons: [A], minAge: soon}", "minAge"),
            ("{name: x, minAge: [1]}", "minAge"),
            ("{name: x, minAge: true}", "minAge"),
            ("{name: x, minAge: 99999999999h}", "minAge"),
            ("{name: failed, minAge: -1s}", "minAge"),
            ("{name: x, age: 1s}", "age"),
            ("{name: failed, phases: [Failed], reasons: [A]}", "name"),  # a built-in's name
            ("{name: evicted, message: x}", "message"),  # a built-in takes only minAge
            ("{name: Bad_Name, phases: [Failed], reasons: [A]}", "name"),
            ("{minAge: 1s}", "name"),
        ],
    )
    def test_invalid_rule(self, tmp_path: Path, rule: str, field: str) -> None:
        assert file_fault(tmp_path, f"qps: 1\nrules:\n  - {rule}\n") == (f"rules[0].{field}", 3)

    @pytest.mark.parametrize(
        ("text", "key", "line"),
        [
            # the field's own line, when it is written out
            (
                "rules:\n  - name: gpu\n    reasons: [A]\n    phases: [Faild]\n",
                "rules[0].phases",
                4,
            ),
            (
                "rules:\n  - name: evicted\n  - name: x\n    phases: [Failed]\n    reasons: [A]\n"
                "  - name: evicted\n    minAge: 1s\n",
                "rules[2].name",
                6,
            ),
            ("rules:\n  - evicted\n", "rules[0]", 2),
            ("rules: evicted\n", "rules", 1),
            ("rules: {evicted: 1m}\n", "rules", 1),
            ("rules:\n  - name: evicted\n    minAge: 1s\n    minAge: 2s\n", None, 4),
        ],
    )
    def test_errors_point_at_their_line(
        self, tmp_path: Path, text: str, key: str | None, line: int
    ) -> None:
        assert file_fault(tmp_path, text) == (key, line)


class TestHelp:
    @pytest.mark.parametrize("command", ["run", "scan", "explain"])
    def test_help_shows_each_option_with_its_default_and_env(self, command: str) -> None:
        text = " ".join(build_parser(command).format_help().split())
        assert text.startswith(f"usage: zombied {command}")
        assert "(default: 30s; env ZOMBIED_MIN_AGE)" in text
        assert ("--listen" in text) is (command == "run")
        assert ("-n NS, --namespace NS" in text) is (command != "run")
        formats = {"scan": "table|wide|json|yaml|name", "explain": "table|json|yaml|name"}
        assert command not in formats or f"-o {formats[command]}" in text

    @pytest.mark.parametrize("flag", ["-h", "--help"])
    def test_help_flag_prints_help_and_exits_0(self, flag: str) -> None:
        out = io.StringIO()
        with pytest.raises(SystemExit) as info, contextlib.redirect_stdout(out):
            load_config("scan", ["--qps", "3", flag, "--nope"], {})
        assert info.value.code == 0
        assert out.getvalue().startswith("usage: zombied scan")
