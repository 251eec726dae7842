"""A Spot node lost both ways, reaped by ``zombied run`` on each real kube-apiserver.

One node shut down gracefully (node-shutdown zombies of every kubelet version); another
was preempted and came back under the same name, so its kubelet rejected at admission
the pods still bound to it (admission-rejected zombies, as kubelets 1.20-1.25 and 1.26+
word them). Around them sit the pods zombied must keep: replacements running elsewhere,
a Pending pod, an Evicted one, failed Job pods, pods that merely look like a rejection,
and zombies an operator annotated to keep. The messages are written out literally, in
the kubelet's words (pkg/kubelet/lifecycle and the device manager), not taken from the
simulator, so this checks the rules against the kubelet rather than against kubesim.

What the server did is read back from it: the pods left, and the audit log.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterable
from typing import Any

import anyio
import pytest

from tests.daemon.pods import evicted, pod, zombie
from tests.daemon.test_cli import readyz, zombied_run
from tests.helpers import eventually
from tests.realserver.cluster import RealCluster
from tests.realserver.test_zombied_real import ZOMBIED
from tests.realserver.workload import create_pod, pod_names, zombies

pytestmark = [pytest.mark.subprocess]

TIMEOUT = 60.0
SHUT_NODE = "spot-shut"
RETURNED_NODE = "spot-back"
OTHER_NODE = "on-demand-1"
#: Both default rules, admission-rejected without its own 5m wait (node-shutdown takes
#: the ``--min-age 0s`` the process helper passes).
RULES = ("--rules", "node-shutdown,admission-rejected=0s")
KEEP = {"zombied.io/keep": "true"}

# -- the kubelet's admission rejections, as written ------------------------------------

_GPU_120 = (
    "Update plugin resources failed due to requested number of devices unavailable for "
    "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected."
)
_GPU_FULL = "Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 1, capacity: 1"
_GPU_127 = (
    "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
    "nvidia.com/gpu, which is unexpected"
)
#: (kubelet version, reason, message after the version's prefix)
REJECTIONS = (
    ("1.20", "NodeAffinity", "Predicate NodeAffinity failed"),
    ("1.20", "UnexpectedAdmissionError", _GPU_120),
    (
        "1.24",
        "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 500, used: 3800, capacity: 4000",
    ),
    ("1.25", "NodePorts", "Predicate NodePorts failed"),
    ("1.26", "OutOfnvidia.com/gpu", _GPU_FULL),
    ("1.27", "UnexpectedAdmissionError", _GPU_127),
    ("1.29", "TaintToleration", "Predicate TaintToleration failed"),
    (
        "1.31",
        "NodeAffinity",
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
    ),
    (
        "1.31",
        "OutOfmemory",
        "Node didn't have enough resource: memory, requested: 536870912, "
        "used: 16106127360, capacity: 16487464960",
    ),
)


def rejection_message(version: str, body: str) -> str:
    """The kubelet's rejectPod prefix: "Pod " up to 1.25, "Pod was rejected: " since 1.26."""
    minor = int(version.split(".")[1])
    return ("Pod was rejected: " if minor >= 26 else "Pod ") + body


