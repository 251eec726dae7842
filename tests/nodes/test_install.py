"""zombied as users run it, on the real clusters of both releases: installed with
``kubectl apply -k`` and with ``helm install`` from the image built from the Dockerfile,
in its pods on the stable node with the real probes and in-cluster configuration; the
leader's pod deleted while a node's zombies come due; what Events and metrics say.
"""

from __future__ import annotations

from collections import Counter

import pytest
from zombied.config import LEASE_JITTER

from tests.nodes.cluster import STABLE
from tests.nodes.install import USER
from tests.nodes.story import Story

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(900)]

#: The chart's lease duration: a standby leads within it.
LEASE_S = 15.0
#: The chart's retry period: a standby tries the Lease this often.
RETRY_S = 2.0
#: The chart's terminationGracePeriodSeconds: the kubelet's SIGKILL comes after it.
GRACE_S = 30.0


def test_both_installs_run_on_the_stable_node_with_in_cluster_configuration(story: Story) -> None:
    assert story.kustomized_s > 0
    assert story.ready_s > 0
    started = [e for e in story.zombied_log() if e.get("event") == "daemon.started"]
    # Two replicas of kustomize's install, two of helm's, one replacing the deleted leader.
    assert len({e["identity"] for e in started}) >= 5
    assert all(e["scopes"] == ["_cluster"] for e in started)
    assert [e for e in story.zombied_log() if e.get("event") == "leader.acquired"]
    # The Spot node is tainted as GKE's are, and zombied tolerates no such taint.
    assert story.placed == [STABLE, STABLE]


def test_the_deleted_leader_drains_and_the_other_leads_within_the_lease(story: Story) -> None:
    assert 0 < story.failover_s <= LEASE_S
    drains = [e for e in story.zombied_log() if e.get("event") == "daemon.drained"]
    assert drains
    assert all(e["duration_s"] < GRACE_S for e in drains)


def test_nothing_is_deleted_twice_across_the_handover(story: Story) -> None:
    sent = Counter(
        e["requestObject"]["preconditions"]["uid"]
        for e in story.deletes()
        if e["user"]["username"] == USER
    )
    assert sent
    assert max(sent.values()) == 1, sent


def test_reaped_events_and_metrics_say_so(story: Story) -> None:
    deleted = {
        e["objectRef"]["name"]
        for e in story.deletes()
        if e["user"]["username"] == USER and e["responseStatus"]["code"] in (200, 202)
    }
    reported = {e["involvedObject"]["name"] for e in story.events}
    assert deleted <= reported
    lines = story.metrics.splitlines()
    assert "zombied_leader 1.0" in lines
    assert any(
        line.startswith("zombied_pods_reaped_total{") and 'outcome="deleted"' in line
        for line in lines
    )


def test_an_upgrade_rolls_the_pods_and_a_killed_leader_is_replaced_within_the_lease(
    story: Story,
) -> None:
    assert story.operations["upgraded_s"] > 0
    # The rules of the install's ConfigMap, the operator's own among them; the upgraded
    # ConfigMap's once the pods rolled.
    rules = [e["rules"] for e in story.zombied_log() if e.get("event") == "daemon.started"]
    assert ["node-shutdown", "admission-rejected", "deadline-exceeded"] in rules
    assert rules[-1] == ["node-shutdown", "admission-rejected", "evicted", "deadline-exceeded"]
    # Killed, the leader never released the Lease: a standby sees its last renewal up to
    # one jittered retry period late, waits the lease duration on its own clock, and
    # takes it at its next jittered retry.
    retry = (1 + LEASE_JITTER) * RETRY_S
    assert 0 < story.operations["failover_killed_s"] <= LEASE_S + 2 * retry


def test_a_wedged_replica_gets_no_traffic_and_is_restarted(story: Story) -> None:
    assert story.operations["unserved_s"] < story.operations["restarted_s"]


def test_the_stable_node_drains_while_zombied_is_not_ready(story: Story) -> None:
    assert story.operations["drained_s"] > 0
