"""``zombied explain``: one GET, every verdict explained, and nothing ever written.

What the verdict is comes from `rules.judge` (tests/unit/test_rules); these tests check
that explain says it: the decision, the veto or rule behind it, its due time, and how.
"""

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
from zombied.pod import KEEP_ANNOTATION
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from kubesim.rbac import PolicyRule
from kubesim.scenario import rejected_pod
from tests.daemon import pods
from tests.daemon.conftest import ConfigFactory

NOW = datetime.now(UTC).replace(microsecond=0)
BOTH = RuleSet((Rule("node-shutdown", 0.0), Rule("admission-rejected", 0.0)), frozenset({"Job"}))


def zombie(name: str, **kwargs: Any) -> dict[str, Any]:
    """A shutdown zombie that finished a minute before ``NOW``."""
    return pods.zombie(name, at=NOW, uid=f"uid-{name}", **kwargs)


def admission(name: str, reason: str = "NodeAffinity") -> dict[str, Any]:
    """A pod that ran until its node vanished, rejected when the node came back."""
    obj = pods.pod(name, uid=f"uid-{name}")
    running = {"running": {"startedAt": "2024-05-01T12:00:00Z"}}
    obj["status"]["containerStatuses"] = [{"name": "app", "ready": True, "state": running}]
    return rejected_pod(obj, version="1.27", reason=reason, now=NOW - timedelta(minutes=10))


