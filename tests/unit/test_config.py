"""load_config: flags, environment, YAML file, precedence and every error path."""

from __future__ import annotations

import argparse
import contextlib
import io
from dataclasses import replace
from pathlib import Path

import pytest
from zombied.config import (
    OPTIONS,
    Config,
    DryRun,
    build_parser,
    format_duration,
    load_config,
    parse_duration,
    parse_label_selector,
)
from zombied.errors import ConfigError
from zombied.rules import Rule, RuleSet, Selection


def run(*argv: str, env: dict[str, str] | None = None) -> Config:
    return load_config("run", argv, env or {})


def scan(*argv: str, env: dict[str, str] | None = None) -> Config:
    return load_config("scan", argv, env or {})


def error(*argv: str, env: dict[str, str] | None = None, command: str = "run") -> str:
    with pytest.raises(ConfigError) as info:
        load_config(command, argv, env or {})
    message = str(info.value)
    assert "\n" not in message
    return message


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "zombied.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


class TestDefaults:
    def test_run(self) -> None:
        config = run()
        assert config.command == "run"
        assert config.namespaces == ()
        assert config.rules == RuleSet(
            (Rule("node-shutdown", 30.0), Rule("admission-rejected", 300.0))
        )
        assert config.rules == RuleSet()  # one default, whichever way it is asked
        assert config.dry_run is DryRun.OFF
        assert (config.listen_host, config.listen_port) == ("0.0.0.0", 8080)
        assert (config.qps, config.burst, config.max_in_flight) == (20.0, 100, 4)
        assert (config.lease_duration, config.renew_deadline, config.retry_period) == (
            15.0,
            10.0,
            2.0,
        )
        assert (config.watch_timeout_min, config.watch_timeout_max) == (300.0, 600.0)
        assert config.lease_namespace is None
        assert not config.leader_elect

    def test_scan(self) -> None:
        config = scan()
        assert config.command == "scan"
        assert config.output == "table"
        assert not config.delete

    def test_every_option_has_env_and_flag(self) -> None:
        for option in OPTIONS:
            assert option.env == "ZOMBIED_" + option.name.upper()
            assert option.flag == "--" + option.name.replace("_", "-")
            assert option.commands <= {"run", "scan", "explain"}
            assert option.help

    def test_unknown_command(self) -> None:
        with pytest.raises(ConfigError, match="unknown command 'nope'"):
            load_config("nope", [], {})
        with pytest.raises(ConfigError, match="unknown command"):
            build_parser("nope")


class TestDurations:
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
            ("1h30m", 5400.0),
            ("1h30m15s", 5415.0),
            ("1m500ms", 60.5),
            ("1.5h", 5400.0),
            (".5s", 0.5),
            (" 10s ", 10.0),
            ("0s", 0.0),
        ],
    )
    def test_valid(self, text: str, seconds: float) -> None:
        assert parse_duration(text) == pytest.approx(seconds)

    @pytest.mark.parametrize(
        "text", ["", "s", "10x", "1d", "-5s", "-1", "10 s", "1h 30m", "m5", "nan", "inf", "5s5"]
    )
    def test_invalid(self, text: str) -> None:
        with pytest.raises(ValueError, match="duration"):
            parse_duration(text)

    @pytest.mark.parametrize("seconds", [0, 0.5, 0.001, 1, 30, 90, 300, 3600, 5400, 5415, 2.5])
    def test_format_round_trip(self, seconds: float) -> None:
        assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)

    def test_format(self) -> None:
        assert [format_duration(s) for s in (0, 0.5, 30, 90, 3600, 5415, 2.4)] == [
            "0s",
            "500ms",
            "30s",
            "1m30s",
            "1h",
            "1h30m15s",
            "2.4s",
        ]


