"""load_config: flags, environment, YAML file, precedence, one typed config per command."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from zombied.config import (
    OPTIONS,
    AnyConfig,
    DryRun,
    ExplainConfig,
    RunConfig,
    ScanConfig,
    build_parser,
    load_config,
    parse_label_selector,
)
from zombied.duration import format_duration, parse_duration
from zombied.errors import ConfigError, Source
from zombied.kubectl import context_namespace
from zombied.rules import Rule, RuleSet, Selection


def load(command: str, *argv: str, env: dict[str, str] | None = None) -> Any:
    return load_config(command, argv, env or {})


def run(*argv: str, env: dict[str, str] | None = None) -> RunConfig:
    config = load("run", *argv, env=env)
    assert isinstance(config, RunConfig)
    return config


def scan(*argv: str, env: dict[str, str] | None = None) -> ScanConfig:
    config = load("scan", *argv, env=env)
    assert isinstance(config, ScanConfig)
    return config


def explain(*argv: str, env: dict[str, str] | None = None) -> ExplainConfig:
    config = load("explain", *argv, env=env)
    assert isinstance(config, ExplainConfig)
    return config


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


def file_error(tmp_path: Path, text: str, command: str = "run") -> ConfigError:
    """The error of a file: it names the file as its source."""
    path = write(tmp_path, text)
    error = failure("--config", path, command=command)
    assert (error.source, error.where) == (Source.FILE, path)
    return error


class TestDefaults:
    def test_run(self) -> None:
        config = run()
        assert config.command == "run"
        assert config.namespaces == ()
        builtins = (Rule("node-shutdown", 30.0), Rule("admission-rejected", 300.0))
        assert config.rules == RuleSet(builtins)
        assert config.rules == RuleSet()  # one default, whichever way it is asked
        assert config.dry_run is DryRun.OFF
        assert (config.listen_host, config.listen_port) == ("0.0.0.0", 8080)
        assert (config.qps, config.burst, config.max_in_flight) == (20.0, 100, 4)
        lease = (config.lease_duration, config.renew_deadline, config.retry_period)
        assert lease == (15.0, 10.0, 2.0)
        assert (config.watch_timeout_min, config.watch_timeout_max) == (300.0, 600.0)
        assert config.lease_namespace is None
        assert not config.leader_elect

    def test_scan(self) -> None:
        config = scan()
        assert (config.command, config.namespace, config.output) == ("scan", "default", "table")
        assert (config.delete, config.waiting, config.no_headers) == (False, False, False)


class TestKubectlNamespace:
    """scan and explain work in the namespace kubectl would: -n, else the context's."""

    @staticmethod
    def kubeconfig(tmp_path: Path, name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    def test_the_context_namespace_is_scans_and_explains_default(self, tmp_path: Path) -> None:
        path = self.kubeconfig(
            tmp_path,
            "config",
            "current-context: a\ncontexts:\n- {name: a, context: {namespace: shop}}\n"
            "- {name: b, context: {}}\n",
        )
        assert scan("--kubeconfig", path).namespace == "shop"
        assert scan("--kubeconfig", path, "--context", "b").namespace == "default"
        assert scan("--kubeconfig", path, "-A").namespace is None
        assert scan("--kubeconfig", path, "-n", "ops").namespace == "ops"
        assert explain("web-0", env={"KUBECONFIG": path}).target == ("shop", "web-0")
        assert explain("ops/web-0", env={"KUBECONFIG": path}).target == ("ops", "web-0")

    def test_kubeconfig_files_merge_as_in_kubectl(self, tmp_path: Path) -> None:
        first = self.kubeconfig(tmp_path, "a", "contexts: [{name: a, context: {namespace: shop}}]")
        second = self.kubeconfig(
            tmp_path, "b", "current-context: a\ncontexts: [{name: a, context: {namespace: x}}]"
        )
        broken = self.kubeconfig(tmp_path, "broken", "{not yaml")
        listed = os.pathsep.join([broken, str(tmp_path / "missing"), first, second])
        assert context_namespace(None, None, {"KUBECONFIG": listed}) == "shop"
        assert context_namespace(None, "b", {"KUBECONFIG": listed}) == "default"
        assert context_namespace(None, None, {}) == "default"
        home = tmp_path / "home"
        (home / ".kube").mkdir(parents=True)
        self.kubeconfig(home / ".kube", "config", Path(second).read_text(encoding="utf-8"))
        assert context_namespace(None, None, {"HOME": str(home)}) == "x"

    @pytest.mark.parametrize(
        ("config_type", "absent"),
        [
            (RunConfig, {"output", "delete", "target", "namespace"}),
            (ScanConfig, {"listen_host", "lease_name", "watch_timeout_min", "target"}),
            (ExplainConfig, {"qps", "burst", "delete", "listen_port", "lease_duration"}),
        ],
    )
    def test_each_command_holds_only_its_options(
        self, config_type: type[AnyConfig], absent: set[str]
    ) -> None:
        names = {field.name for field in fields(config_type)}
        assert not names & absent
        # What every command judges pods by, under the names the daemon reads.
        assert {"namespaces", "exclude_namespaces", "label_selector", "rules"} <= names

    def test_the_rules_select_the_pods_the_configuration_names(self) -> None:
        config = run("--namespaces", "a,b", "--exclude-namespaces", "c", "-l", "app")
        assert config.rules.scope == Selection(("a", "b"), ("c",), "app")
        # However a configuration is made: the selection cannot drift from its fields.
        moved = replace(config, namespaces=("d",), label_selector="")
        assert moved.rules.scope == Selection(("d",), ("c",), "")

    def test_every_option_has_a_flag_and_an_env_unless_flag_only(self) -> None:
        for option in OPTIONS:
            assert option.flag == "--" + option.name.replace("_", "-")
            assert option.commands <= {"run", "scan", "explain"}
            assert option.help
            if option.flag_only:
                assert (option.env, option.key) == (None, None)
            else:
                assert option.env == "ZOMBIED_" + option.name.upper()
        assert {o.name for o in OPTIONS if o.flag_only} == {"namespace", "all_namespaces"}

    def test_unknown_command(self) -> None:
        with pytest.raises(ConfigError, match="unknown command 'nope'"):
            load_config("nope", [], {})
        with pytest.raises(ConfigError, match="unknown command"):
            build_parser("nope")


class TestValues:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [
            ("0", 0.0),
            ("30", 30.0),
            ("2.5", 2.5),
            ("500ms", 0.5),
            ("30s", 30.0),
            ("5m", 300.0),
            ("1h", 3600.0),
            ("1h30m15s", 5415.0),
            ("1m500ms", 60.5),
            ("1.5h", 5400.0),
            (".5s", 0.5),
            (" 10s ", 10.0),
        ],
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
        [
            (0, "0s"),
            (0.001, "1ms"),
            (0.5, "500ms"),
            (2.4, "2.4s"),
            (30, "30s"),
            (90, "1m30s"),
            (3600, "1h"),
            (5415, "1h30m15s"),
        ],
    )
    def test_format_duration_round_trips(self, seconds: float, text: str) -> None:
        assert format_duration(seconds) == text
        assert parse_duration(text) == pytest.approx(seconds)

    @pytest.mark.parametrize(
        "selector",
        [
            "",
            "app",
            "!app",
            "app=web",
            "app==web",
            "app!=web",
            "app=",
            "app in (web, api)",
            "app notin (web)",
            "tier in (a),env!=prod,!canary,example.com/team=x",
            " app = web ",
            "k in (a,)",
            "app in ()",
            "app >5 , tier",
            "a in(x),b notin(y)",
        ],
    )
    def test_label_selector(self, selector: str) -> None:
        assert parse_label_selector(selector) == selector.strip()
        assert run("--label-selector", selector).label_selector == selector.strip()

    @pytest.mark.parametrize(
        "selector",
        [
            "app=web,",
            ",app",
            "app in (a",
            "app in a)",
            "app in ((a))",
            "app in",
            "app=we b",
            "app=-web",
            "Bad_Prefix.com/app=x",
            "app=" + "x" * 64,
            "x" * 64,
            "app>x",
            "app<1.5",
            "app<-1",  # the value must also be a valid label value
            "app in (a b)",
            "in=x",
            "app=a=b",
            "!!app",
        ],
    )
    def test_not_a_label_selector(self, selector: str) -> None:
        error = failure(f"--label-selector={selector}")
        assert fault(error) == ("--label-selector", Source.FLAG, None, None)
        assert error.problem.startswith("invalid label selector: ")


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