def deleting(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return obj


WAIT_10M = {"rules": RuleSet((Rule("node-shutdown", 600.0),))}
EVICTED_ONLY = {"rules": RuleSet((Rule("evicted", 0.0),))}
KEEP_TRUE = {"annotations": {KEEP_ANNOTATION: "TRUE"}}


@pytest.mark.parametrize(
    ("obj", "settings", "verdict", "says"),
    [
        (admission("a"), {}, "delete admission-rejected", "delete it now"),
        (zombie("b"), WAIT_10M, "wait node-shutdown", " (in 9m): rule node-shutdown matches"),
        # Understood in any case (nothing follows the value), unlike "y".
        (zombie("c", **KEEP_TRUE), {}, "keep keep-annotation", "keep: 'TRUE')"),
        (zombie("d", annotations={KEEP_ANNOTATION: "y"}), {}, "keep keep-annotation", "not und"),
        (zombie("e", owner=("Job", "nightly")), {}, "keep owner-excluded", "vetoed"),
        (deleting(zombie("f")), {}, "keep deleting", "vetoed"),
        (pods.pod("g", uid="g"), {}, "keep not-terminal", "vetoed"),
        (zombie("h"), EVICTED_ONLY, "keep no-rule", "no enabled rule matches"),
        (zombie("i"), {"namespaces": ("team-b",)}, "keep out-of-scope", "not in --namespaces"),
        (zombie("j"), {"exclude_namespaces": ("team-a",)}, "keep out-of-scope", "in --exclude-"),
        (zombie("k"), {"label_selector": "tier"}, "keep out-of-scope", "not match --label-sel"),
        (admission("l"), {"dry_run": DryRun.CLIENT}, "delete admission-rejected", "client) now"),
        (admission("m"), {"dry_run": DryRun.SERVER}, "delete admission-rejected", "server) now"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_the_decision_and_what_it_rests_on(
    config: ConfigFactory, obj: dict[str, Any], settings: dict[str, Any], verdict: str, says: str
) -> None:
    explanation = explain(obj, config(command="explain", **{"rules": BOTH, **settings}), NOW)
    result = as_json(explanation)
    assert json.loads(RENDERERS["json"](explanation)) == result
    assert yaml.safe_load(RENDERERS["yaml"](explanation)) == result
    decision, why = verdict.split()
    # -o name prints the pod only when it is to be deleted now.
    name = f"pod/{obj['metadata']['name']}\n"
    assert RENDERERS["name"](explanation) == (name if decision == "delete" else "")
    assert (result["decision"], result["skip" if decision == "keep" else "rule"]) == (decision, why)
    assert says in result["summary"]
    vetoes = {veto["name"]: veto["applies"] for veto in result["vetoes"]}
    assert vetoes.get(why, False) is (decision == "keep" and why != "no-rule")
    checks = {check["name"]: check for check in result["rules"]}
    # Only a matching rule has a due time; a veto, not the rule, keeps a vetoed zombie.
    assert all((check["due"] is None) is (not check["matches"]) for check in checks.values())
    if why in ("keep-annotation", "owner-excluded", "deleting"):
        assert checks["node-shutdown"]["matches"]
    if decision == "wait":
        due = NOW + timedelta(seconds=540)  # finished a minute ago, 10 minutes to wait
        assert result["due"] == due.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_pod_without_termination_time_waits_from_first_seen(config: ConfigFactory) -> None:
    cfg = config(command="explain", rules=RuleSet((Rule("node-shutdown", 30.0),)))
    obj = zombie("web-3", finished_ago=None)
    first, later = (explain(obj, cfg, NOW + timedelta(minutes=m)) for m in (0, 5))
    # The same answer at every run, never "in 30s": the wait starts when zombied first
    # sees the pod, which a one-off explain cannot know.
    assert first.summary == later.summary
    assert first.summary.startswith("delete it 30s after first seen: ")
    table = RENDERERS["table"](first)
    assert "Terminal:   unknown: no container finishedAt" in table
    assert "due 30s after first seen" in table
    result = as_json(first)
    assert (result["due"], result["rules"][0]["due"], result["pod"]["terminatedAt"]) == (None,) * 3


def test_table_report(config: ConfigFactory) -> None:
    cfg = config(command="explain", rules=RuleSet())
    lines = RENDERERS["table"](explain(admission("web-8", "OutOfcpu"), cfg, NOW)).splitlines()
    assert lines[0] == "Pod:        team-a/web-8 (uid uid-web-8)"
    assert "Reason:     OutOfcpu" in lines
    assert any(line.split()[:2] == ["admission-rejected", "MATCH"] for line in lines)
    assert any(line.split()[:3] == ["node-shutdown", "no", "match"] for line in lines)
    assert any(line.split()[:2] == ["keep-annotation", "no"] for line in lines)
    assert lines[-2] == "Decision:   delete"
    bare = explain(pods.pod("api", uid="api"), config(command="explain", rules=RuleSet(())), NOW)
    assert "  (no rule enabled)" in RENDERERS["table"](bare).splitlines()


# -- through the API: one GET, nothing else -------------------------------------------


async def test_reads_the_pod_once_and_writes_nothing(sim: Simulator, config: ConfigFactory) -> None:
    sim.store.create("pods", admission("web-1", "UnexpectedAdmissionError"))
    out = io.StringIO()
    cfg = config(command="explain", target=("team-a", "web-1"), output="json", rules=RuleSet())
    assert await run_explain(cfg, out) == 0
    assert json.loads(out.getvalue())["decision"] == "delete"
    assert [(r.verb, r.resource) for r in sim.requests] == [("get", "pods")]


@pytest.mark.parametrize(("name", "status"), [("gone", 404), ("web-1", 500), ("web-1", 403)])
async def test_a_failure_names_the_pod_or_the_rule_to_grant(
    sim: Simulator, config: ConfigFactory, tmp_path: Path, name: str, status: int
) -> None:
    sim.store.create("pods", zombie("web-1"))
    settings: dict[str, Any] = {"target": ("team-a", name)}
    if status == 403:
        token = sim.add_token("lister", [PolicyRule(("",), ("pods",), ("list",))])
        settings["kubeconfig"] = str(sim.write_kubeconfig(tmp_path / "lister", token=token))
    elif status == 500:
        sim.faults.add_error("get", "pods", status=status)
    with pytest.raises(ZombiedError) as failed:
        await run_explain(config(command="explain", **settings), io.StringIO())
    error = failed.value
    assert "\n" not in str(error)
    if isinstance(error, ApiError):
        assert (error.code, error.request.rule) == (status, "get pods in namespace team-a")
    else:  # said as kubectl says it
        assert (status, str(error).startswith("pod team-a/gone not found")) == (404, True)


async def test_cli_exit_codes_and_namespace_as_in_kubectl(
    kubeconfig: Path, sim: Simulator, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.store.create("pods", admission("web-1"))

    async def cli(*args: str) -> tuple[int, str, str]:
        argv = ["explain", *args, "--kubeconfig", str(kubeconfig), "-o", "json"]
        # The command runs its own event loop: a thread keeps this one serving the API.
        code = await anyio.to_thread.run_sync(main, argv)
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = await cli("team-a/web-1")
    assert (code, json.loads(out)["rule"]) == (0, "admission-rejected")
    # Without a namespace, kubectl's: the context's (the simulator's has none: default).
    code, _, err = await cli("web-1")
    assert (code, err.startswith("zombied: error: pod default/web-1 not found")) == (1, True)