class TestLabelSelector:
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
            "app in (web,api)",
            "app in (web, api)",
            "app notin (web)",
            "tier in (a),env!=prod,!canary,example.com/team=x",
            "app.kubernetes.io/name=zombied",
            " app = web ",
            "k in (a,)",
            "app in ()",
            "app>5",
            "app >5 , tier",
            "a in(x),b notin(y)",
        ],
    )
    def test_valid(self, selector: str) -> None:
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
            "a b",
            "app=-web",
            "-app=web",
            "Bad_Prefix.com/app=x",
            "app=" + "x" * 64,
            "x" * 64,
            "app>x",
            "app<1.5",
            "app<-1",  # the value must also be a valid label value
            "app>",
            "app in (a b)",
            "in=x",
            "app=a=b",
            "!",
            "!!app",
        ],
    )
    def test_invalid(self, selector: str) -> None:
        assert error(f"--label-selector={selector}").startswith(
            "--label-selector: invalid label selector: "
        )


class TestFlags:
    def test_everything(self) -> None:
        config = run(
            "--kubeconfig=/k",
            "--context",
            "prod",
            "--namespaces",
            "a, b,a,,c",
            "--exclude-namespaces",
            "kube-system",
            "--label-selector",
            "app=web",
            "--rules",
            "failed=1h,node-shutdown",
            "--min-age",
            "1m",
            "--exclude-owner-kinds",
            "Job,DaemonSet",
            "--qps",
            "2.5",
            "--burst",
            "3",
            "--max-in-flight",
            "8",
            "--dry-run=server",
            "--listen",
            "127.0.0.1:0",
            "--drain-timeout",
            "5s",
            "--log-format",
            "JSON",
            "--log-level",
            "warn",
            "--leader-elect",
            "--lease-name",
            "zombied-prod",
            "--lease-namespace",
            "ops",
            "--lease-duration",
            "30s",
            "--renew-deadline",
            "20s",
            "--retry-period",
            "4s",
            "--watch-timeout",
            "2m",
        )
        assert config == replace(
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
        )

    @pytest.mark.parametrize(
        ("argv", "expected"),
        [
            ((), DryRun.OFF),
            (("--dry-run",), DryRun.CLIENT),
            (("--dry-run", "--qps", "1"), DryRun.CLIENT),
            (("--dry-run=client",), DryRun.CLIENT),
            (("--dry-run=server",), DryRun.SERVER),
            (("--dry-run", "server"), DryRun.SERVER),
            (("--dry-run=none",), DryRun.OFF),
            (("--dry-run=NONE",), DryRun.OFF),
        ],
    )
    def test_dry_run(self, argv: tuple[str, ...], expected: DryRun) -> None:
        assert run(*argv).dry_run is expected

    @pytest.mark.parametrize(
        ("argv", "expected"),
        [
            ((), False),
            (("--leader-elect",), True),
            (("--leader-elect=true",), True),
            (("--leader-elect=false",), False),
            (("--leader-elect", "no"), False),
        ],
    )
    def test_leader_elect(self, argv: tuple[str, ...], expected: bool) -> None:
        assert run(*argv).leader_elect is expected

    @pytest.mark.parametrize(
        ("listen", "host", "port"),
        [
            ("0.0.0.0:8080", "0.0.0.0", 8080),
            (":9090", "0.0.0.0", 9090),
            ("localhost:0", "localhost", 0),
            ("[::]:8080", "::", 8080),
            ("[::1]:65535", "::1", 65535),
        ],
    )
    def test_listen(self, listen: str, host: str, port: int) -> None:
        config = run("--listen", listen)
        assert (config.listen_host, config.listen_port) == (host, port)

    def test_scan_options(self) -> None:
        config = scan("--output", "json", "--delete", "--dry-run")
        assert (config.output, config.delete, config.dry_run) == ("json", True, DryRun.CLIENT)

    def test_delete_with_dry_run_is_a_dry_run(self) -> None:
        # Allowed on purpose: `scan --delete --dry-run=server` rehearses the deletes.
        config = scan("--delete", "--dry-run=server")
        assert config.delete
        assert config.dry_run is DryRun.SERVER

    def test_namespaces_empty_means_all(self) -> None:
        assert run("--namespaces", "").namespaces == ()

    def test_exclude_other_namespace_is_fine(self) -> None:
        config = run("--namespaces", "a", "--exclude-namespaces", "b")
        assert (config.namespaces, config.exclude_namespaces) == (("a",), ("b",))

    def test_last_flag_wins(self) -> None:
        assert run("--qps", "1", "--qps", "2").qps == 2.0

    def test_rule_own_min_age(self) -> None:
        config = run("--rules", "evicted=0,node-shutdown=500ms", "--min-age", "1h")
        assert config.rules.get("evicted") == Rule("evicted", 0.0)
        assert config.rules.get("node-shutdown") == Rule("node-shutdown", 0.5)