def everything(**changes: Any) -> RunConfig:
    """The configuration that EVERY_FLAG (or the same options in a file) gives."""
    return replace(
        run(),
        kubeconfig="/k",
        context="prod",
        namespaces=("a", "b", "c"),
        exclude_namespaces=("kube-system",),
        label_selector="app=web",
        rules=RuleSet(
            (Rule("failed", 3600.0), Rule("node-shutdown", 60.0)),
            frozenset({"Job", "DaemonSet"}),
            Selection(("a", "b", "c"), ("kube-system",), "app=web"),
        ),
        qps=2.5,
        burst=3,
        max_in_flight=8,
        dry_run=DryRun.SERVER,
        listen_host="127.0.0.1",
        listen_port=0,
        drain_timeout=5.0,
        log_format="json",
        log_level="warning",
        leader_elect=True,
        lease_name="zombied-prod",
        lease_namespace="ops",
        lease_duration=30.0,
        renew_deadline=20.0,
        retry_period=4.0,
        watch_timeout_min=120.0,
        watch_timeout_max=240.0,
        **changes,
    )


class TestFlags:
    def test_everything(self) -> None:
        argv = [part for line in EVERY_FLAG.splitlines() if line for part in line.split(" ", 1)]
        assert run(*argv) == everything()

    @pytest.mark.parametrize(
        ("argv", "field", "expected"),
        [
            (("--dry-run",), "dry_run", DryRun.CLIENT),
            (("--dry-run", "--qps", "1"), "dry_run", DryRun.CLIENT),
            (("--dry-run=server",), "dry_run", DryRun.SERVER),
            (("--dry-run", "server"), "dry_run", DryRun.SERVER),
            (("--dry-run=NONE",), "dry_run", DryRun.OFF),
            (("--leader-elect",), "leader_elect", True),
            (("--leader-elect=false",), "leader_elect", False),
            (("--leader-elect", "no"), "leader_elect", False),
            (("--listen", ":9090"), "listen_host", "0.0.0.0"),
            (("--listen", "[::1]:65535"), "listen_host", "::1"),
            (("--listen", "[::1]:65535"), "listen_port", 65535),
            (("--listen", "localhost:0"), "listen_port", 0),
            (("--qps", "1", "--qps", "2"), "qps", 2.0),  # the last flag wins
            (("--selector", "app"), "label_selector", "app"),
            (("--rules", "evicted=0", "--min-age", "1h"), "rules", RuleSet((Rule("evicted", 0),))),
        ],
    )
    def test_run_flags(self, argv: tuple[str, ...], field: str, expected: object) -> None:
        assert getattr(run(*argv), field) == expected

    @pytest.mark.parametrize(
        ("argv", "expected"),
        [
            (("-n", "team-a"), {"namespace": "team-a"}),
            (("--namespace=team-a", "--namespaces", "team-a,team-b"), {"namespace": "team-a"}),
            (("-A",), {"namespace": None}),
            (("--all-namespaces", "--namespaces", "a,b"), {"namespaces": ("a", "b")}),
            (("-o", "json", "--delete", "--dry-run"), {"output": "json", "delete": True}),
            (("--delete", "--dry-run=server"), {"dry_run": DryRun.SERVER}),  # a rehearsal
            (("--waiting", "--no-headers"), {"waiting": True, "no_headers": True}),
        ],
    )
    def test_scan_flags(self, argv: tuple[str, ...], expected: dict[str, object]) -> None:
        config = scan(*argv)
        assert {name: getattr(config, name) for name in expected} == expected

    @pytest.mark.parametrize(
        ("argv", "target"),
        [
            (("team-a/web-0",), ("team-a", "web-0")),
            (("web-0", "-n", "team-a"), ("team-a", "web-0")),
            (("-nteam-a", "web-0"), ("team-a", "web-0")),
            (("team-a/web-0", "--namespace", "team-a"), ("team-a", "web-0")),
            # the watched scope does not name the pod's namespace
            (("team-a/web-0", "--namespaces", "team-b"), ("team-a", "web-0")),
            # a flag with an optional value leaves the pod alone
            (("--dry-run", "team-a/web-0"), ("team-a", "web-0")),
        ],
    )
    def test_explain_names_its_pod_as_kubectl_does(
        self, argv: tuple[str, ...], target: tuple[str, str]
    ) -> None:
        assert explain(*argv).target == target


