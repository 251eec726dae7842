"""``zombied explain``: one GET, every verdict explained, and nothing ever written."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from zombied.cli import main
from zombied.config import DryRun
from zombied.errors import ZombiedError
from zombied.explain import RENDERERS, as_json, explain, run_explain
from zombied.kube import ApiError
from zombied.rules import Decision, Rule, RuleSet

from kubesim import Simulator
from kubesim.rbac import PolicyRule
from kubesim.scenario import rejected_pod
from tests.daemon import pods
from tests.daemon.conftest import ConfigFactory
from tests.daemon.pods import pod

NOW = datetime.now(UTC).replace(microsecond=0)
DEFAULT_RULES = RuleSet()


def zombie(name: str, **kwargs: Any) -> dict[str, Any]:
    """A shutdown zombie that finished a minute before ``NOW``, however late the test runs."""
    return pods.zombie(name, at=NOW, **kwargs)


def checks(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["name"]: rule for rule in result["rules"]}


def vetoes(result: dict[str, Any]) -> dict[str, bool]:
    return {veto["name"]: veto["applies"] for veto in result["vetoes"]}


def admission(name: str, reason: str = "NodeAffinity", **kwargs: Any) -> dict[str, Any]:
    """A pod that ran until its node vanished, rejected when the node came back."""
    obj = pod(name, **kwargs)
    obj["metadata"]["uid"] = f"uid-{name}"
    running = {"running": {"startedAt": "2024-05-01T12:00:00Z"}}
    obj["status"]["containerStatuses"] = [{"name": "app", "ready": True, "state": running}]
    return rejected_pod(obj, version="1.27", reason=reason, now=NOW - timedelta(minutes=10))


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
    return obj


def deleting(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return obj


# -- the pure function: one test per decision -----------------------------------------


def explained(obj: dict[str, Any], config: ConfigFactory, **settings: Any) -> dict[str, Any]:
    return as_json(explain(obj, config(command="explain", **settings), NOW))


class TestDecisions:
    def test_due_zombie_is_deleted_now(self, config: ConfigFactory) -> None:
        result = explained(admission("web-1"), config, rules=DEFAULT_RULES)
        assert (result["decision"], result["rule"]) == ("delete", "admission-rejected")
        assert result["summary"].startswith("delete it now: rule admission-rejected matches")
        rules = checks(result)
        assert rules["admission-rejected"]["matches"]
        assert rules["admission-rejected"]["minAge"] == "5m"
        assert not rules["node-shutdown"]["matches"]
        assert rules["node-shutdown"]["mismatch"].startswith("reason 'NodeAffinity' is not one")
        assert not any(vetoes(result).values())

    def test_young_zombie_waits_with_its_due_time(self, config: ConfigFactory) -> None:
        cfg = config(command="explain", rules=RuleSet((Rule("node-shutdown", 600.0),)))
        obj = stored(zombie("web-2"))
        finished = NOW - timedelta(seconds=60)
        terminated = obj["status"]["containerStatuses"][0]["state"]["terminated"]
        terminated["finishedAt"] = finished.strftime("%Y-%m-%dT%H:%M:%SZ")
        explanation = explain(obj, cfg, NOW)
        assert explanation.decision is Decision.WAIT
        assert explanation.judgement.due == NOW + timedelta(seconds=540)
        assert explanation.judgement.since == finished
        assert explanation.summary.endswith(
            "(in 9m): rule node-shutdown matches, min age not yet reached"
        )

    def test_pod_without_termination_time_says_what_it_waits_for(
        self, config: ConfigFactory
    ) -> None:
        cfg = config(command="explain", rules=RuleSet((Rule("node-shutdown", 30.0),)))
        obj = stored(zombie("web-3", finished_ago=None))
        first, later = (explain(obj, cfg, NOW + timedelta(minutes=m)) for m in (0, 5))
        assert first.decision is later.decision is Decision.WAIT
        # The same answer at every run, never "in 30s": the wait starts when zombied
        # first sees the pod, which a one-off explain cannot know.
        assert (
            first.summary
            == later.summary
            == (
                "delete it 30s after first seen: rule node-shutdown matches, "
                "and the pod carries no termination time (no container finishedAt, no "
                "DisruptionTarget or Ready condition) to count its min age from"
            )
        )
        table = RENDERERS["table"](first)
        assert "Terminal:   unknown: no container finishedAt" in table
        assert "MATCH     min age 30s, due 30s after first seen" in table
        result = as_json(first)
        assert (result["due"], checks(result)["node-shutdown"]["due"]) == (None, None)
        assert result["pod"]["terminatedAt"] is None

    @pytest.mark.parametrize(
        ("obj", "skip", "matches"),
        [
            (zombie("web-4", annotations={"zombied.io/keep": "true"}), "keep-annotation", True),
            (zombie("web-4", owner=("Job", "nightly")), "owner-excluded", True),
            (deleting(zombie("web-5")), "deleting", True),
            (pod("api-1"), "not-terminal", False),
            (pod("crash", phase="Failed", reason="Error", message="boom"), "no-rule", False),
        ],
        ids=lambda value: value if isinstance(value, str) else None,
    )
    def test_kept_pods_say_why(
        self, config: ConfigFactory, obj: dict[str, Any], skip: str, matches: bool
    ) -> None:
        both = (Rule("node-shutdown", 0.0), Rule("admission-rejected", 0.0))
        rules = RuleSet(both, frozenset({"Job"}))
        result = explained(stored(obj), config, rules=rules)
        assert (result["decision"], result["skip"]) == ("keep", skip)
        if skip == "no-rule":
            assert result["summary"] == "keep: no enabled rule matches"
        else:
            assert vetoes(result)[skip]
            assert result["summary"].startswith(f"keep: vetoed by {skip} ")
        # A veto, not the rule, keeps a zombie: the rule still says it matches.
        assert checks(result)["node-shutdown"]["matches"] is matches
        if skip == "not-terminal":
            mismatch = checks(result)["node-shutdown"]["mismatch"]
            assert mismatch == "phase Running is not Failed or Succeeded"

    def test_a_rule_that_does_not_match_gives_no_due_time(self, config: ConfigFactory) -> None:
        cfg = config(command="explain", rules=DEFAULT_RULES)
        result = yaml.safe_load(RENDERERS["yaml"](explain(admission("web-1"), cfg, NOW)))
        due = {name: check["due"] for name, check in checks(result).items()}
        assert due["node-shutdown"] is None
        assert due["admission-rejected"] == result["due"] is not None

    @pytest.mark.parametrize(("value", "says"), [("yes", True), ("", True), ("true", False)])
    def test_a_keep_value_not_understood_is_said_and_kept(
        self, config: ConfigFactory, value: str, says: bool
    ) -> None:
        obj = stored(zombie("web-4", annotations={"zombied.io/keep": value}))
        result = explained(obj, config, rules=DEFAULT_RULES)
        assert (result["decision"], result["skip"]) == ("keep", "keep-annotation")
        (keep,) = [veto for veto in result["vetoes"] if veto["name"] == "keep-annotation"]
        assert ("not understood" in keep["evidence"]) is says

    @pytest.mark.parametrize(
        ("settings", "why"),
        [
            ({"namespaces": ("team-b",)}, "namespace team-a is not in --namespaces (team-b)"),
            ({"exclude_namespaces": ("team-a",)}, "namespace team-a is in --exclude-namespaces"),
            ({"label_selector": "app notin (web)"}, "labels do not match --label-selector"),
            ({"label_selector": "tier"}, "labels do not match --label-selector"),
        ],
    )
    def test_out_of_scope(self, config: ConfigFactory, settings: dict[str, Any], why: str) -> None:
        result = explained(stored(zombie("web-6")), config, **settings)
        assert vetoes(result)["out-of-scope"]
        assert (result["decision"], result["zombie"]) == ("keep", False)
        assert why in result["summary"]

    @pytest.mark.parametrize(
        ("dry_run", "words"),
        [
            (DryRun.CLIENT, "log that it would delete it (--dry-run=client) now"),
            (DryRun.SERVER, "send a dry-run DELETE (--dry-run=server) now"),
        ],
    )
    def test_dry_run_is_said(self, config: ConfigFactory, dry_run: DryRun, words: str) -> None:
        result = explained(admission("web-7"), config, rules=DEFAULT_RULES, dry_run=dry_run)
        assert result["summary"].startswith(words)


class TestOutputs:
    def test_table_report(self, config: ConfigFactory) -> None:
        explanation = explain(
            admission("web-8", "OutOfcpu"), config(command="explain", rules=DEFAULT_RULES), NOW
        )
        lines = RENDERERS["table"](explanation).splitlines()
        assert lines[0] == "Pod:        team-a/web-8 (uid uid-web-8)"
        assert "Reason:     OutOfcpu" in lines
        assert any(line.split()[:2] == ["admission-rejected", "MATCH"] for line in lines)
        assert any(line.split()[:3] == ["node-shutdown", "no", "match"] for line in lines)
        assert any(line.split()[:2] == ["keep-annotation", "no"] for line in lines)
        assert lines[-2] == "Decision:   delete"

    def test_json_is_kubernetes_style_and_times_have_no_fraction(
        self, config: ConfigFactory
    ) -> None:
        obj = stored(zombie("web-9", owner=None))
        terminated = obj["status"]["containerStatuses"][0]["state"]["terminated"]
        terminated["finishedAt"] = "2026-03-01T12:00:03.123456Z"
        now = datetime(2026, 3, 1, 12, 0, 10, 987654, tzinfo=UTC)
        cfg = config(command="explain", rules=RuleSet((Rule("node-shutdown", 30.0),)))
        explanation = explain(obj, cfg, now)
        result = as_json(explanation)
        assert result["pod"]["owner"] is None
        assert result["pod"]["terminatedAt"] == "2026-03-01T12:00:03Z"
        assert (result["now"], result["due"]) == ("2026-03-01T12:00:10Z", "2026-03-01T12:00:33Z")
        assert result["summary"].startswith("delete it at 2026-03-01T12:00:33Z (in 22s): ")
        assert "due 2026-03-01T12:00:33Z (in 22s)" in RENDERERS["table"](explanation)
        assert json.loads(RENDERERS["json"](explanation)) == result
        assert yaml.safe_load(RENDERERS["yaml"](explanation)) == result

    @pytest.mark.parametrize(
        ("rules", "printed"),
        [
            (RuleSet((Rule("node-shutdown", 0.0),)), "pod/web-10\n"),  # delete
            (RuleSet((Rule("node-shutdown", 3600.0),)), ""),  # wait
            (RuleSet((Rule("evicted", 0.0),)), ""),  # keep
        ],
    )
    def test_name_is_printed_only_when_the_decision_is_delete(
        self, config: ConfigFactory, rules: RuleSet, printed: str
    ) -> None:
        explanation = explain(stored(zombie("web-10")), config(command="explain", rules=rules), NOW)
        assert RENDERERS["name"](explanation) == printed
        assert "wide" not in RENDERERS


# -- through the API: one GET, nothing else -------------------------------------------


async def test_reads_the_pod_once_and_writes_nothing(sim: Simulator, config: ConfigFactory) -> None:
    sim.store.create("pods", admission("web-1", "UnexpectedAdmissionError"))
    out = io.StringIO()
    cfg = config(command="explain", target=("team-a", "web-1"), output="json", rules=DEFAULT_RULES)
    assert await run_explain(cfg, out) == 0
    result = json.loads(out.getvalue())
    assert result["pod"]["reason"] == "UnexpectedAdmissionError"
    assert result["decision"] == "delete"
    assert [(r.verb, r.resource) for r in sim.requests] == [("get", "pods")]


async def test_forbidden_names_the_rule(
    sim: Simulator, config: ConfigFactory, tmp_path: Path
) -> None:
    sim.store.create("pods", stored(zombie("web-1")))
    token = sim.add_token("lister", [PolicyRule(("",), ("pods",), ("list",))])
    kubeconfig = sim.write_kubeconfig(tmp_path / "lister", token=token)
    cfg = config(command="explain", target=("team-a", "web-1"), kubeconfig=str(kubeconfig))
    with pytest.raises(ApiError, match="get pods in namespace team-a"):
        await run_explain(cfg, io.StringIO())


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("gone", None, r"^pod team-a/gone not found"),
        ("web-1", 500, r"^cannot get pod team-a/web-1 \(HTTP 500\): "),
    ],
)
async def test_a_failure_is_one_line(
    sim: Simulator, config: ConfigFactory, name: str, status: int | None, message: str
) -> None:
    sim.store.create("pods", stored(zombie("web-1")))
    if status is not None:
        sim.faults.add_error("get", "pods", status=status)
    cfg = config(command="explain", target=("team-a", name))
    with pytest.raises(ZombiedError, match=message):
        await run_explain(cfg, io.StringIO())


async def test_cli_exit_codes(
    kubeconfig: Path, sim: Simulator, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.store.create("pods", admission("web-1"))

    async def cli(*args: str) -> int:
        # The command runs its own event loop: a thread keeps this one serving the API.
        return await anyio.to_thread.run_sync(main, ["explain", *args])

    assert await cli("team-a/web-1", "--kubeconfig", str(kubeconfig), "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["rule"] == "admission-rejected"
    assert await cli("team-a/nope", "--kubeconfig", str(kubeconfig)) == 1
    assert capsys.readouterr().err.startswith("zombied: error: pod team-a/nope not found")
    # Without a namespace, kubectl's: the context's (the simulator's has none: default).
    assert await cli("nope", "--kubeconfig", str(kubeconfig)) == 1
    assert capsys.readouterr().err.startswith("zombied: error: pod default/nope not found")


async def test_n_is_the_namespace_of_the_pod_as_in_kubectl(
    kubeconfig: Path, sim: Simulator, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.store.create("pods", admission("web-1"))

    async def cli(*args: str) -> int:
        argv = ["explain", *args, "--kubeconfig", str(kubeconfig), "-o", "json"]
        return await anyio.to_thread.run_sync(main, argv)

    assert await cli("web-1", "-n", "team-a") == 0
    by_flag = json.loads(capsys.readouterr().out)
    assert (by_flag["pod"]["namespace"], by_flag["decision"]) == ("team-a", "delete")
    # The watched scope has a flag of its own, as for zombied run.
    assert await cli("web-1", "-n", "team-a", "--namespaces", "team-b") == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "keep"
    assert await cli("team-a/web-1", "-n", "team-b") == 2
    assert "is in namespace team-a, not team-b" in capsys.readouterr().err