class TestFlagErrors:
    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (("--qps", "abc"), "--qps: must be a number > 0, got 'abc'"),
            (("--qps", "0"), "--qps: must be a number > 0, got '0'"),
            (("--qps", "-1"), "--qps: must be a number > 0, got '-1'"),
            (("--qps", "inf"), "--qps: must be a number > 0, got 'inf'"),
            (("--qps", "nan"), "--qps: must be a number > 0, got 'nan'"),
            (("--burst", "0"), "--burst: must be a whole number >= 1, got '0'"),
            (("--burst", "1.5"), "--burst: must be a whole number >= 1, got '1.5'"),
            (("--max-in-flight", "x"), "--max-in-flight: must be a whole number >= 1, got 'x'"),
            (("--min-age", "soon"), "--min-age: must be a duration like"),
            (("--min-age=-5s",), "--min-age: must be a duration like"),
            (("--min-age", "-5s"), "--min-age: expected one argument"),
            (("--drain-timeout", "1d"), "--drain-timeout: must be a duration like"),
            (
                ("--rules", "bogus"),
                "--rules: unknown rule 'bogus': a built-in (node-shutdown, admission-rejected, ",
            ),
            (("--rules", "failed,failed"), "--rules: rule 'failed' listed twice"),
            (("--rules", ""), "--rules: must name at least one rule"),
            (("--rules", "evicted=later"), "--rules: must be a duration like"),
            (("--namespaces", "Bad_NS"), "--namespaces: 'Bad_NS' is not a valid namespace name"),
            (("--exclude-namespaces", "a/b"), "--exclude-namespaces: 'a/b' is not a valid"),
            (("--exclude-owner-kinds", "Job!"), "--exclude-owner-kinds: 'Job!' is not a valid"),
            (("--dry-run=maybe",), "--dry-run: must be one of client, server, none, got 'maybe'"),
            (("--listen", "8080"), "--listen: must be HOST:PORT, got '8080'"),
            (("--listen", "h:70000"), "--listen: port must be a number from 0 to 65535"),
            (("--listen", "h:-1"), "--listen: port must be a number from 0 to 65535"),
            (("--listen", "h:x"), "--listen: port must be a number from 0 to 65535"),
            (("--listen", "::1:80"), "--listen: IPv6 hosts need brackets"),
            (("--listen", "a b:80"), "--listen: 'a b' is not a host name"),
            (("--log-format", "xml"), "--log-format: must be one of auto, json, console"),
            (("--log-level", "trace"), "--log-level: must be one of debug, info, warning"),
            (("--leader-elect=maybe",), "--leader-elect: must be true or false, got 'maybe'"),
            (("--lease-name", "Bad Name"), "--lease-name: must be a lowercase DNS name"),
            (("--lease-namespace", "a.b"), "--lease-namespace: must be a valid namespace name"),
            (("--lease-duration", "0s"), "--lease-duration: must be a duration > 0"),
            (("--retry-period", "0"), "--retry-period: must be a duration > 0"),
            (("--watch-timeout", "500ms"), "--watch-timeout: must be at least 1s"),
            (("--kubeconfig", ""), "--kubeconfig: must not be empty"),
            (("--context", " "), "--context: must not be empty"),
            (("--qps",), "--qps: expected one argument"),
            (("--bogus",), "--bogus: unknown option for 'zombied run'"),
            (("--bogus=1",), "--bogus: unknown option for 'zombied run'"),
            (("--q", "1"), "--q: unknown option for 'zombied run'"),  # no abbreviations
            (("stray",), "stray: unexpected argument for 'zombied run'"),
            (("--output", "json"), "--output: unknown option for 'zombied run'"),
            (("--delete",), "--delete: unknown option for 'zombied run'"),
        ],
    )
    def test_run(self, argv: tuple[str, ...], message: str) -> None:
        assert error(*argv).startswith(message)

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (
                ("--output", "xml"),
                "--output: must be one of table, wide, json, yaml, name, got 'xml'",
            ),
            (("--delete=perhaps",), "--delete: must be true or false"),
            (("--listen", ":80"), "--listen: unknown option for 'zombied scan'"),
            (("--leader-elect",), "--leader-elect: unknown option for 'zombied scan'"),
        ],
    )
    def test_scan(self, argv: tuple[str, ...], message: str) -> None:
        assert error(*argv, command="scan").startswith(message)

    def test_conflicting_namespaces(self) -> None:
        assert error("--namespaces", "a,b", "--exclude-namespaces", "c,b") == (
            "--exclude-namespaces: 'b' is also listed in --namespaces; name it in only one of them"
        )

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (("--lease-duration", "10s"), "--lease-duration: must be longer than --renew-deadline"),
            (
                ("--lease-duration", "5s", "--renew-deadline", "5s"),
                "--lease-duration: must be longer than --renew-deadline (5s), got 5s",
            ),
            (
                ("--retry-period", "9s"),
                "--renew-deadline: must be longer than 1.2 x --retry-period (10.8s), got 10s",
            ),
            (
                ("--renew-deadline", "2.4s"),
                "--renew-deadline: must be longer than 1.2 x --retry-period",
            ),
        ],
    )
    def test_lease_timing(self, argv: tuple[str, ...], message: str) -> None:
        assert error(*argv).startswith(message)

    def test_lease_timing_boundary_ok(self) -> None:
        config = run("--lease-duration", "3s", "--renew-deadline", "2.5s", "--retry-period", "2s")
        assert config.renew_deadline == 2.5

    def test_lease_timing_not_checked_for_scan(self) -> None:
        env = {"ZOMBIED_LEASE_DURATION": "1s"}
        assert scan(env=env).lease_duration == 15.0


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
        }
        config = run(env=env)
        assert config.namespaces == ("x", "y")
        assert config.qps == 9.0
        assert config.dry_run is DryRun.SERVER
        assert config.leader_elect
        assert config.rules == RuleSet((Rule("evicted", 120.0),), scope=Selection(("x", "y")))
        assert config.listen_port == 0

    @pytest.mark.parametrize(
        ("value", "expected"),
        [("true", True), ("TRUE", True), ("1", True), ("false", False), ("0", False)],
    )
    def test_leader_elect_env(self, value: str, expected: bool) -> None:
        assert run(env={"ZOMBIED_LEADER_ELECT": value}).leader_elect is expected

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("true", DryRun.CLIENT),
            ("false", DryRun.OFF),
            ("none", DryRun.OFF),
            ("client", DryRun.CLIENT),
        ],
    )
    def test_dry_run_env(self, value: str, expected: DryRun) -> None:
        assert run(env={"ZOMBIED_DRY_RUN": value}).dry_run is expected

    def test_error_names_flag_and_variable(self) -> None:
        assert error(env={"ZOMBIED_QPS": "abc"}) == (
            "--qps (from ZOMBIED_QPS): must be a number > 0, got 'abc'"
        )

    def test_options_of_other_command_unused_but_checked(self) -> None:
        assert run(env={"ZOMBIED_OUTPUT": "json"}).output == "table"
        assert scan(env={"ZOMBIED_LISTEN": ":1"}).listen_port == 8080
        # One Deployment's environment can serve every command: a typo is still a typo.
        assert error(env={"ZOMBIED_OUTPUT": "xml"}).startswith("--output (from ZOMBIED_OUTPUT)")
        assert error(env={"ZOMBIED_LISTEN": "x"}, command="scan").startswith("--listen (from")

    def test_empty_value_is_a_value(self) -> None:
        assert run(env={"ZOMBIED_NAMESPACES": ""}).namespaces == ()
        assert error(env={"ZOMBIED_QPS": ""}).startswith("--qps (from ZOMBIED_QPS): must be")