class TestFlagErrors:
    """Each error names the option at fault and its source; the problem says what is wrong."""

    @pytest.mark.parametrize(
        ("argv", "option", "problem"),
        [
            (("--qps", "abc"), "--qps", "must be a number > 0"),
            (("--qps", "0"), "--qps", "must be a number > 0"),
            (("--qps", "nan"), "--qps", "must be a number > 0"),
            (("--burst", "1.5"), "--burst", "must be a whole number >= 1"),
            (("--max-in-flight", "x"), "--max-in-flight", "must be a whole number >= 1"),
            (("--min-age", "soon"), "--min-age", "must be a duration like"),
            # A value that looks like a flag is the option's to refuse.
            (("--min-age", "-1s"), "--min-age", "must be a duration >= 0"),
            (("--min-age", "-5m"), "--min-age", "must be a duration >= 0"),
            (("--drain-timeout", "1d"), "--drain-timeout", "must be a duration like"),
            (("--rules", "bogus"), "--rules", "unknown rule 'bogus'"),
            (("--rules", "failed,failed"), "--rules", "rule 'failed' is listed more than once"),
            (("--rules", ""), "--rules", "must name at least one rule"),
            (("--rules", "Bad_Name"), "--rules", "unknown rule 'Bad_Name'"),
            (("--rules", "x=1s"), "--rules", "unknown rule 'x'"),
            (("--min-age", "99999999999h"), "--min-age", "a rule's min age must be from 0s"),
            (("--rules", "failed=1000000h"), "--rules", "a rule's min age must be from 0s"),
            (("--rules", "evicted=later"), "--rules", "must be a duration like"),
            (("--namespaces", "Bad_NS"), "--namespaces", "'Bad_NS' is not a valid namespace"),
            # Empty would mean every namespace: the widest scope, never by accident.
            (("--namespaces", ""), "--namespaces", "must name a namespace"),
            (("--namespaces", " , "), "--namespaces", "must name a namespace"),
            (("--exclude-namespaces", "a/b"), "--exclude-namespaces", "'a/b' is not a valid"),
            (("--exclude-owner-kinds", "Job!"), "--exclude-owner-kinds", "'Job!' is not a valid"),
            # Kinds that never own a pod, and plurals, would protect nothing.
            (("--exclude-owner-kinds", "Deployment"), "--exclude-owner-kinds", "'Deployment':"),
            (("--exclude-owner-kinds", "Job,CronJob"), "--exclude-owner-kinds", "'CronJob':"),
            (("--exclude-owner-kinds", "ReplicaSets"), "--exclude-owner-kinds", "'ReplicaSets' is"),
            (("--dry-run=maybe",), "--dry-run", "must be one of client, server, none"),
            (("--listen", "8080"), "--listen", "must be HOST:PORT"),
            (("--listen", "h:70000"), "--listen", "port must be a number from 0 to 65535"),
            (("--listen", "h:x"), "--listen", "port must be a number from 0 to 65535"),
            (("--listen", "::1:80"), "--listen", "IPv6 hosts need brackets"),
            (("--listen", "a b:80"), "--listen", "'a b' is not a host name"),
            (("--log-format", "xml"), "--log-format", "must be one of auto, json, console"),
            (("--log-level", "trace"), "--log-level", "must be one of debug, info, warning"),
            (("--leader-elect=maybe",), "--leader-elect", "must be true or false"),
            (("--lease-name", "Bad Name"), "--lease-name", "must be a lowercase DNS name"),
            (("--lease-namespace", "a.b"), "--lease-namespace", "must be a valid namespace name"),
            (("--lease-duration", "0s"), "--lease-duration", "must be at least 1ms"),
            (("--watch-timeout", "500ms"), "--watch-timeout", "must be at least 1s"),
            (("--kubeconfig", ""), "--kubeconfig", "must be a non-empty string"),
            (("--context", " "), "--context", "must be a non-empty string"),
            (("--qps",), "--qps", "expected one argument"),
            (("--bogus=1",), "--bogus", "unknown option for 'zombied run'"),
            (("--q", "1"), "--q", "unknown option"),  # no abbreviations
            (("--output", "json"), "--output", "unknown option"),
            (("--delete",), "--delete", "unknown option"),
            (("-n", "team-a"), "-n", "unknown option"),
            (("--all-namespaces",), "--all-namespaces", "unknown option"),
        ],
    )
    def test_run(self, argv: tuple[str, ...], option: str, problem: str) -> None:
        error = failure(*argv)
        assert fault(error) == (option, Source.FLAG, None, None)
        assert error.problem.startswith(problem)

    def test_a_flag_of_another_command_says_what_to_use_instead(self) -> None:
        assert "--namespaces NS" in failure("-n", "team-a").problem
        assert "POD -n NS" in failure("a/b", "-A", command="explain").problem

    @pytest.mark.parametrize(
        ("argv", "option", "problem"),
        [
            # Whichever sources they come from: the problem is their combination.
            (("--namespaces", "a,b", "--exclude-namespaces", "c,b"), "--exclude-namespaces", "'b'"),
            (("--lease-duration", "10s"), "--lease-duration", "must be longer than"),
            (
                ("--lease-duration", "5s", "--renew-deadline", "5s"),
                "--lease-duration",
                "must be longer than --renew-deadline (5s), got 5s",
            ),
            (("--retry-period", "9s"), "--renew-deadline", "must be longer than 1.2 x"),
        ],
    )
    def test_combinations(self, argv: tuple[str, ...], option: str, problem: str) -> None:
        error = failure(*argv)
        assert (error.option, error.source) == (option, None)
        assert error.problem.startswith(problem)

    def test_stray_argument(self) -> None:
        error = failure("stray")
        assert (error.option, "'stray'" in error.problem) == (None, True)

    @pytest.mark.parametrize(
        ("argv", "option", "problem"),
        [
            (("-o", "xml"), "--output", "must be one of table, wide, json, yaml, name"),
            (("--delete=perhaps",), "--delete", "must be true or false"),
            (("--listen", ":80"), "--listen", "unknown option for 'zombied scan'"),
            (("--leader-elect",), "--leader-elect", "unknown option"),
            (("-n", "Team"), "--namespace", "must be a valid namespace name"),
            (("-n",), "--namespace", "expected one argument"),
            (("-A", "-n", "x"), "--all-namespaces", "cannot be combined with --namespace"),
        ],
    )
    def test_scan(self, argv: tuple[str, ...], option: str, problem: str) -> None:
        error = failure(*argv, command="scan")
        assert error.option == option
        assert error.problem.startswith(problem)

    @pytest.mark.parametrize(
        ("argv", "option", "problem"),
        [
            (("team-a/",), None, "zombied explain: must be POD or NAMESPACE/POD"),
            (("/web-0",), None, "zombied explain: must be POD or NAMESPACE/POD"),
            (("Team/web",), None, "zombied explain: must be POD or NAMESPACE/POD"),
            (("a/b/c",), None, "zombied explain: must be POD or NAMESPACE/POD"),
            (("Web_0", "-n", "a"), None, "zombied explain: must be POD or NAMESPACE/POD"),
            ((), None, "zombied explain: which pod?"),
            (("a/b", "c/d"), None, "unexpected argument 'c/d'"),
            (("team-a/web-0", "-n", "team-b"), "--namespace", "'team-a/web-0' is in namespace"),
            (("a/b", "-o", "wide"), "--output", "wide is scan's"),
            (("a/b", "-A"), "-A", "unknown option for 'zombied explain'"),
        ],
    )
    def test_explain(self, argv: tuple[str, ...], option: str | None, problem: str) -> None:
        error = failure(*argv, command="explain")
        assert error.option == option
        assert error.problem.startswith(problem)

    def test_lease_timing_boundary_ok_and_not_checked_outside_run(self) -> None:
        config = run("--lease-duration", "3s", "--renew-deadline", "2.5s", "--retry-period", "2s")
        assert config.renew_deadline == 2.5
        assert scan(env={"ZOMBIED_LEASE_DURATION": "1s"}).command == "scan"


