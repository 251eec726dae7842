"""What real kubelets leave behind on a Spot node, and what zombied does with it.

The story (tests/nodes/story.py) runs on a real cluster of each release: a graceful
shutdown, a return, a loss, a return as a smaller node with other labels, disk pressure.
These tests read what happened. The kubelet's pods must be those of the recorded corpus
(`kubesim.recorded`; ``ZOMBIED_RECORD_KUBELETS=1`` rewrites it from this run), zombied
must delete exactly the zombies the controllers left, each within a second of its due
time and with the uid and resourceVersion preconditions, and ``scan``, ``explain`` and
the daemon must agree on every pod.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from zombied.pod import parse_pod
from zombied.rules import judge

import kubesim.recorded
from kubesim.recorded import recorded
from tests.nodes import corpus
from tests.nodes.install import USER as ZOMBIED_USER
from tests.nodes.story import Story

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(900)]

RECORD_ENV = "ZOMBIED_RECORD_KUBELETS"
#: zombied's own latency on top of the due time, measured against the kubelet's
#: timestamps (whole seconds, rounded down: a pod is never reaped early for it).
LATENCY_S = 1.0
#: Roles whose last shape depends on a race, recorded as seen once:
#: - the kubelet releases its shutdown lock as soon as the critical pods are down, and
#:   its last status write of them may or may not reach the API before the power goes;
#: - the StatefulSet and DaemonSet controllers delete their pod at the kubelet's first
#:   terminal write, which a current kubelet follows within a second with another
#:   (Failed while the container stops, then Succeeded);
#: - the pods killed at the end of the grace period die just before the kubelet releases
#:   its lock, and their status write too may be lost with the power: the returning
#:   kubelet restarts such a pod, or, with restartPolicy Never (a Job's), writes it Failed
#:   with no reason and no DisruptionTarget, no trace of the shutdown at all.
RACY = frozenset({"critical", "web", "agent", "stubborn", "batch"})
#: Roles racy on one release only. A 1.20 kubelet has once rewritten the pod it evicted
#: for its emptyDir (Failed/Evicted in the API before the shutdown was announced) as
#: Failed/Shutdown when the node shut down; in other runs it kept it Evicted.
RACY_ON = {"v1.20.2": frozenset({"evicted"})}
#: What zombied decides on each role, on every release (the rest differ by release, or
#: are racy).
VERDICTS = {
    "graceful": "node-shutdown",
    "bare": "node-shutdown",
    "done": "no-rule",
    "oom": "no-rule",
    "evicted": "no-rule",
    "static": "mirror-pod",
    "never": "no-rule",
    "cpu-first": "not-terminal",
    "cpu-second": "admission-rejected",
    "selector": "admission-rejected",
    "pressure": "no-rule",
}


def _racy(story: Story) -> frozenset[str]:
    return RACY | RACY_ON.get(story.version, frozenset())


def _differences(story: Story) -> list[str]:
    committed = {pod.role: pod for pod in recorded(story.version)}
    found = {entry["role"]: entry for entry in corpus.entries(story)}
    lines = []
    for role in sorted((set(committed) | set(found)) - _racy(story)):
        if role not in found:
            lines.append(f"{role}: recorded before, not seen now")
            continue
        if role not in committed:
            lines.append(f"{role}: seen now, not recorded before")
            continue
        old, new = committed[role], found[role]
        shapes = corpus.shape(old.pod), corpus.shape(new["pod"])
        # A kubelet that kills a pod writes the pod's end before or after the runtime has
        # let go of its container, from run to run. After, the container is
        # ContainerStatusUnknown ("could not be located") with no times, and the end is
        # read from the DisruptionTarget or Ready condition instead of finishedAt.
        lost = corpus.container_lost(old.pod), corpus.container_lost(new["pod"])
        if lost[0] != lost[1] and all(shape["time from"] for shape in shapes):
            shapes[1]["time from"] = shapes[0]["time from"]
        before = (shapes[0], old.verdict, old.deleted_by)
        now = (shapes[1], new["verdict"], new["deletedBy"])
        if before != now:
            lines.append(f"{role}: recorded {before}\n    now      {now}")
    return lines


def test_the_kubelet_writes_the_recorded_pods(story: Story) -> None:
    if os.environ.get(RECORD_ENV):
        target = Path(kubesim.recorded.__file__).with_name("recorded") / f"{story.version}.json"
        corpus.write(target, story.version, corpus.entries(story))
        return
    differences = _differences(story)
    assert not differences, (
        f"the kubelet {story.version} wrote other pods than recorded "
        f"(rerun with {RECORD_ENV}=1 to record them):\n" + "\n".join(differences)
    )


def test_zombied_decides_on_each_role(story: Story) -> None:
    verdicts = {entry["role"]: entry["verdict"] for entry in corpus.entries(story)}
    racy = _racy(story)
    expected = {role: verdict for role, verdict in VERDICTS.items() if role not in racy}
    assert {role: verdicts.get(role) for role in expected} == expected


def test_zombied_deletes_only_due_zombies_within_a_second(story: Story) -> None:
    histories = story.recorder.pods()
    lateness = {}
    for event in story.deletes():
        if event["user"]["username"] != ZOMBIED_USER:
            continue
        preconditions = event["requestObject"]["preconditions"]
        assert preconditions.get("resourceVersion"), event["requestObject"]
        sent = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        seen = [s for s in histories[preconditions["uid"]] if s.at <= story.monotonic(sent)]
        judgement = judge(parse_pod(seen[-1].pod), corpus.RULES, first_seen=sent)
        assert judgement.zombie, seen[-1].pod
        assert judgement.due is not None
        assert judgement.since_known
        late = (sent - judgement.due) / timedelta(seconds=1)
        # Due while the leader handed over: the new leader reaps it as it leads.
        deleted, led = story.handover
        due = story.monotonic(judgement.due)
        allowed = LATENCY_S + (led - due if deleted - LATENCY_S <= due <= led else 0.0)
        lateness[seen[-1].pod["metadata"]["name"]] = (late, round(allowed, 3))
    assert lateness, "zombied deleted nothing"
    assert all(0 <= late <= allowed for late, allowed in lateness.values()), lateness


def test_every_zombie_is_reaped_and_nothing_else(story: Story) -> None:
    """Each pod whose last state a rule selects is gone: deleted by zombied, or by its
    controller first (StatefulSet and DaemonSet controllers delete their failed pods);
    zombied deleted no other pod."""
    left = []
    for seen in story.recorder.pods().values():
        last = corpus.last_seen(seen)
        by = corpus.deleted_by(story, seen)
        zombie = corpus.verdict(last.pod) in ("node-shutdown", "admission-rejected")
        if zombie and by is None:
            left.append(last.pod["metadata"]["name"])
        if by == "zombied":
            assert zombie, last.pod
    assert not left


def test_scan_explain_and_the_daemon_agree(story: Story) -> None:
    reaped = {
        e["uid"]: (e.get("reason") or None, e["rule"])
        for e in story.zombied_log()
        if e.get("event") == "pod.reaped"
    }
    assert story.views
    compared = []
    for uid, view in story.views.items():
        assert view.scan_rule == view.explain_rule, view.name
        assert (view.explain_rule is None) == (view.explain_skip is not None), view.name
        if uid in reaped:
            reason, rule = reaped[uid]
            # A pod the kubelet rewrote once it was due is deleted before the viewer
            # asks again: only the same state is compared.
            if reason == view.reason:
                assert rule == view.scan_rule, view.name
                compared.append(view.name)
        elif view.scan_rule is not None:
            # A zombie zombied did not delete: its controller did, first.
            by = corpus.deleted_by(story, story.recorder.pods()[uid])
            assert by not in (None, "zombied"), view.name
    assert compared, "no pod zombied reaped was seen by scan and explain in that state"