class TestFile:
    def test_every_option(self, tmp_path: Path) -> None:
        path = write(
            tmp_path,
            """
# a comment
kubeconfig: /k
context: prod
namespaces: [a, b]
exclude-namespaces: kube-system
label_selector: app=web
rules:
  - name: node-shutdown
    minAge: 45s
  - name: evicted
min-age: 10m
exclude_owner_kinds:
  - Job
qps: 2
burst: 3
max_in_flight: 5
dry_run: server
listen: 127.0.0.1:9000
drain_timeout: 7
log_format: json
log_level: debug
leader_elect: true
lease_name: z
lease_namespace: ops
lease_duration: 20s
renew_deadline: 12s
retry_period: 1s
watch_timeout: 1m
output: json
delete: true
""",
        )
        config = run("--config", path)
        assert config == replace(
            run(),
            kubeconfig="/k",
            context="prod",
            namespaces=("a", "b"),
            exclude_namespaces=("kube-system",),
            label_selector="app=web",
            rules=RuleSet(
                (Rule("node-shutdown", 45.0), Rule("evicted", 600.0)),
                frozenset({"Job"}),
                Selection(("a", "b"), ("kube-system",), "app=web"),
            ),
            qps=2.0,
            burst=3,
            max_in_flight=5,
            dry_run=DryRun.SERVER,
            listen_host="127.0.0.1",
            listen_port=9000,
            drain_timeout=7.0,
            log_format="json",
            log_level="debug",
            leader_elect=True,
            lease_name="z",
            lease_namespace="ops",
            lease_duration=20.0,
            renew_deadline=12.0,
            retry_period=1.0,
            watch_timeout_min=60.0,
            watch_timeout_max=120.0,
            config_file=path,
        )
        scanned = scan("--config", path)
        assert (scanned.output, scanned.delete) == ("json", True)

    @pytest.mark.parametrize(
        ("rules", "expected"),
        [
            (
                "rules: [{name: node-shutdown, minAge: 30s}, {name: evicted, minAge: 10m}]",
                (Rule("node-shutdown", 30.0), Rule("evicted", 600.0)),
            ),
            ("rules: [{name: failed}]", (Rule("failed", 30.0),)),
            ("rules: [{name: failed, minAge: 1.5}]", (Rule("failed", 1.5),)),
            ("rules: [{name: failed, minAge: null}]", (Rule("failed", 30.0),)),
            ("rules: [{name: admission-rejected}]", (Rule("admission-rejected", 300.0),)),
            ("rules: [{name: admission-rejected, minAge: 0}]", (Rule("admission-rejected", 0.0),)),
        ],
    )
    def test_rule_shapes(self, tmp_path: Path, rules: str, expected: tuple[Rule, ...]) -> None:
        config = run("--config", write(tmp_path, rules + "\n"))
        assert config.rules.rules == expected

    def test_min_age_is_default_for_rules_without_their_own(self, tmp_path: Path) -> None:
        path = write(
            tmp_path, "min_age: 2m\nrules: [{name: evicted, minAge: 1s}, {name: failed}]\n"
        )
        config = run("--config", path)
        assert config.rules.rules == (Rule("evicted", 1.0), Rule("failed", 120.0))
        config = run("--config", path, "--min-age", "5m")
        assert config.rules.rules == (Rule("evicted", 1.0), Rule("failed", 300.0))

    @pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n", "~\n"])
    def test_empty_file_is_an_error(self, tmp_path: Path, text: str) -> None:
        message = error("--config", write(tmp_path, text))
        assert message.endswith(": the file sets nothing; give at least one option")

    def test_null_value_keeps_default(self, tmp_path: Path) -> None:
        assert run("--config", write(tmp_path, "qps:\nlease_namespace: null\n")).qps == 20.0
        assert run("--config", write(tmp_path, "qps: 1\nrules:\n")).rules == RuleSet()

    def test_config_from_env(self, tmp_path: Path) -> None:
        path = write(tmp_path, "qps: 3\n")
        assert run(env={"ZOMBIED_CONFIG": path}).qps == 3.0

    def test_config_flag_beats_env(self, tmp_path: Path) -> None:
        path = write(tmp_path, "qps: 3\n")
        assert run("--config", path, env={"ZOMBIED_CONFIG": "/nonexistent"}).qps == 3.0

    def test_keys_of_the_other_command_are_unused_but_checked(self, tmp_path: Path) -> None:
        path = write(tmp_path, "output: json\nlisten: ':1'\n")
        assert run("--config", path).output == "table"
        assert scan("--config", path).listen_port == 8080
        path = write(tmp_path, "output: xml\n")
        assert "line 1: output: must be one of" in error("--config", path)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("qps: 1\nburst: 2\nfoo: 3\n", "line 3: unknown key 'foo'"),
            ("config: other.yaml\n", "line 1: unknown key 'config'"),
            ("qps: 1\nqps: 2\n", "line 2: 'qps' is already set on line 1"),
            ("min-age: 1s\nmin_age: 2s\n", "line 2: 'min_age' is already set on line 1"),
            ("qps: abc\n", "line 1: qps: must be a number > 0, got 'abc'"),
            ("qps: true\n", "line 1: qps: must be a single value, got a boolean"),
            ("qps: [1]\n", "line 1: qps: must be a single value, got a list"),
            ("qps: {a: 1}\n", "line 1: qps: must be a single value, got a mapping"),
            ("burst: 2.5\n", "line 1: burst: must be a whole number >= 1, got '2.5'"),
            ("namespaces: [a, 1]\n", "line 1: namespaces: must be a list of strings"),
            ("namespaces: {a: b}\n", "line 1: namespaces: must be a string or a list"),
            ("\n\nmin_age: forever\n", "line 3: min_age: must be a duration like"),
            ("leader_elect: maybe\n", "line 1: leader_elect: must be true or false"),
            ("- qps\n", "line 1: must be a mapping of option names to values"),
            ("just a string\n", "line 1: must be a mapping of option names to values"),
            ("qps: [1\n", "not valid YAML"),
            ("qps: 1\n  burst: 2\n", "line 2: not valid YAML"),
            ("a: 1\n---\nb: 2\n", "not valid YAML"),
            ("? [a, b]\n: 1\n", "line 1: keys must be option names"),
            ("qps: !!python/object:os.system x\n", "not valid YAML"),
        ],
    )
    def test_errors(self, tmp_path: Path, text: str, message: str) -> None:
        path = write(tmp_path, text)
        got = error("--config", path)
        assert got.startswith(f"--config {path}: ")
        assert message in got

    def test_unreadable(self, tmp_path: Path) -> None:
        missing = str(tmp_path / "missing.yaml")
        assert error("--config", missing) == (
            f"--config {missing}: cannot read the file: No such file or directory"
        )
        assert error("--config", str(tmp_path)).startswith(f"--config {tmp_path}: cannot read")

    def test_not_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.yaml"
        path.write_bytes(b"qps: \xff\xfe\n")
        assert error("--config", str(path)).startswith(f"--config {path}: cannot read the file")

    def test_conflict_across_sources(self, tmp_path: Path) -> None:
        path = write(tmp_path, "exclude_namespaces: [a]\n")
        assert error("--config", path, "--namespaces", "a").startswith("--exclude-namespaces: 'a'")