def on_node(node: str, body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["nodeName"] = node
    return body


def rejected(namespace: str, version: str, reason: str, body: str, **kwargs: Any) -> dict[str, Any]:
    """A pod the returned node's kubelet rejected at admission."""
    kwargs.setdefault("phase", "Failed")
    message = rejection_message(version, body)
    return on_node(RETURNED_NODE, pod("", namespace, reason=reason, message=message, **kwargs))


def _slug(reason: str) -> str:
    return reason.lower().replace(".", "-").replace("/", "-")


def shutdown_zombies(namespace: str) -> dict[str, dict[str, Any]]:
    return {name: on_node(SHUT_NODE, body) for name, body in zombies(namespace, "shut").items()}


def admission_zombies(namespace: str) -> dict[str, dict[str, Any]]:
    found = {}
    for version, reason, body in REJECTIONS:
        name = f"back-v{version.replace('.', '')}-{_slug(reason)}"
        found[name] = rejected(namespace, version, reason, body)
    return found


def keepers(namespace: str) -> dict[str, dict[str, Any]]:
    """Pods neither default rule may select, each for a reason of its own."""
    job = ("Job", "nightly")
    affinity = rejection_message("1.26", "Predicate NodeAffinity failed")
    return {
        # The replacements the ReplicaSets made, running on a node that stayed.
        "web-replacement-1": on_node(OTHER_NODE, pod("", namespace, phase="Running")),
        "web-replacement-2": on_node(OTHER_NODE, pod("", namespace, phase="Running")),
        # Not terminal, whatever its reason and message say.
        "pending": on_node(
            RETURNED_NODE,
            pod("", namespace, phase="Pending", reason="NodeAffinity", message=affinity),
        ),
        "evicted": on_node(OTHER_NODE, evicted("", namespace)),
        "job-crashed": pod("", namespace, phase="Failed", reason=None, owner=job),
        "job-backoff": pod(
            "",
            namespace,
            phase="Failed",
            reason="BackoffLimitExceeded",
            message="Job has reached the specified backoff limit",
            owner=job,
        ),
        # Look like a rejection but are not the kubelet's: a rejection is never Succeeded,
        # always has the rejectPod prefix and an admit handler's wording, and OutOf names
        # a resource.
        "lookalike-succeeded": rejected(
            namespace, "1.26", "NodeAffinity", "Predicate NodeAffinity failed", phase="Succeeded"
        ),
        "lookalike-unprefixed": on_node(
            RETURNED_NODE,
            pod(
                "",
                namespace,
                phase="Failed",
                reason="OutOfcpu",
                message="Node didn't have enough resource: cpu, requested: 500, used: 3800, "
                "capacity: 4000",
            ),
        ),
        "lookalike-own-words": on_node(
            RETURNED_NODE,
            pod(
                "",
                namespace,
                phase="Failed",
                reason="NodeAffinity",
                message="Pod was rejected: our admission webhook says the zone is wrong",
            ),
        ),
        "lookalike-outof": rejected(
            namespace,
            "1.27",
            "OutOf",
            "Node didn't have enough resource: , requested: 1, used: 1, capacity: 1",
        ),
        # Zombies of both kinds an operator asked zombied to leave alone.
        "shut-kept": on_node(SHUT_NODE, zombie("", namespace, annotations=KEEP)),
        "back-kept": rejected(
            namespace, "1.27", "OutOfnvidia.com/gpu", _GPU_FULL, annotations=KEEP
        ),
    }


def create_all(cluster: RealCluster, pods: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Create every pod as its kubelet left it; the server's objects by name."""
    return {name: create_pod(cluster, name, body) for name, body in pods.items()}


def uids(pods: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: obj["metadata"]["uid"] for name, obj in pods.items()}


async def explain(cluster: RealCluster, namespace: str, name: str, *args: str) -> tuple[int, Any]:
    """``zombied explain -o json``: its exit code and document (its stderr if it failed)."""
    command = [ZOMBIED, "explain", "--kubeconfig", str(cluster.admin_kubeconfig)]
    command += ["--namespaces", namespace, "-o", "json", *args, f"{namespace}/{name}"]
    done = await anyio.run_process(command, check=False)
    if done.returncode != 0:
        return done.returncode, done.stderr.decode()
    return done.returncode, json.loads(done.stdout)


async def explain_all(
    cluster: RealCluster, namespace: str, asks: Iterable[tuple[str, tuple[str, ...]]]
) -> list[tuple[int, Any]]:
    """Several explains at once (each is a process start), answers in the order asked."""
    listed = list(asks)
    answers: list[tuple[int, Any]] = [(-1, None)] * len(listed)

    async def one(index: int, name: str, args: tuple[str, ...]) -> None:
        answers[index] = await explain(cluster, namespace, name, *args)

    async with anyio.create_task_group() as tg:
        for index, (name, args) in enumerate(listed):
            tg.start_soon(one, index, name, args)
    return answers


def _rule(document: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in document["rules"] if r["name"] == name)
    return found


def verdict(document: dict[str, Any]) -> dict[str, Any]:
    """The decision part of an explain document."""
    return {key: document[key] for key in ("zombie", "rule", "due", "skip", "decision")}


def _veto(document: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(v for v in document["vetoes"] if v["name"] == name)
    return found


def write_status(
    cluster: RealCluster, obj: dict[str, Any], status: dict[str, Any]
) -> dict[str, Any]:
    """Write ``status`` over the pod's, as its kubelet does; the server's object."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/status"
    code, updated = cluster.request("PUT", path, {**obj, "status": status})
    assert code == 200, updated
    result: dict[str, Any] = updated
    return result


async def test_both_kinds_of_zombie_are_reaped_and_nothing_else(real_cluster: RealCluster) -> None:
    namespace = real_cluster.create_namespace("spot")
    shut = create_all(real_cluster, shutdown_zombies(namespace))
    back = create_all(real_cluster, admission_zombies(namespace))
    kept = create_all(real_cluster, keepers(namespace))
    # Still Running on the returned node when zombied starts: its kubelet rejects one
    # (zombied learns of it from the watch), and the other crashes.
    live = create_all(
        real_cluster,
        {
            "back-live-v128-nodename": on_node(RETURNED_NODE, pod("", namespace)),
            "live-crashed": on_node(RETURNED_NODE, pod("", namespace)),
        },
    )

    # Before zombied runs: what explain says of one zombie of each kind, a lookalike and
    # a zombie annotated to be kept.
    shut_name, back_name = "shut-v122-killed", "back-v126-outofnvidia-com-gpu"
    (
        (shut_code, shut_doc),
        (back_code, back_doc),
        (wait_code, wait_doc),
        (kept_code, kept_doc),
        (veto_code, veto_doc),
    ) = await explain_all(
        real_cluster,
        namespace,
        [
            (shut_name, RULES),
            (back_name, RULES),
            (back_name, ()),  # the defaults: admission-rejected waits 5m
            ("lookalike-succeeded", RULES),
            ("back-kept", RULES),
        ],
    )
    assert shut_code == 0, shut_doc
    assert shut_doc["pod"]["uid"] == shut[shut_name]["metadata"]["uid"]
    assert verdict(shut_doc) == {
        "zombie": True,
        "rule": "node-shutdown",
        "due": shut_doc["due"],
        "skip": None,
        "decision": "delete",
    }
    assert shut_doc["due"] <= shut_doc["now"]
    assert shut_doc["summary"].startswith("delete it now: rule node-shutdown matches")
    assert not any(veto["applies"] for veto in shut_doc["vetoes"])

    assert back_code == 0, back_doc
    assert back_doc["pod"]["reason"] == "OutOfnvidia.com/gpu"
    assert back_doc["pod"]["node"] == RETURNED_NODE
    assert (back_doc["zombie"], back_doc["rule"]) == (True, "admission-rejected")
    assert back_doc["decision"] == "delete"
    assert _rule(back_doc, "admission-rejected")["matches"] is True
    assert _rule(back_doc, "admission-rejected")["minAge"] == "0s"
    assert _rule(back_doc, "node-shutdown")["matches"] is False

    assert wait_code == 0, wait_doc
    assert (wait_doc["decision"], wait_doc["rule"]) == ("wait", "admission-rejected")
    assert _rule(wait_doc, "admission-rejected")["minAge"] == "5m"
    assert wait_doc["due"] > wait_doc["now"]

    assert kept_code == 0, kept_doc
    assert verdict(kept_doc) == {
        "zombie": False,
        "rule": None,
        "due": None,
        "skip": "no-rule",
        "decision": "keep",
    }
    assert "Succeeded" in _rule(kept_doc, "admission-rejected")["mismatch"]
    assert "NodeAffinity" in _rule(kept_doc, "node-shutdown")["mismatch"]

    assert veto_code == 0, veto_doc
    assert (veto_doc["decision"], veto_doc["skip"]) == ("keep", "keep-annotation")
    assert _veto(veto_doc, "keep-annotation")["applies"] is True
    # The pattern still matches: only the annotation keeps it.
    assert _rule(veto_doc, "admission-rejected")["matches"] is True

    async with zombied_run(
        real_cluster.admin_kubeconfig, "--namespaces", namespace, *RULES
    ) as running:
        await eventually(lambda: running.events("http.listening"), timeout=TIMEOUT)
        await eventually(lambda: readyz(running.port()), timeout=TIMEOUT)
        back["back-live-v128-nodename"] = write_status(
            real_cluster,
            live["back-live-v128-nodename"],
            rejected(namespace, "1.28", "NodeName", "Predicate NodeName failed")["status"],
        )
        kept["live-crashed"] = write_status(
            real_cluster,
            live["live-crashed"],
            pod("", namespace, phase="Failed", owner=("Job", "nightly"))["status"],
        )
        await eventually(
            lambda: pod_names(real_cluster, namespace) == set(kept),
            timeout=TIMEOUT,
            message="every zombie of both kinds deleted, every other pod left",
        )
        running.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            code = await running.process.wait()
    assert code == 0
    doomed = {**shut, **back}
    reaped = {event["pod"]: event.get("rule") for event in running.events("pod.reaped")}
    assert reaped == dict.fromkeys(shut, "node-shutdown") | dict.fromkeys(
        back, "admission-rejected"
    )

    # The audit log: one DELETE per zombie and no other, each answered 200 and guarded by
    # the uid and resourceVersion zombied saw, in the body and not a dry run.
    deletes = real_cluster.audit(verb="delete", resource="pods", namespace=namespace)
    assert sorted(event["objectRef"]["name"] for event in deletes) == sorted(doomed)
    for event in deletes:
        name = event["objectRef"]["name"]
        assert event["responseStatus"]["code"] == 200, event["responseStatus"]
        body = event["requestObject"]
        assert body["preconditions"] == {
            "uid": doomed[name]["metadata"]["uid"],
            "resourceVersion": doomed[name]["metadata"]["resourceVersion"],
        }
        assert not body.get("dryRun")
        assert "?" not in event["requestURI"]
    assert real_cluster.audit(verb="deletecollection", namespace=namespace) == []
    # The kept pods are the very objects created, untouched.
    code, listed = real_cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    assert code == 200
    assert {item["metadata"]["name"]: item["metadata"]["uid"] for item in listed["items"]} == uids(
        kept
    )
    assert not any("deletionTimestamp" in item["metadata"] for item in listed["items"])

    # A reaped zombie is gone: explain says so with exit 1.
    gone_code, gone = await explain(real_cluster, namespace, back_name, *RULES)
    assert gone_code == 1
    assert f"pod {namespace}/{back_name} not found" in gone
