"""The list-watch loop against the simulator: cache, queue, relists, faults, RBAC."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

from structlog.testing import capture_logs
from zombied.cache import PodCache
from zombied.queue import WorkQueue
from zombied.rules import Rule, RuleSet, Selection
from zombied.watch import TERMINAL_FIELD_SELECTOR, Scope

from kubesim import Simulator
from kubesim.requestlog import RequestRecord
from tests.daemon.conftest import watching
from tests.daemon.pods import pod, zombie
from tests.helpers import eventually

RULES = RuleSet((Rule("node-shutdown", 0.0),))


def query(record: RequestRecord) -> dict[str, str]:
    return {key: values[-1] for key, values in parse_qs(record.query).items()}


SCOPE = Scope(None, Selection(exclude_namespaces=("kube-system",)))


async def test_lists_pages_then_watches(sim: Simulator, kubeconfig: Path) -> None:
    for i in range(5):
        sim.store.create("pods", zombie(f"old-{i}"))
    sim.store.create("pods", pod("running"))
    sim.store.create("pods", zombie("sys", "kube-system"))
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    async with watching(kubeconfig, cache, SCOPE, page_size=2) as watcher:
        await eventually(lambda: watcher.state.synced)
        listed_at = watcher.resource_version
        assert sorted(entry.snapshot.name for entry in cache.entries()) == [
            f"old-{i}" for i in range(5)
        ]
        assert cache.zombies == 5
        assert len(queue) == 5
        sim.store.create("pods", zombie("new"))
        await eventually(lambda: "team-a/new" in cache)
        sim.faults.cut_watches()  # a watch is logged once it ends
        await eventually(lambda: any(r.verb == "watch" for r in sim.requests))
    lists = [r for r in sim.requests if r.verb == "list" and r.resource == "pods"]
    assert len(lists) == 3  # 5 terminal pods in pages of 2
    selectors = {query(r)["fieldSelector"] for r in lists}
    assert selectors == {f"{TERMINAL_FIELD_SELECTOR},metadata.namespace!=kube-system"}
    assert [query(r).get("limit") for r in lists] == ["2", "2", "2"]
    watches = [query(r) for r in sim.requests if r.verb == "watch"]
    assert watches
    assert watches[0]["allowWatchBookmarks"] == "true"
    assert int(watches[0]["timeoutSeconds"]) > 0
    assert watches[0]["resourceVersion"] == listed_at


async def test_relists_and_reconciles_after_410(sim: Simulator, kubeconfig: Path) -> None:
    queue: WorkQueue[str] = WorkQueue()
    cache = PodCache(RULES, queue)
    async with watching(kubeconfig, cache, SCOPE, timeout_min=2, timeout_max=3) as watcher:
        await eventually(lambda: watcher.state.synced)
        sim.store.create("pods", zombie("stays"))
        sim.store.create("pods", zombie("vanishes"))
        await eventually(lambda: len(cache) == 2)
        with capture_logs() as logs:
            # Cut the stream first so the deletion and the new pod are only seen by a relist.
            sim.faults.add_error("watch", "pods", status=503, count=1)
            sim.faults.cut_watches()
            sim.store.delete("pods", "team-a", "vanishes")
            sim.store.create("pods", zombie("appears"))
            sim.compact()
            await eventually(lambda: "team-a/appears" in cache, message=str(watcher.state))
            await eventually(lambda: "team-a/vanishes" not in cache)
        assert "team-a/vanishes" not in queue
        assert "team-a/stays" in cache
        assert any(entry["event"] == "watch.relist" for entry in logs)


async def test_compaction_mid_stream_relists(sim: Simulator, kubeconfig: Path) -> None:
    cache = PodCache(RULES, WorkQueue())
    async with watching(kubeconfig, cache, SCOPE, timeout_min=2, timeout_max=3) as watcher:
        await eventually(lambda: watcher.state.synced)
        await eventually(lambda: sim.store.watcher_count() == 1)
        lists_before = sum(1 for r in sim.requests if r.verb == "list")
        sim.compact()
        await eventually(lambda: sum(1 for r in sim.requests if r.verb == "list") > lists_before)
        sim.store.create("pods", zombie("after"))
        await eventually(lambda: "team-a/after" in cache)