class TestPrecedence:
    def test_flag_over_env_over_file_over_default(self, tmp_path: Path) -> None:
        path = write(tmp_path, "qps: 3\nburst: 3\nmax_in_flight: 3\n")
        env = {"ZOMBIED_QPS": "2", "ZOMBIED_BURST": "2"}
        config = run("--config", path, "--qps", "1", env=env)
        assert (config.qps, config.burst, config.max_in_flight, config.drain_timeout) == (
            1.0,
            2,
            3,
            20.0,
        )

    def test_bad_lower_source_still_fails(self, tmp_path: Path) -> None:
        # A typo must never hide behind a flag that happens to override it.
        path = write(tmp_path, "qps: abc\n")
        assert "qps: must be a number" in error("--config", path, "--qps", "1")

    def test_bad_env_overridden_by_flag_still_fails(self) -> None:
        # Same rule as for the file: the override may go away; the typo must not wait.
        assert error("--qps", "1", env={"ZOMBIED_QPS": "abc"}) == (
            "--qps (from ZOMBIED_QPS): must be a number > 0, got 'abc'"
        )

    def test_rules_flag_picks_which_file_rules_are_on(self, tmp_path: Path) -> None:
        path = write(tmp_path, "rules: [{name: evicted, minAge: 1s}, {name: node-shutdown}]\n")
        config = run("--config", path, "--rules", "evicted,failed")
        assert config.rules.rules == (Rule("evicted", 1.0), Rule("failed", 30.0))
        config = run("--config", path, "--rules", "evicted=1m")
        assert config.rules.rules == (Rule("evicted", 60.0),)

    def test_dry_run_flag_over_env(self) -> None:
        assert run("--dry-run", env={"ZOMBIED_DRY_RUN": "server"}).dry_run is DryRun.CLIENT