class TestEnvironment:
    def test_values(self) -> None:
        env = {
            "ZOMBIED_NAMESPACES": "x,y",
            "ZOMBIED_QPS": "9",
            "ZOMBIED_DRY_RUN": "server",
            "ZOMBIED_LEADER_ELECT": "true",
            "ZOMBIED_MIN_AGE": "2m",
            "ZOMBIED_RULES": "evicted",
            "ZOMBIED_LISTEN": ":0",
            "UNRELATED": "x",
            "ZOMBIED_UNKNOWN_THING": "ignored",
            "ZOMBIED_NAMESPACE": "ignored",  # -n is what one invocation is about
        }
        config = run(env=env)
        assert config.namespaces == ("x", "y")
        assert config.qps == 9.0
        assert config.dry_run is DryRun.SERVER
        assert config.leader_elect
        assert config.rules == RuleSet((Rule("evicted", 120.0),), scope=Selection(("x", "y")))
        assert config.listen_port == 0
        assert scan("-A", env=env).namespace is None

    @pytest.mark.parametrize(
        ("name", "value", "expected"),
        [
            ("LEADER_ELECT", "TRUE", True),
            ("LEADER_ELECT", "1", True),
            ("LEADER_ELECT", "0", False),
            ("DRY_RUN", "true", DryRun.CLIENT),
            ("DRY_RUN", "false", DryRun.OFF),
            ("DRY_RUN", "none", DryRun.OFF),
            ("EXCLUDE_NAMESPACES", "", ()),  # excluding none is harmless
        ],
    )
    def test_spellings(self, name: str, value: str, expected: object) -> None:
        assert getattr(run(env={f"ZOMBIED_{name}": value}), name.lower()) == expected

    @pytest.mark.parametrize(
        ("name", "value"),
        [("QPS", "abc"), ("QPS", ""), ("NAMESPACES", ""), ("EXCLUDE_OWNER_KINDS", "Deployment")],
    )
    def test_errors_name_the_flag_and_the_variable(self, name: str, value: str) -> None:
        error = failure(env={f"ZOMBIED_{name}": value})
        flag = "--" + name.lower().replace("_", "-")
        assert fault(error) == (flag, Source.ENV, f"ZOMBIED_{name}", None)
        assert str(error).startswith(f"{flag} (from ZOMBIED_{name}): ")

    def test_options_of_other_commands_are_unused_but_checked(self) -> None:
        assert scan(env={"ZOMBIED_LISTEN": ":1"}).command == "scan"
        # One Deployment's environment can serve every command: a typo is still a typo.
        assert fault(failure(env={"ZOMBIED_OUTPUT": "xml"}))[:3] == (
            "--output",
            Source.ENV,
            "ZOMBIED_OUTPUT",
        )
        assert failure(env={"ZOMBIED_LISTEN": "x"}, command="scan").option == "--listen"


