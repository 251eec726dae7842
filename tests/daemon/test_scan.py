"""``zombied scan`` in-process: table, JSON, not-yet-due pods, one reaping pass."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from zombied.config import DryRun
from zombied.errors import PermissionDenied, ZombiedError
from zombied.rules import Rule, RuleSet
from zombied.scan import scan

from kubesim import Simulator
from kubesim.rbac import PolicyRule
from tests.daemon.conftest import ConfigFactory
from tests.daemon.pods import pod, zombie


def cluster(sim: Simulator) -> None:
    sim.store.create("pods", zombie("web-1", node="spot-1"))
    sim.store.create("pods", zombie("db-0", "team-b", node="spot-1", owner=("StatefulSet", "db")))
    sim.store.create("pods", zombie("fresh", finished_ago=1))
    sim.store.create("pods", pod("running"))


async def run_scan(
    sim: Simulator, config: ConfigFactory, **changes: object
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    settings: dict[str, object] = {"rules": RuleSet((Rule("node-shutdown", 30.0),))}
    settings.update(changes)
    code = await scan(config(command="scan", **settings), out, err)
    return code, out.getvalue(), err.getvalue()


async def test_table_lists_due_zombies(sim: Simulator, config: ConfigFactory) -> None:
    cluster(sim)
    code, out, err = await run_scan(sim, config)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["NAMESPACE", "POD", "RULE", "REASON", "NODE", "OWNER", "AGE"]
    assert [row.split()[:2] for row in rows] == [["team-a", "web-1"], ["team-b", "db-0"]]
    assert rows[1].split()[2:] == ["node-shutdown", "Terminated", "spot-1", "StatefulSet/db", "1m"]
    assert "1 more pod(s) match a rule but are not yet past its min age" in err
    assert not any(r.verb == "delete" for r in sim.requests)


async def test_json_output(sim: Simulator, config: ConfigFactory) -> None:
    cluster(sim)
    code, out, _ = await run_scan(sim, config, output="json")
    assert code == 0
    records = json.loads(out)
    assert [(r["namespace"], r["pod"]) for r in records] == [
        ("team-a", "web-1"),
        ("team-b", "db-0"),
    ]
    first = records[0]
    assert first["rule"] == "node-shutdown"
    assert first["reason"] == "Terminated"
    assert first["node"] == "spot-1"
    assert first["owner"] == "ReplicaSet/web-7d4f"
    assert first["uid"]
    assert 55 <= first["age_s"] <= 600
    assert "outcome" not in first


async def test_nothing_found(sim: Simulator, config: ConfigFactory) -> None:
    sim.store.create("pods", pod("running"))
    code, out, err = await run_scan(sim, config)
    assert (code, out, err) == (0, "No zombie pods found.\n", "")
    code, out, _ = await run_scan(sim, config, output="json")
    assert (code, json.loads(out)) == (0, [])


async def test_delete_reaps_once_with_the_daemon_rules(
    sim: Simulator, config: ConfigFactory
) -> None:
    cluster(sim)
    code, out, _ = await run_scan(sim, config, delete=True)
    assert code == 0
    assert out.splitlines()[-1] == "deleted 2, gone 0, conflict 0, dry run 0, failed 0"
    assert sorted(r.obj["metadata"]["name"] for r in sim.deleted) == ["db-0", "web-1"]
    assert sim.store.get("pods", "team-a", "fresh") is not None
    assert [e["reason"] for e in sim.store.list("events", "team-a")] == ["Reaped"]


async def test_delete_json_reports_outcomes(sim: Simulator, config: ConfigFactory) -> None:
    cluster(sim)
    code, out, err = await run_scan(sim, config, delete=True, output="json", dry_run=DryRun.SERVER)
    assert code == 0
    assert {r["outcome"] for r in json.loads(out)} == {"dry_run"}
    assert "dry run 2" in err
    assert all(r.dry_run for r in sim.deleted)


async def test_failed_delete_exits_1(sim: Simulator, config: ConfigFactory, tmp_path: Path) -> None:
    cluster(sim)
    token = sim.add_token("reader", [PolicyRule(("",), ("pods",), ("list",))])
    kubeconfig = sim.write_kubeconfig(tmp_path / "reader", token=token)
    code, out, _ = await run_scan(sim, config, delete=True, kubeconfig=str(kubeconfig))
    assert code == 1
    assert out.splitlines()[-1] == "deleted 0, gone 0, conflict 0, dry run 0, failed 2"
    assert sim.deleted == []


async def test_namespaced_scan(sim: Simulator, config: ConfigFactory) -> None:
    cluster(sim)
    code, out, _ = await run_scan(sim, config, namespaces=("team-b",), output="json")
    assert code == 0
    assert [r["pod"] for r in json.loads(out)] == ["db-0"]


async def test_forbidden_list_names_the_rule(
    sim: Simulator, config: ConfigFactory, tmp_path: Path
) -> None:
    token = sim.add_token("nobody", [PolicyRule(("",), ("pods",), ("get",))])
    kubeconfig = sim.write_kubeconfig(tmp_path / "nobody", token=token)
    with pytest.raises(PermissionDenied, match="list pods in namespace team-b"):
        await run_scan(sim, config, kubeconfig=str(kubeconfig), namespaces=("team-b",))


async def test_unreachable_server_is_a_one_line_failure(
    sim: Simulator, config: ConfigFactory
) -> None:
    sim.faults.add_error("list", "pods", status=503)
    with pytest.raises(ZombiedError, match=r"cannot list pods in every namespace \(HTTP 503\)"):
        await run_scan(sim, config)