class TestHelpAndReference:
    @pytest.mark.parametrize("command", ["run", "scan", "explain"])
    def test_help_shows_defaults_and_env(self, command: str) -> None:
        out = io.StringIO()
        with pytest.raises(SystemExit) as info, contextlib.redirect_stdout(out):
            build_parser(command).parse_args(["--help"])
        assert info.value.code == 0
        text = out.getvalue()
        assert f"usage: zombied {command}" in text
        assert "(default: 30s; env ZOMBIED_MIN_AGE)" in " ".join(text.split())
        assert ("--listen" in text) is (command == "run")
        assert ("--output" in text) is (command != "run")

    def test_parser_keeps_raw_values_and_omits_unset(self) -> None:
        namespace = build_parser("run").parse_args(["--qps", "3"])
        assert vars(namespace) == {"qps": "3"}

    def test_parser_errors_raise(self) -> None:
        with pytest.raises(ConfigError, match=r"^--nope: unknown option"):
            build_parser("run").parse_args(["--nope"])
        assert isinstance(build_parser("run"), argparse.ArgumentParser)


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
        assert config.rules.get("gpu-not-ready") is not None
        assert config.rules.get("gpu-not-ready").min_age == 1.0  # type: ignore[union-attr]
        env = {"ZOMBIED_RULES": "gpu-not-ready"}
        assert run("--config", path, env=env).rules.names == ("gpu-not-ready",)

    def test_rules_flag_names_an_undefined_rule(self, tmp_path: Path) -> None:
        path = write(tmp_path, self.GPU)
        message = error("--config", path, "--rules", "gpu")
        assert message.startswith("--rules: unknown rule 'gpu'")
        assert message.endswith("the file defines node-shutdown, gpu-not-ready")
        message = error(env={"ZOMBIED_RULES": "gpu"})
        assert message.startswith("--rules (from ZOMBIED_RULES): unknown rule 'gpu'")

    @pytest.mark.parametrize(
        ("rule", "message"),
        [
            ("{name: x, phases: [Faild], reasons: [A]}", "rule 'x': phases: unknown phase 'Faild'"),
            (
                "{name: x, phases: [Running], reasons: [A]}",
                "rule 'x': phases: Running is not terminal; only Failed and Succeeded",
            ),
            ("{name: x, phases: [], reasons: [A]}", "rule 'x': phases: must not be empty"),
            ("{name: x, reasons: [A]}", "rule 'x': phases: is required"),
            ("{name: x, phases: Failed, reasons: [A]}", "rule 'x': phases: must be a list"),
            (
                "{name: x, phases: [Failed], reasons: [A], message: '(unclosed'}",
                "rule 'x': message: not a valid regular expression: missing ), unterminated",
            ),
            ("{name: x, phases: [Failed], reasons: [A], message: 5}", "rule 'x': message: must be"),
            ("{name: x, phases: [Failed], reasons: []}", "rule 'x': reasons: must not be empty"),
            ("{name: x, phases: [Failed], reasons: [1]}", "rule 'x': reasons: must be a list"),
            ("{name: x, phases: [Failed]}", "rule 'x': reasons: a rule of your own needs reasons"),
            ("{name: x}", "rule 'x': reasons: a rule of your own needs reasons"),
            (
                "{name: x, phases: [Failed], reasons: [A], ownerKinds: [replica-set]}",
                "rule 'x': ownerKinds: 'replica-set' is not a valid kind",
            ),
            (
                "{name: x, phases: [Failed], reasons: [A], minAge: soon}",
                "rule 'x': minAge: must be a duration like",
            ),
            ("{name: x, phases: [Failed], reasons: [A], minAge: [1]}", "rule 'x': minAge: must be"),
            ("{name: x, phases: [Failed], reasons: [A], age: 1s}", "rule 'x': age: unknown field"),
            ("{name: failed, minAge: -1s}", "rule 'failed': minAge: must be a duration"),
            (
                "{name: failed, phases: [Failed], reasons: [A]}",
                "rule 'failed': name: is a built-in rule; give your own rule another name",
            ),
            ("{name: evicted, message: x}", "rule 'evicted': message: a built-in rule takes only"),
            ("{name: Bad_Name, phases: [Failed], reasons: [A]}", "rules: name: rule names are"),
            ("{minAge: 1s}", "rules: name: rule names are"),
            ("evicted", "rules: each rule must be a mapping with a name"),
        ],
    )
    def test_invalid_rule(self, tmp_path: Path, rule: str, message: str) -> None:
        path = write(tmp_path, f"qps: 1\nrules:\n  - {rule}\n")
        got = error("--config", path)
        assert got.startswith(f"--config {path}: line 3: ")
        assert message in got

    def test_duplicate_name(self, tmp_path: Path) -> None:
        text = "rules:\n  - name: evicted\n  - name: x\n    phases: [Failed]\n    reasons: [A]\n"
        text += "  - name: evicted\n    minAge: 1s\n"
        path = write(tmp_path, text)
        assert error("--config", path) == (
            f"--config {path}: line 6: rules: rule 'evicted': name: already defined on line 2"
        )

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("rules: evicted\n", "line 1: rules: must be a list of rules"),
            ("rules: {evicted: 1m}\n", "line 1: rules: must be a list of rules"),
            ("rules: 5\n", "line 1: rules: must be a list of rules"),
        ],
    )
    def test_only_the_list_shape(self, tmp_path: Path, text: str, message: str) -> None:
        assert message in error("--config", write(tmp_path, text))

    def test_rules_apply_to_scan_and_explain(self, tmp_path: Path) -> None:
        path = write(tmp_path, self.GPU)
        assert scan("--config", path).rules.names == ("node-shutdown", "gpu-not-ready")
        config = load_config("explain", ["ns/pod", "--config", path], {})
        assert config.rules.names == ("node-shutdown", "gpu-not-ready")


class TestExplainArguments:
    def test_target_and_short_output(self) -> None:
        config = load_config("explain", ["team-a/web-0", "-o", "json"], {})
        assert config.target == ("team-a", "web-0")
        assert config.output == "json"

    @pytest.mark.parametrize("target", ["web-0", "team-a/", "/web-0", "Team/web", "a/b/c"])
    def test_bad_target(self, target: str) -> None:
        assert error(target, command="explain").startswith("zombied explain: must be NAMESPACE/POD")

    def test_missing_target(self) -> None:
        assert "NAMESPACE/POD" in error(command="explain")


def test_rule_error_points_at_the_field_line(tmp_path: Path) -> None:
    text = "rules:\n  - name: gpu\n    reasons: [A]\n    phases: [Faild]\n"
    path = write(tmp_path, text)
    assert error("--config", path) == (
        f"--config {path}: line 4: rules: rule 'gpu': phases: unknown phase 'Faild' "
        "(known: Pending, Running, Succeeded, Failed, Unknown)"
    )
