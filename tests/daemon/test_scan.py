"""``zombied scan``: what it lists, in which format, on which stream; one reaping pass."""

from __future__ import annotations

import io
import json
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from zombied.config import DryRun, load_config
from zombied.kube import ApiError
from zombied.pod import PodSnapshot
from zombied.rules import Decision, Rule, RuleSet, judge
from zombied.scan import COLUMNS, Listed, render, scan

from kubesim import Simulator
from kubesim.rbac import PolicyRule
from tests.daemon.conftest import ConfigFactory
from tests.daemon.pods import pod, zombie
from tests.helpers import eventually


def cluster(sim: Simulator) -> None:
    sim.store.create("pods", zombie("web-1", node="spot-1"))
    sim.store.create("pods", zombie("db-0", "team-b", node="spot-1", owner=("StatefulSet", "db")))
    sim.store.create("pods", zombie("fresh", finished_ago=1))
    sim.store.create("pods", pod("running"))


async def run_scan(
    sim: Simulator, config: ConfigFactory, **changes: object
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    # Every namespace (-A) unless a test names one: the simulator's pods are in several.
    settings: dict[str, object] = {
        "rules": RuleSet((Rule("node-shutdown", 30.0),)),
        "namespace": None,
    }
    settings.update(changes)
    code = await scan(config(command="scan", **settings), out, err)
    return code, out.getvalue(), err.getvalue()


# -- through the API -------------------------------------------------------------------


async def test_table_lists_due_zombies_and_deletes_nothing(
    sim: Simulator, config: ConfigFactory
) -> None:
    cluster(sim)
    code, out, err = await run_scan(sim, config)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == list(COLUMNS)
    assert [row.split()[:2] for row in rows] == [["team-a", "web-1"], ["team-b", "db-0"]]
    assert rows[1].split()[2:] == ["node-shutdown", "Terminated", "spot-1", "StatefulSet/db", "1m"]
    # The zombie not yet due is counted on stderr, never listed on stdout.
    assert err.startswith("zombied: 1 more pod(s)")
    assert "--waiting" in err
    assert not any(r.verb == "delete" for r in sim.requests)


@pytest.mark.parametrize(
    ("changes", "out", "err"),
    [
        # `zombied scan | wc -l` counts zombies: the message is not one of them.
        ({}, "", "No zombie pods found.\n"),
        ({"namespace": "team-a", "output": "name"}, "", "No zombie pods found in namespace"),
        ({"output": "json"}, "[]\n", ""),
        ({"output": "yaml"}, "[]\n", ""),
    ],
)
async def test_nothing_found_is_said_on_stderr_like_kubectl(
    sim: Simulator, config: ConfigFactory, changes: dict[str, Any], out: str, err: str
) -> None:
    sim.store.create("pods", pod("running"))
    code, printed, said = await run_scan(sim, config, **changes)
    assert (code, printed, said.startswith(err)) == (0, out, True)


@pytest.mark.parametrize(
    ("changes", "listed", "note"),
    [
        ({"namespace": "team-b"}, ["db-0"], ""),
        # -n names what to list; the scope zombied works in still decides.
        ({"namespace": "team-b", "namespaces": ("team-a",)}, [], "not in --namespaces (team-a)"),
        ({"namespace": "team-b", "exclude_namespaces": ("team-b",)}, [], "--exclude-namespaces"),
        ({"namespaces": ("team-b",)}, ["db-0"], ""),
    ],
)
async def test_one_namespace(
    sim: Simulator, config: ConfigFactory, changes: dict[str, Any], listed: list[str], note: str
) -> None:
    cluster(sim)
    code, out, err = await run_scan(sim, config, output="json", **changes)
    assert code == 0
    assert [r["pod"]["name"] for r in json.loads(out)] == listed
    assert err.startswith("zombied: 1 pod(s) are outside the scope") if note else err == ""
    assert note in err
    assert {r.namespace for r in sim.requests if r.verb == "list"} == {"team-b"}


@pytest.mark.parametrize(
    ("changes", "code", "summary", "reaped"),
    [
        ({}, 0, "deleted 2, gone 0, conflict 0, dry run 0, failed 0", ["db-0", "web-1"]),
        # The summary goes to stderr when stdout carries JSON.
        ({"dry_run": DryRun.SERVER, "output": "json"}, 0, "dry run 2,", []),
        ({"reader": True}, 1, "failed 2", []),
    ],
    ids=["delete", "server-dry-run", "refused"],
)
async def test_delete_reaps_the_due_zombies_once(
    sim: Simulator,
    config: ConfigFactory,
    tmp_path: Path,
    changes: dict[str, Any],
    code: int,
    summary: str,
    reaped: list[str],
) -> None:
    cluster(sim)
    if changes.pop("reader", False):
        token = sim.add_token("reader", [PolicyRule(("",), ("pods",), ("list",))])
        changes["kubeconfig"] = str(sim.write_kubeconfig(tmp_path / "reader", token=token))
    got, out, err = await run_scan(sim, config, delete=True, waiting=True, **changes)
    assert got == code
    assert summary in (err if changes.get("output") == "json" else out.splitlines()[-1])
    assert sorted(r.obj["metadata"]["name"] for r in sim.deleted if not r.dry_run) == reaped
    assert len([r for r in sim.deleted if r.dry_run]) == (2 if "dry_run" in changes else 0)
    # Listed with --waiting, never deleted.
    assert sim.store.get("pods", "team-a", "fresh") is not None
    assert len(sim.store.list("events", "team-a")) == (1 if reaped else 0)
    if "output" in changes:
        records = {record["pod"]["name"]: record for record in json.loads(out)}
        assert (records["fresh"]["decision"], "outcome" in records["fresh"]) == ("wait", False)
        assert (records["web-1"]["outcome"], records["web-1"]["code"]) == ("dry_run", 200)
    if code:  # not retried, so said plainly: not permitted, and which rule to grant
        refusals = [line for line in err.splitlines() if line.startswith("zombied: error: ")]
        assert len(refusals) == 2
        assert all("missing RBAC rule: delete pods in namespace team-" in line for line in refusals)


async def test_a_signal_stops_the_deletes_and_it_says_what_was_done(
    sim: Simulator, config: ConfigFactory
) -> None:
    for name in ("a", "b", "c"):
        sim.store.create("pods", zombie(name))

    async def interrupt() -> None:
        await eventually(lambda: len(sim.deleted) == 1)
        os.kill(os.getpid(), signal.SIGINT)

    async with anyio.create_task_group() as tg:
        tg.start_soon(interrupt)
        # One token: the first DELETE goes at once, the next waits ten seconds for its token.
        limits = {"qps": 0.1, "burst": 1, "max_in_flight": 1}
        code, out, err = await run_scan(
            sim, config, delete=True, rules=RuleSet((Rule("node-shutdown", 0.0),)), **limits
        )
    assert (code, len(sim.deleted)) == (128 + signal.SIGINT, 1)
    assert out.splitlines()[-1].endswith("failed 0, not done 2")
    assert "interrupted by SIGINT: 2 pod(s) not done" in err


async def test_names_of_several_namespaces_are_said_to_be_ambiguous(
    sim: Simulator, config: ConfigFactory
) -> None:
    cluster(sim)
    code, out, err = await run_scan(sim, config, output="name")
    assert (code, out) == (0, "pod/web-1\npod/db-0\n")
    assert "-o name prints no namespace" in err
    assert "team-a, team-b" in err
    _, out, err = await run_scan(sim, config, output="name", namespace="team-b")
    assert (out, err) == ("pod/db-0\n", "")


async def test_unreachable_server_is_a_one_line_failure(
    sim: Simulator, config: ConfigFactory
) -> None:
    sim.faults.add_error("list", "pods", status=503)
    with pytest.raises(ApiError, match=r"cannot list pods in every namespace \(HTTP 503\)"):
        await run_scan(sim, config)


# -- the report, without I/O -----------------------------------------------------------

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MESSAGE = "Pod was terminated in response to imminent node shutdown. " * 3


def listed(*pods: PodSnapshot, min_age: float = 60.0) -> list[Listed]:
    rules = RuleSet((Rule("node-shutdown", min_age),))
    judgements = [judge(p, rules, first_seen=NOW - timedelta(microseconds=1)) for p in pods]
    return [Listed(j, j.decision(NOW)) for j in judgements]


def shutdown(name: str, *, ago: float | None = 300.0, **fields: Any) -> PodSnapshot:
    settings: dict[str, Any] = {
        "phase": "Failed",
        "reason": "Terminated",
        "message": MESSAGE,
        "node": "node-1",
        "terminated_at": NOW - timedelta(seconds=ago + 0.25) if ago else None,
    }
    settings.update(fields)
    return PodSnapshot(namespace="shop", name=name, uid=f"uid-{name}", **settings)


def render_as(items: list[Listed], *argv: str) -> str:
    """The report of ``zombied scan ARGV`` (of every namespace, without ``-n``)."""
    config = load_config("scan", argv if "-n" in argv else ("-A", *argv), {})
    return render(items, NOW, config)


def test_json_and_yaml_are_kubernetes_style_and_the_same() -> None:
    items = listed(shutdown("web-0", owner_kind="ReplicaSet", owner_name="web"), shutdown("b"))
    records = json.loads(render_as(items, "-o", "json"))
    assert yaml.safe_load(render_as(items, "-o", "yaml")) == records
    assert records[0] == {
        "pod": {
            "namespace": "shop",
            "name": "web-0",
            "uid": "uid-web-0",
            "phase": "Failed",
            "reason": "Terminated",
            "message": MESSAGE,
            "node": "node-1",
            "owner": "ReplicaSet/web",
            "disruptionTarget": None,
            "terminatedAt": "2025-12-31T23:54:59Z",
        },
        "rule": "node-shutdown",
        "minAge": "1m",
        "due": "2025-12-31T23:55:59Z",
        "decision": "delete",
    }
    assert records[1]["pod"]["owner"] is None  # never "", never "<none>"


def test_wide_and_no_headers() -> None:
    (line,) = render_as(listed(shutdown("web-0")), "-o", "wide", "--no-headers").splitlines()
    assert line.split()[:2] == ["shop", "web-0"]
    assert "Failed   2025-12-31T23:54:59Z" in line
    assert line.endswith("…")
    assert len(line.split("   ")[-1]) == 80
    one = render_as(listed(shutdown("web-0")), "-n", "shop")
    assert one.splitlines()[0].split()[:2] == ["POD", "RULE"]


def test_waiting_pods_have_a_due_column_and_no_name() -> None:
    items = listed(
        shutdown("due"),
        shutdown("young", ago=15.0),
        shutdown("unknown", ago=None),
        PodSnapshot(namespace="b", name="bare", uid="u", phase="Failed", reason="Shutdown"),
    )
    assert [item.decision for item in items] == [Decision.DELETE] + [Decision.WAIT] * 3
    header, *rows = render_as(items, "--waiting").splitlines()
    assert header.split() == [*COLUMNS, "DUE"]
    assert [(row.split()[1], row.split("   ")[-1].strip()) for row in rows] == [
        ("due", "now"),
        ("young", "in 45s"),
        ("unknown", "1m after first seen"),
        ("bare", "1m after first seen"),
    ]
    assert rows[3].split()[2:7] == ["node-shutdown", "Shutdown", "<none>", "<none>", "<unknown>"]
    records = json.loads(render_as(items, "--waiting", "-o", "json"))
    due = ["2025-12-31T23:55:59Z", "2026-01-01T00:00:44Z", None, None]
    assert [record["due"] for record in records] == due
    # Names are only of what it deletes, --waiting or not.
    assert {render_as(items, "-o", "name", *waiting) for waiting in ((), ("--waiting",))} == {
        "pod/due\n"
    }