class TestPrecedence:
    def test_flag_over_env_over_file_over_default(self, tmp_path: Path) -> None:
        path = write(tmp_path, "qps: 3\nburst: 3\nmaxInFlight: 3\n")
        env = {"ZOMBIED_QPS": "2", "ZOMBIED_BURST": "2"}
        config = run("--config", path, "--qps", "1", env=env)
        merged = (config.qps, config.burst, config.max_in_flight, config.drain_timeout)
        assert merged == (1.0, 2, 3, 20.0)
        assert run("--dry-run", env={"ZOMBIED_DRY_RUN": "server"}).dry_run is DryRun.CLIENT

    def test_a_bad_value_fails_even_where_it_is_overridden(self, tmp_path: Path) -> None:
        # A typo must never hide behind a flag that happens to override it.
        path = write(tmp_path, "qps: -1\n")
        assert fault(failure("--config", path, "--qps", "1")) == ("qps", Source.FILE, path, 1)
        error = failure("--qps", "1", env={"ZOMBIED_QPS": "abc"})
        assert fault(error) == ("--qps", Source.ENV, "ZOMBIED_QPS", None)

    def test_config_file_flag_over_env(self, tmp_path: Path) -> None:
        path = write(tmp_path, "qps: 3\n")
        assert run(env={"ZOMBIED_CONFIG": path}).qps == 3.0
        assert run("--config", path, env={"ZOMBIED_CONFIG": "/nonexistent"}).qps == 3.0

    def test_min_age_of_a_rule(self, tmp_path: Path) -> None:
        # --rules NAME=AGE, then the file's minAge, then the rule's own, then --min-age.
        path = write(tmp_path, "minAge: 2m\nrules: [{name: evicted, minAge: 1s}, {name: failed}]\n")
        assert run("--config", path).rules.rules == (Rule("evicted", 1.0), Rule("failed", 120.0))
        config = run("--config", path, "--min-age", "5m", "--rules", "evicted,failed=1m")
        assert config.rules.rules == (Rule("evicted", 1.0), Rule("failed", 60.0))
        config = run("--config", path, "--rules", "admission-rejected,evicted=1m")
        assert config.rules.rules == (Rule("admission-rejected", 300.0), Rule("evicted", 60.0))


