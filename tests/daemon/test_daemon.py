"""The whole controller in-process against the simulator, over real HTTP."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from urllib.parse import parse_qs

import aiohttp
import anyio
import pytest
from zombied.daemon import Daemon, serve
from zombied.rules import Rule, RuleSet

from kubesim import Simulator
from kubesim.rbac import PolicyRule
from tests.daemon.conftest import ConfigFactory, captured_logs
from tests.daemon.pods import evicted, pod, zombie
from tests.helpers import eventually


async def get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


def deleted_names(sim: Simulator) -> list[str]:
    return sorted(
        f"{r.obj['metadata']['namespace']}/{r.obj['metadata']['name']}"
        for r in sim.deleted
        if not r.dry_run
    )


def settled(daemon: Daemon) -> bool:
    """Nothing left that could still be deleted: no zombie cached, nothing queued or in flight."""
    return (
        daemon.ready()
        and daemon.cache.zombies == 0
        and len(daemon.queue) == 0
        and daemon.queue.processing == 0
    )


def preempt(sim: Simulator, node: str, names: list[str], namespace: str = "team-a") -> None:
    """What the kubelet does on shutdown: the pod turns Failed/Terminated in place."""
    for name in names:
        current = sim.store.get("pods", namespace, name)
        assert current is not None
        current["status"] = zombie(name, namespace, node=node)["status"]
        sim.store.update("pods", current, check_rv=False)


async def test_reaps_exactly_the_zombies(sim: Simulator, config: ConfigFactory) -> None:
    store = sim.store
    # Zombies already there at start-up, and the pods that must survive.
    store.create("pods", zombie("old-1", node="spot-1"))
    store.create("pods", zombie("old-2", "team-b", node="spot-1"))
    store.create("pods", pod("running", node="spot-2"))
    store.create("pods", evicted("pressure"))  # another rule, not enabled
    store.create("pods", zombie("system", "kube-system"))  # excluded namespace
    store.create("pods", zombie("batch", owner=("Job", "nightly")))  # excluded owner kind
    store.create("pods", zombie("kept", annotations={"zombied.io/keep": "true"}))
    store.create("pods", zombie("other-app", labels={"app": "db"}))  # label selector
    store.create("pods", pod("succeeded-ok", phase="Succeeded", finished_ago=5))
    live = ["live-1", "live-2", "live-3"]
    for name in live:
        store.create("pods", pod(name, node="spot-3"))
    cfg = config(
        exclude_namespaces=("kube-system",),
        label_selector="app=web",
        rules=RuleSet((Rule("node-shutdown", 0.0),), frozenset({"Job"})),
    )
    async with Daemon(cfg) as daemon:
        await eventually(lambda: len(deleted_names(sim)) == 2)
        # History compacted under the watch: it lists again, and misses nothing.
        sim.compact()
        sim.faults.cut_watches()
        preempt(sim, "spot-3", live)
        await eventually(lambda: len(deleted_names(sim)) == 5)
        await eventually(lambda: settled(daemon))
        status, body = await get(daemon.http_port, "/metrics")
        assert status == 200
        assert 'zombied_pods_reaped_total{outcome="deleted",rule="node-shutdown"}' in body
        assert 'zombied_watch_last_event_age_seconds{scope="_cluster"}' in body
        assert 'zombied_scope_synced{scope="_cluster"} 1.0' in body
        assert 'zombied_watch_relists_total{scope="_cluster"} 1.0' in body
    reaped = ["team-a/live-1", "team-a/live-2", "team-a/live-3", "team-a/old-1", "team-b/old-2"]
    assert deleted_names(sim) == reaped
    events = [e for ns in ("team-a", "team-b") for e in store.list("events", ns)]
    assert sorted(e["involvedObject"]["name"] for e in events) == [*live, "old-1", "old-2"]
    assert {e["reason"] for e in events} == {"Reaped"}
    lists = [parse_qs(r.query) for r in sim.requests if r.verb == "list" and r.resource == "pods"]
    assert lists[0]["labelSelector"] == ["app=web"]
    assert "metadata.namespace!=kube-system" in lists[0]["fieldSelector"][0]


async def test_watches_one_scope_per_namespace(sim: Simulator, config: ConfigFactory) -> None:
    for namespace in ("team-a", "team-b", "team-c"):
        sim.store.create("pods", zombie(namespace[-1], namespace))
    async with Daemon(config(namespaces=("team-a", "team-b"))) as daemon:
        assert [w.scope.label for w in daemon.watchers] == ["team-a", "team-b"]
        await eventually(lambda: len(deleted_names(sim)) == 2 and settled(daemon))
    assert deleted_names(sim) == ["team-a/a", "team-b/b"]
    paths = {r.path for r in sim.requests if r.verb in ("list", "watch")}
    assert paths == {"/api/v1/namespaces/team-a/pods", "/api/v1/namespaces/team-b/pods"}


async def test_a_forbidden_delete_makes_readiness_false(
    sim: Simulator, config: ConfigFactory, tmp_path: Path
) -> None:
    read = [PolicyRule(("",), ("pods",), ("get", "list", "watch"))]
    token = sim.add_token("restricted", [*read, PolicyRule(("",), ("events",), ("create",))])
    kubeconfig = sim.write_kubeconfig(tmp_path / "restricted", token=token)
    sim.store.create("pods", zombie("z"))
    with captured_logs() as logs:
        async with Daemon(config(kubeconfig=str(kubeconfig))) as daemon:
            await eventually(lambda: "delete pods" in daemon.readiness()[1])
            status, body = await get(daemon.http_port, "/readyz")
            assert (status, "delete pods in namespace team-a" in body) == (503, True)
            assert (await get(daemon.http_port, "/healthz"))[0] == 200
    assert sim.store.get("pods", "team-a", "z") is not None
    (forbidden,) = [e for e in logs if e["event"] == "api.forbidden"]
    assert forbidden["missing_rule"] == "delete pods in namespace team-a"


async def test_probes_readiness_until_listed_liveness_until_wedged(
    sim: Simulator, config: ConfigFactory
) -> None:
    sim.faults.add_latency("list", "pods", 0.5)
    async with Daemon(config()) as daemon:
        status, body = await get(daemon.http_port, "/readyz")
        assert (status, "first list not done" in body) == (503, True)
        await eventually(daemon.ready)
        assert await get(daemon.http_port, "/readyz") == (200, "ok\n")
        assert await get(daemon.http_port, "/healthz") == (200, "ok\n")
        assert daemon.healthy()
        state = daemon.watchers[0].state
        # A loop that made no progress for far longer than its watch timeout is wedged.
        state.last_progress -= 10_000
        status, body = await get(daemon.http_port, "/healthz")
        assert (status, "silent" in body) == (503, True)
        state.last_progress += 10_000
        state.alive = False
        assert (await get(daemon.http_port, "/healthz"))[0] == 503
        state.alive = True
        daemon.monitor.record(60.0)
        status, body = await get(daemon.http_port, "/healthz")
        assert (status, "event loop stalled" in body) == (503, True)


@pytest.mark.parametrize("deletes", [True, False], ids=["allowed", "refused"])
async def test_drain_finishes_due_deletes_and_their_events(
    sim: Simulator, config: ConfigFactory, tmp_path: Path, deletes: bool
) -> None:
    verbs = ("list", "watch", "delete") if deletes else ("list", "watch")
    events = PolicyRule(("",), ("events",), ("create",))
    token = sim.add_token("zombied", [PolicyRule(("",), ("pods",), verbs), events])
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=token)
    for i in range(3):
        sim.store.create("pods", zombie(f"due-{i}", finished_ago=3600))
    sim.store.create("pods", zombie("later", finished_ago=0))
    sim.faults.add_latency("delete", "pods", 0.3)
    # The Events wait on the server a little, so the drain starts with them queued.
    sim.faults.add_latency("create", "events", 0.3)
    rules = RuleSet((Rule("node-shutdown", 600.0),))
    async with Daemon(config(kubeconfig=str(kubeconfig), rules=rules, max_in_flight=1)) as daemon:
        # A delete in flight, or (refused at once) answered.
        await eventually(lambda: daemon.leadership.in_flight or sim.requests.filter("delete"))
        with captured_logs() as logs:
            await daemon.drain()
        assert "draining" in daemon.readiness()[1]
    assert deleted_names(sim) == [f"team-a/due-{i}" for i in range(3) if deletes]
    assert sim.store.get("pods", "team-a", "later") is not None
    assert len(sim.store.list("events", "team-a")) == (3 if deletes else 0)
    assert "event.dropped" not in [e["event"] for e in logs]
    assert logs[-1]["event"] == "daemon.drained"
    # Left due: what is due but was not deleted, refused here.
    assert (logs[-1]["left_due"], logs[-1]["left_not_due"]) == (0 if deletes else 3, 1)


ELECTION = {
    "leader_elect": True,
    "lease_namespace": "zombied",
    "lease_duration": 2.0,
    "renew_deadline": 1.5,
    "retry_period": 0.2,
}


async def test_sigterm_drains_releases_the_lease_and_serve_returns_0(
    sim: Simulator, config: ConfigFactory
) -> None:
    """In-process, where coverage sees it; tests/daemon/test_cli signals a real process."""
    sim.store.create("namespaces", {"metadata": {"name": "zombied"}})
    sim.store.create("pods", zombie("z"))
    result: list[int] = []

    async def run() -> None:
        result.append(await serve(config(**ELECTION)))

    with captured_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await eventually(lambda: len(sim.deleted) == 1)
            await eventually(lambda: any(e["event"] == "daemon.started" for e in logs))
            # The receiver is installed before the daemon starts: the signal reaches it.
            os.kill(os.getpid(), signal.SIGTERM)
    assert result == [0]
    events = [e["event"] for e in logs]
    assert events.index("daemon.signal") < events.index("daemon.draining")
    assert events[-1] == "daemon.drained"
    # Released: a standby takes over at once instead of waiting the lease out.
    assert "leader.released" in events
    assert sim.store.get("leases", "zombied", "zombied")["spec"]["holderIdentity"] == ""


async def test_drain_timeout_cuts_slow_deletes(sim: Simulator, config: ConfigFactory) -> None:
    sim.store.create("pods", zombie("slow"))
    sim.faults.add_latency("delete", "pods", 30.0)
    async with Daemon(config(drain_timeout=0.2)) as daemon:
        await eventually(lambda: daemon.leadership.in_flight == 1)
        with captured_logs() as logs, anyio.fail_after(10):
            await daemon.drain()
    assert any(e["event"] == "daemon.drain_timeout" for e in logs)
    assert sim.store.get("pods", "team-a", "slow") is not None


async def test_a_standby_never_deletes(sim: Simulator, config: ConfigFactory) -> None:
    sim.store.create("namespaces", {"metadata": {"name": "zombied"}})
    async with Daemon(config(**ELECTION), identity="one") as daemon:
        await eventually(lambda: daemon.leadership.leading)
        # Another replica takes the lease over (as after a network partition).
        lease = sim.store.get("leases", "zombied", "zombied")
        assert lease is not None
        lease["spec"].update(holderIdentity="intruder", leaseDurationSeconds=3600)
        sim.store.update("leases", lease, check_rv=False)
        await eventually(lambda: not daemon.leadership.leading)
        sim.store.create("pods", zombie("z"))
        # The key waits in the queue: no worker takes it while this replica is a standby.
        await eventually(lambda: "team-a/z" in daemon.queue and daemon.queue.processing == 0)
        assert daemon.ready()
        assert sim.deleted == []