class TestFile:
    EVERYTHING = """
# a comment
kubeconfig: /k
context: prod
namespaces: [a, b, c]
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

    def test_every_option(self, tmp_path: Path) -> None:
        path = write(tmp_path, self.EVERYTHING)
        assert run("--config", path) == everything(config_file=path)
        scanned = scan("--config", path)
        scan_only = (scanned.output, scanned.no_headers, scanned.waiting, scanned.delete)
        assert scan_only == ("json", True, True, True)
        assert explain("--config", path, "a/b").rules == scanned.rules

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

    @pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n", "~\n"])
    def test_empty_file_is_an_error(self, tmp_path: Path, text: str) -> None:
        assert file_error(tmp_path, text).problem.startswith("the file sets nothing")

    @pytest.mark.parametrize(
        ("text", "key", "line", "problem"),
        [
            ("qps: 1\nburst: 2\nfoo: 3\n", "foo", 3, "unknown key"),
            ("config: other.yaml\n", "config", 1, "unknown key"),
            ("namespace: a\n", "namespace", 1, "unknown key; did you mean namespaces?"),
            # One key style for the whole file, Kubernetes' own.
            ("min_age: 1s\n", "min_age", 1, "unknown key; keys are camelCase: minAge"),
            ("exclude-namespaces: [a]\n", "exclude-namespaces", 1, "unknown key; keys are"),
            # Every value is read as its flag's text would be: the same words for each.
            ("qps: abc\n", "qps", 1, "must be a number > 0"),
            ("\n\nqps: -1\n", "qps", 3, "must be a number > 0"),
            ("qps: true\n", "qps", 1, "must be a number > 0"),
            ("qps: {a: 1}\n", "qps", 1, "must be one value, got a mapping"),
            ("burst: 2.5\n", "burst", 1, "must be a whole number >= 1"),
            ("leaderElect: maybe\n", "leaderElect", 1, "must be true or false"),
            ("namespaces: [a, 1]\n", "namespaces", 1, "must be a string or a list of strings"),
            ("namespaces: []\n", "namespaces", 1, "must name a namespace"),
            ("namespaces: {a: b}\n", "namespaces", 1, "must be a string or a list of strings"),
            ("\n\nminAge: forever\n", "minAge", 3, "must be a duration like 500ms, 30s"),
            ("drainTimeout: [1]\n", "drainTimeout", 1, "must be one value, got a list"),
            ("excludeOwnerKinds: [Deployment]\n", "excludeOwnerKinds", 1, "'Deployment':"),
            ("output: xml\n", "output", 1, "must be one of table"),  # scan's, still checked
            ("- qps\n", None, 1, "must be a mapping of option names to values"),
            ("just a string\n", None, 1, "must be a mapping of option names to values"),
            ("1: a\n", "[1]", 1, "keys must be"),
        ],
    )
    def test_errors_name_the_key_and_its_line(
        self, tmp_path: Path, text: str, key: str | None, line: int, problem: str
    ) -> None:
        error = file_error(tmp_path, text)
        assert (error.option, error.line) == (key, line)
        assert error.problem.startswith(problem)

    @pytest.mark.parametrize(
        ("text", "line"),
        [
            ("qps: 1\nqps: 2\n", 2),  # PyYAML would keep the last one silently
            ("a: 2024-13-01\n", None),
            ("a: " + "9" * 5000 + "\n", None),
            ("[" * 5000, None),
            ("qps: [1\n", 2),
            ("qps: 1\n  burst: 2\n", 2),
            ("a: 1\n---\nb: 2\n", 2),
            ("? [a, b]\n: 1\n", 1),
            ("qps: !!python/object:os.system x\n", 1),
        ],
    )
    def test_not_valid_yaml(self, tmp_path: Path, text: str, line: int | None) -> None:
        error = file_error(tmp_path, text)
        assert (error.option, error.line) == (None, line)
        assert error.problem.startswith("not valid YAML: ")

    def test_unreadable(self, tmp_path: Path) -> None:
        binary = tmp_path / "bad.yaml"
        binary.write_bytes(b"qps: \xff\xfe\n")
        for path in (str(tmp_path / "missing.yaml"), str(tmp_path), str(binary)):
            error = failure("--config", path)
            assert fault(error) == (None, Source.FILE, path, None)
            assert error.problem.startswith("cannot read the file: ")

    def test_conflict_across_sources(self, tmp_path: Path) -> None:
        path = write(tmp_path, "excludeNamespaces: [a]\n")
        assert failure("--config", path, "--namespaces", "a").option == "--exclude-namespaces"


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
        assert config.rules.names == ("node-shutdown", "gpu-not-ready")
        shutdown, gpu = config.rules.rules
        assert shutdown == Rule("node-shutdown", 60.0)
        assert gpu.min_age == 600.0
        assert gpu.pattern is not None
        assert gpu.pattern.phases == {"Failed"}
        assert gpu.pattern.reasons == {"UnexpectedAdmissionError"}
        assert gpu.pattern.message is not None
        assert gpu.pattern.message.pattern == r"nvidia\.com/gpu"
        assert gpu.pattern.owner_kinds == {"replicaset", "statefulset"}
        assert not gpu.builtin

    def test_rules_flag_enables_a_file_rule_by_name(self, tmp_path: Path) -> None:
        path = write(tmp_path, self.GPU)
        config = run("--config", path, "--rules", "gpu-not-ready=1s,evicted")
        assert config.rules.names == ("evicted", "gpu-not-ready")
        assert config.rules.get("gpu-not-ready") == replace(config.rules.rules[0], min_age=1.0)
        env = {"ZOMBIED_RULES": "gpu-not-ready"}
        assert run("--config", path, env=env).rules.names == ("gpu-not-ready",)

    def test_rules_flag_names_an_undefined_rule(self, tmp_path: Path) -> None:
        path = write(tmp_path, self.GPU)
        error = failure("--config", path, "--rules", "gpu")
        assert fault(error) == ("--rules", Source.FLAG, None, None)
        assert error.problem.endswith("the file defines node-shutdown, gpu-not-ready")
        error = failure(env={"ZOMBIED_RULES": "gpu"})
        assert fault(error) == ("--rules", Source.ENV, "ZOMBIED_RULES", None)

    @pytest.mark.parametrize(
        ("rule", "message"),
        [
            ("{name: x, phases: [Faild], reasons: [A]}", "phases: unknown phase 'Faild'"),
            (
                "{name: x, phases: [Running], reasons: [A]}",
                "phases: Running is not terminal; only Failed and Succeeded",
            ),
            ("{name: x, phases: [], reasons: [A]}", "phases: must not be empty"),
            ("{name: x, reasons: [A]}", "phases: is required"),
            ("{name: x, phases: Failed, reasons: [A]}", "phases: Input should be a valid tuple"),
            (
                "{name: x, phases: [Failed], reasons: [A], message: '(unclosed'}",
                "message: not a valid regular expression: missing ), unterminated",
            ),
            (
                "{name: x, phases: [Failed], reasons: [A], message: 5}",
                "message: Input should be a valid string",
            ),
            ("{name: x, phases: [Failed], reasons: []}", "reasons: must not be empty"),
            ("{name: x, phases: [Failed], reasons: ['']}", "reasons: must not hold an empty"),
            (
                "{name: x, phases: [Failed], reasons: [1]}",
                "reasons[0]: Input should be a valid string",
            ),
            ("{name: x, phases: [Failed]}", "reasons: a rule of your own needs reasons"),
            (
                "{name: x, phases: [Failed], reasons: [A], ownerKinds: [replica-set]}",
                "ownerKinds: 'replica-set' is not a valid kind",
            ),
            (
                "{name: x, phases: [Failed], reasons: [A], minAge: soon}",
                "minAge: must be a duration like 500ms",
            ),
            ("{name: x, minAge: [1]}", "minAge: must be one value, got a list"),
            ("{name: x, minAge: 99999999999h}", "minAge: a rule's min age must be from 0s to"),
            ("{name: failed, minAge: -1s}", "minAge: must be a duration >= 0, got '-1s'"),
            ("{name: x, age: 1s}", "age: unknown field (a rule takes name, minAge, phases,"),
            (
                "{name: failed, phases: [Failed], reasons: [A]}",
                "name: is a built-in rule; give your own rule another name",
            ),
            ("{name: evicted, message: x}", "message: a built-in rule takes only minAge"),
            ("{name: Bad_Name, phases: [Failed], reasons: [A]}", "name: rule names are lowercase"),
            ("{minAge: 1s}", "name: is required"),
        ],
    )
    def test_invalid_rule(self, tmp_path: Path, rule: str, message: str) -> None:
        error = file_error(tmp_path, f"qps: 1\nrules:\n  - {rule}\n")
        field, _, problem = message.partition(": ")
        assert (error.option, error.line) == (f"rules[0].{field}", 3)
        assert error.problem.startswith(problem)

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
            ("rules: [{name: 5}]\n", "rules[0].name", 1),
            ("rules:\n  - name: evicted\n    minAge: 1s\n    minAge: 2s\n", None, 4),
        ],
    )
    def test_errors_point_at_their_line(
        self, tmp_path: Path, text: str, key: str | None, line: int
    ) -> None:
        error = file_error(tmp_path, text)
        assert (error.option, error.line) == (key, line)


class TestHelp:
    @pytest.mark.parametrize("command", ["run", "scan", "explain"])
    def test_help_shows_defaults_and_env(self, command: str) -> None:
        out = io.StringIO()
        with pytest.raises(SystemExit) as info, contextlib.redirect_stdout(out):
            build_parser(command).parse_args(["--help"])
        assert info.value.code == 0
        text = " ".join(out.getvalue().split())
        assert f"usage: zombied {command}" in text
        assert "(default: 30s; env ZOMBIED_MIN_AGE)" in text
        assert ("--listen" in text) is (command == "run")
        assert ("--output" in text) is (command != "run")
        assert ("-n NS, --namespace NS" in text) is (command != "run")
        assert "one watch each" not in text
        formats = {
            "run": None,
            "scan": "table|wide|json|yaml|name",
            "explain": "table|json|yaml|name",
        }
        assert formats[command] is None or f"-o {formats[command]}" in text

    @pytest.mark.parametrize("flag", ["-h", "--help"])
    def test_help_flag_prints_help_and_exits_0(self, flag: str) -> None:
        out = io.StringIO()
        with pytest.raises(SystemExit) as info, contextlib.redirect_stdout(out):
            load_config("scan", ["--qps", "3", flag, "--nope"], {})
        assert info.value.code == 0
        assert out.getvalue().startswith("usage: zombied scan")
