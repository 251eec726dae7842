"""The Spot node's story on a real cluster, told once per release, with zombied watching.

Workloads of every kind run on the spot node; it shuts down gracefully (as GKE's
preemption asks ACPI to) while a pod is bound to it; it comes back; it is lost without
warning and comes back at once; it is lost again, its Node object deleted, and comes
back under the same name, smaller and with other labels; at last it runs out of disk. The
kubelets write what they write; the controllers replace and delete what they do; zombied
(`zombied run`, as a process, at the defaults but for shorter min ages) reaps. The
:class:`Story` keeps every version of every pod (`PodRecorder`), the API server's audit
log (who deleted what, and with which preconditions), zombied's log, and what ``scan``
and ``explain`` said about each pod while it waited: the tests read them afterwards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from zombied.pod import parse_pod, parse_time
from zombied.rules import Rule, RuleSet, judge

from tests.nodes import workloads as w
from tests.nodes.cluster import SPOT, STABLE, NodeCluster, disk_held
from tests.nodes.install import NAMESPACE as ZOMBIED_NAMESPACE
from tests.nodes.install import Install, image_archive
from tests.nodes.recorder import PodRecorder
from tests.realserver.cluster import ClusterError

#: Who runs ``scan`` and ``explain`` beside the installed zombied: an operator.
VIEWER = "viewer"
#: The min age zombied runs with here, for both rules (defaults: 30 s and 5 minutes):
#: long enough for ``scan`` and ``explain`` to see each zombie before it is due.
MIN_AGE_S = 20
#: Every pod of the story runs in this namespace; zombied watches only it.
NAMESPACE = "spot-story"
STEP_TIMEOUT = 120.0

#: The parts of the story, in order, in words.
PHASES = {
    "shutdown": "graceful node shutdown",
    "return": "node back after its shutdown",
    "lost": "node lost without a shutdown, back at once",
    "replaced": "node lost, its Node object deleted, back smaller and with other labels",
    "pressure": "node under disk pressure",
}
#: Each role (what a pod is and what happens to it) and the phase that makes it. The
#: corpus names pods by their role; a role's pods have it as their app label or name.
ROLES = {
    "graceful": ("shutdown", "Deployment pod that exits 0 on SIGTERM"),
    "stubborn": ("shutdown", "Deployment pod killed at the end of its grace period"),
    "batch": ("shutdown", "Job pod running at the shutdown"),
    "done": ("shutdown", "Job pod completed before the shutdown"),
    "web": ("shutdown", "StatefulSet pod"),
    "agent": ("shutdown", "DaemonSet pod"),
    "bare": ("shutdown", "bare pod"),
    "critical": ("shutdown", "critical pod (system-node-critical)"),
    "oom": ("shutdown", "OOMKilled pod"),
    "evicted": ("shutdown", "pod evicted for its emptyDir over sizeLimit"),
    "static": ("shutdown", "mirror pod of a static pod"),
    "late": ("shutdown", "pod bound during the shutdown"),
    "never": ("lost", "pod with restartPolicy Never running when the power went"),
    "cpu-first": ("replaced", "pod admitted first by the smaller node"),
    "cpu-second": ("replaced", "pod admitted next, which no longer fits the node's CPU"),
    "selector": ("replaced", "pod whose node selector the returned node no longer matches"),
    "pressure": ("pressure", "pod evicted under node disk pressure"),
}
#: The roles whose pods run on the spot node when it is told to shut down.
SHUTDOWN_ROLES = frozenset(role for role, (phase, _) in ROLES.items() if phase == "shutdown")


@dataclass
class View:
    """What ``scan`` and ``explain`` said of one pod: is it a zombie, and by which rule;
    and the reason it had when ``explain`` read it."""

    name: str
    scan_rule: str | None
    explain_rule: str | None
    explain_skip: str | None
    reason: str | None


@dataclass
class Story:
    cluster: NodeCluster
    workdir: Path
    recorder: PodRecorder
    #: Each phase and the monotonic time it began.
    phases: dict[str, float] = field(default_factory=dict)
    #: When the spot node was told to shut down, and how long until its kubelet released
    #: its shutdown lock.
    announced_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    released_after_s: float = 0.0
    #: uid → role (see `ROLES`).
    roles: dict[str, str] = field(default_factory=dict)
    #: pod uid → what scan and explain said while it waited.
    views: dict[str, View] = field(default_factory=dict)
    install: Install | None = None
    #: Seconds from ``kubectl apply -k`` to a leader; from ``helm install`` to a leader.
    kustomized_s: float = 0.0
    ready_s: float = 0.0
    #: The nodes helm's install put zombied's replicas on.
    placed: list[str] = field(default_factory=list)
    #: The leader's pod deleted while the shutdown's zombies came due: seconds until the
    #: other replica led.
    failover_s: float = 0.0
    #: Monotonic times the leader's pod was deleted and the other replica led.
    handover: tuple[float, float] = (0.0, 0.0)
    #: The leader's /metrics at the end, and the Reaped Events in the story's namespace.
    metrics: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    #: What the operator's interventions took, in seconds (see `_operate`).
    operations: dict[str, float] = field(default_factory=dict)
    #: The leader's (CPU millicores, working set bytes) while it reaps and at the end.
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Monotonic and wall clock at one instant, to place audit times on the recorder's.
    clock: tuple[float, datetime] = field(
        default_factory=lambda: (time.monotonic(), datetime.now(UTC))
    )

    @property
    def version(self) -> str:
        return self.cluster.release.version

    def monotonic(self, moment: datetime) -> float:
        mono, wall = self.clock
        return mono + (moment - wall).total_seconds()

    # ------------------------------------------------------------------ reading

    def figures(self) -> dict[str, Any]:
        """What was measured, for the record (written beside the story's logs)."""
        return {
            "release": self.version,
            "kubelet released its shutdown lock after s": round(self.released_after_s, 1),
            "kubectl apply -k to a leader, s": round(self.kustomized_s, 1),
            "helm install to a leader, s": round(self.ready_s, 1),
            "leader's pod deleted, the other leads after s": round(self.failover_s, 1),
            **{f"{name}": round(value, 1) for name, value in self.operations.items()},
            "leader's CPU (millicores) and working set (MiB)": {
                when: [cpu, round(memory / 2**20, 1)] for when, (cpu, memory) in self.usage.items()
            },
        }

    def phase_end(self, phase: str) -> float:
        """The monotonic time the part of the story after ``phase`` began."""
        names = list(self.phases)
        later = names[names.index(phase) + 1 :] if phase in names else []
        return self.phases[later[0]] if later else float("inf")

    def zombied_log(self) -> list[dict[str, Any]]:
        assert self.install is not None
        return self.install.logs()

    def deletes(self) -> list[dict[str, Any]]:
        """Every completed DELETE of a pod in the story's namespace, oldest first."""
        return self.cluster.audit(verb="delete", resource="pods", namespace=NAMESPACE)


# ---------------------------------------------------------------------- the telling


def tell(cluster: NodeCluster, workdir: Path, helm: str) -> Story:
    """Install zombied (kustomize, then helm), then run the whole story on ``cluster``
    and the operator's interventions after it; return what happened."""
    archive, image = image_archive()
    cluster.nodes[STABLE].import_image(archive)
    install = Install(cluster, workdir, image, helm)
    cluster.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    with PodRecorder(cluster, NAMESPACE) as recorder, install.collecting():
        story = Story(cluster, workdir, recorder, install=install)
        story.kustomized_s = _kustomize(install)
        started = time.monotonic()
        install.helm_install(helm_values(image))
        install.wait(install.leader, "a leader")
        story.ready_s = time.monotonic() - started
        story.placed = sorted(p["spec"]["nodeName"] for p in install.pods())
        with _Viewer(story):
            _shutdown(story)
            _return_and_lose(story)
            _return_replaced(story)
            _disk_pressure(story)
            _observe(story)
        _operate(story)
        install.helm_uninstall()
    (workdir / "figures.json").write_text(json.dumps(story.figures(), indent=1))
    return story


def _operate(story: Story) -> None:
    """What an operator does to zombied after the story: a ``helm upgrade`` that changes
    an argument; its leader killed; its next leader wedged (SIGSTOP) until the liveness
    probe restarts it; its RBAC removed, then the stable node drained."""
    install = story.install
    assert install is not None
    before = {p["metadata"]["name"] for p in install.pods()}
    started = time.monotonic()
    # Another argument, and one rule more in the config file: the pods roll.
    config = {"rules": [*CONFIG["rules"], {"name": "evicted", "minAge": "1h"}]}
    install.helm_install(
        helm_values(install.image, extraArgs=["--qps=25"], config=config), upgrade=True
    )
    install.wait(lambda: not before & {p["metadata"]["name"] for p in install.pods()}, "new pods")
    install.wait(install.leader, "a leader after the upgrade")
    story.operations["upgraded_s"] = time.monotonic() - started

    leader, holder = install.leader(), install.holder()
    assert leader is not None
    killed_at = datetime.now(UTC)
    # Killed outright, it cannot release the Lease: another process leads once it expires.
    install.signal(leader, "SIGKILL")
    install.wait(
        lambda: install.leader() is not None and install.holder() != holder, "another leader"
    )
    # When the other took the Lease by its own record, so that how often this test looks
    # adds nothing: the pods run on this machine's clock.
    acquired = parse_time(install.lease().get("acquireTime"))
    assert acquired is not None
    story.operations["failover_killed_s"] = (acquired - killed_at).total_seconds()

    wedged = install.leader()
    assert wedged is not None
    restarts = install.restarts(wedged)
    install.signal(wedged, "SIGSTOP")
    started = time.monotonic()
    install.wait(lambda: not install.serving(wedged), "the wedged pod out of the Service")
    story.operations["unserved_s"] = time.monotonic() - started
    install.wait(lambda: install.restarts(wedged) > restarts, "the liveness probe to restart it")
    story.operations["restarted_s"] = time.monotonic() - started
    install.wait(lambda: install.serving(wedged), "the restarted pod back in the Service")

    install.kubectl("delete", "clusterrolebinding", "zombied")
    install.kubectl(
        "--namespace", ZOMBIED_NAMESPACE, "delete", "rolebinding", "zombied-leader-election"
    )
    install.wait(lambda: not install.ready(1), "zombied not ready without its RBAC")
    started = time.monotonic()
    install.kubectl(
        "drain", STABLE, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"
    )
    story.operations["drained_s"] = time.monotonic() - started
    install.kubectl("uncordon", STABLE)


def _observe(story: Story) -> None:
    """What an operator sees at the end: the leader's metrics, the Reaped Events, the
    kubelet's measure of zombied's pods."""
    install = story.install
    assert install is not None
    leader = next(p for p in install.pods() if p["metadata"]["name"] == install.leader())
    story.metrics = install.metrics(leader)
    story.usage["idle"] = install.usage()[leader["metadata"]["name"]]
    status, body = story.cluster.request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=reason%3DReaped"
    )
    if status != 200:
        raise ClusterError(f"listing Events: {status} {body}")
    story.events = body["items"]


#: zombied's configuration file in the install (its ConfigMap): the story's min ages
#: and a rule of the operator's own, which selects no pod of the story.
CONFIG = {
    "rules": [
        {"name": "node-shutdown", "minAge": f"{MIN_AGE_S}s"},
        {"name": "admission-rejected", "minAge": f"{MIN_AGE_S}s"},
        {
            "name": "deadline-exceeded",
            "phases": ["Failed"],
            "reasons": ["DeadlineExceeded"],
            "minAge": "1h",
        },
    ]
}


def helm_values(image: str, **more: Any) -> dict[str, Any]:
    """The chart's values: the image built here, the story's configuration, ``more``."""
    name, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": name, "tag": tag, "pullPolicy": "Never"},
        "config": CONFIG,
        **more,
    }


def _kustomize(install: Install) -> float:
    """``kubectl apply -k`` of the kustomize tree, as a user would with an overlay naming
    their image (and, on a server before 1.27, without the disruption budget); both
    replicas ready and one leading; then ``kubectl delete -k``. The seconds from apply
    to a leader."""
    old = install.cluster.release.version == "v1.20.2"
    overlay = install.kustomization(
        "",
        ["no-disruption-budget"] if old else [],
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "zombied"},
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "zombied", "imagePullPolicy": "Never"}]}
                    }
                },
            }
        ],
    )
    started = time.monotonic()
    install.kubectl("apply", "-k", str(overlay))
    install.wait(install.ready, "both replicas ready")
    install.wait(install.leader, "a leader")
    elapsed = time.monotonic() - started
    install.kubectl("delete", "-k", str(overlay), "--wait=true")
    return elapsed


def _post(story: Story, obj: dict[str, Any]) -> dict[str, Any]:
    path = "/" + w.collection(obj["kind"]).format(namespace=NAMESPACE)
    status, body = story.cluster.request("POST", path, obj)
    if status != 201:
        raise ClusterError(f"creating {obj['kind']} {obj['metadata']['name']}: {status} {body}")
    return dict(body)


def _wait(ready: Callable[[], object], what: str, timeout: float = STEP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise ClusterError(f"no {what} after {timeout:.0f}s")
        time.sleep(0.2)


def _on(story: Story, node: str) -> list[dict[str, Any]]:
    return [p for p in story.recorder.latest() if p["spec"].get("nodeName") == node]


TERMINAL = ("Succeeded", "Failed")


def _phase(pod: dict[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def _stopped(pod: dict[str, Any]) -> bool:
    """Whether no container of the pod is written as running or waiting."""
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return all("terminated" in c.get("state", {}) for c in statuses)


def _resynced(story: Story, node: str, bound: list[dict[str, Any]]) -> bool:
    """Whether the node's kubelet, since its last boot, has written every pod that was
    bound to it and not terminal: each now runs its containers or is terminal."""
    booted = story.cluster.nodes[node].booted_at.replace(microsecond=0)
    latest = {p["metadata"]["uid"]: p for p in story.recorder.latest()}
    for uid in (p["metadata"]["uid"] for p in bound if _phase(p) not in TERMINAL):
        pod = latest.get(uid)
        if pod is None:
            continue  # deleted meanwhile (by its controller, PodGC or zombied)
        writes = [
            parse_time(entry.get("time"))
            for entry in pod["metadata"].get("managedFields", [])
            if entry.get("manager") == "kubelet"
        ]
        if not any(stamp is not None and stamp >= booted for stamp in writes):
            return False
        statuses = pod.get("status", {}).get("containerStatuses", [])
        running = statuses and all("running" in c.get("state", {}) for c in statuses)
        if _phase(pod) not in TERMINAL and not running:
            return False
    return True


def _reboot(story: Story, node_name: str) -> None:
    """Boot the node again; return once its kubelet has dealt with every pod bound to it."""
    bound = _on(story, node_name)
    node = story.cluster.nodes[node_name]
    node.boot()
    story.cluster.wait_ready(node_name)
    _wait(lambda: _resynced(story, node_name, bound), f"{node_name}'s kubelet to sync its pods")


def _name_roles(story: Story, pods: list[dict[str, Any]]) -> None:
    """Give each pod without a role the role its app label names."""
    for pod in pods:
        app = pod["metadata"].get("labels", {}).get("app", "")
        role = app if app in ROLES else None
        if role is not None:
            story.roles.setdefault(pod["metadata"]["uid"], role)


def _shutdown(story: Story) -> None:
    story.phases["shutdown"] = time.monotonic()
    spot = {"pool": "spot"}
    _post(story, w.deployment("graceful", w.pod_spec(w.GRACEFUL, **spot), replicas=2))
    _post(story, w.deployment("stubborn", w.pod_spec(w.STUBBORN, **spot)))
    _post(story, w.job("batch", w.pod_spec(w.STUBBORN, restart="Never", **spot)))
    _post(story, w.job("done", w.pod_spec(["true"], restart="Never", **spot)))
    _post(story, w.statefulset("web", w.pod_spec(w.GRACEFUL, **spot)))
    _post(story, w.daemonset("agent", w.pod_spec(w.GRACEFUL)))
    _post(story, w.pod("bare", w.pod_spec(w.GRACEFUL, node=SPOT)))
    critical = w.pod_spec(w.GRACEFUL, node=SPOT, priorityClassName="system-node-critical")
    _post(story, w.pod("critical", critical))
    oom = w.pod_spec(["sh", "-c", "head -c 200m /dev/zero | tail"], restart="Never", node=SPOT)
    oom["containers"][0]["resources"] = {"limits": {"memory": "16Mi"}}
    _post(story, w.pod("oom", oom))
    scratch = w.pod_spec(
        ["sh", "-c", "dd if=/dev/zero of=/scratch/f bs=1M count=8; sleep 3600"],
        node=SPOT,
        volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
    )
    scratch["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    _post(story, w.pod("evicted", scratch))
    static = w.pod("static", w.pod_spec(w.GRACEFUL))
    static["metadata"]["namespace"] = NAMESPACE
    (story.cluster.nodes[SPOT].directory / "manifests" / "static.json").write_text(
        json.dumps(static)
    )

    def ready() -> bool:
        pods = {p["metadata"].get("labels", {}).get("app"): p for p in _on(story, SPOT)}
        terminal = {"done": "Succeeded", "oom": "Failed", "evicted": "Failed"}
        return set(pods) >= set(SHUTDOWN_ROLES) - {"late"} and all(
            _phase(pod) == terminal.get(app, "Running") for app, pod in pods.items()
        )

    _wait(ready, "workloads running on the spot node")
    _name_roles(story, _on(story, SPOT))

    node = story.cluster.nodes[SPOT]
    node.announce_shutdown()
    announced = time.monotonic()
    story.announced_at = datetime.now(UTC)
    # A pod bound while the kubelet ends the others, as a scheduler (or a DaemonSet)
    # does before it sees the node go.
    _wait(
        lambda: any(
            story.roles.get(p["metadata"]["uid"]) in ("graceful", "bare") and _phase(p) != "Running"
            for p in _on(story, SPOT)
        ),
        "the kubelet to end the first pod",
    )
    _name_roles(story, [_post(story, w.pod("late", w.pod_spec(w.GRACEFUL, node=SPOT)))])
    node.power_off()
    story.released_after_s = time.monotonic() - announced
    _hand_over(story)
    _wait_reaped(story)


def _hand_over(story: Story) -> None:
    """As the zombies come due, the leader's pod is deleted (a node drain, a rollout):
    its kubelet sends SIGTERM, it drains, the other replica leads and reaps the rest."""
    install = story.install
    assert install is not None
    install.wait(
        lambda: any(e.get("event") == "pod.reaped" for e in install.logs()),
        "the first zombie reaped",
    )
    leader = install.leader()
    assert leader is not None
    story.usage["storm"] = install.usage()[leader]
    started = time.monotonic()
    install.kubectl("--namespace", ZOMBIED_NAMESPACE, "delete", "pod", leader, "--wait=false")
    install.wait(lambda: install.leader() not in (None, leader), "the other replica to lead")
    story.handover = (started, time.monotonic())
    story.failover_s = story.handover[1] - started


def _return_and_lose(story: Story) -> None:
    """The node returns; its pods run; it is lost without warning and returns at once,
    well inside the eviction timeout: the kubelet meets its pods again."""
    story.phases["return"] = time.monotonic()
    node = story.cluster.nodes[SPOT]
    _reboot(story, SPOT)
    created = datetime.min.replace(tzinfo=UTC)
    for name in ("cpu-first", "never", "selector", "cpu-second"):
        spec = w.pod_spec(w.GRACEFUL, pool="spot", restart="Never" if name == "never" else "Always")
        if name.startswith("cpu"):
            # Placed by the node's own name: its labels change, its name does not.
            spec["nodeSelector"] = {"kubernetes.io/hostname": SPOT}
            spec["containers"][0]["resources"] = {"requests": {"cpu": "700m"}}
            # The kubelet admits the pods bound to it in the order of their creation
            # times, which are to the second: cpu-first's must be the earlier.
            after = created + timedelta(seconds=1)
            _wait(lambda after=after: datetime.now(UTC) >= after, "a new second")
        pod = _post(story, w.pod(name, spec))
        created = parse_time(pod["metadata"]["creationTimestamp"]) or created
        _name_roles(story, [pod])
        _wait(
            lambda name=name: any(
                p["metadata"]["name"] == name and _phase(p) == "Running" for p in _on(story, SPOT)
            ),
            f"{name} running",
        )
    story.phases["lost"] = time.monotonic()
    node.kill()
    _reboot(story, SPOT)
    _wait_reaped(story)


def _return_replaced(story: Story) -> None:
    """Lost again, and its Node object deleted (as a cloud's node controller does for
    a VM it no longer sees); the VM comes back under the same name, smaller and with
    other labels, and registers anew: its kubelet rejects the pods still bound to it.
    With the Node gone, the kubelet admits them against its new capacity; a Node object
    left in place would still show the old one for a moment, and which pod fits would
    be a race."""
    story.phases["replaced"] = time.monotonic()
    node = story.cluster.nodes[SPOT]
    node.kill()
    status, body = story.cluster.request("DELETE", f"/api/v1/nodes/{SPOT}")
    if status != 200:
        raise ClusterError(f"deleting node {SPOT}: {status} {body}")
    node.system_reserved = {"cpu": "1"}
    node.labels = {**node.labels, w.POOL: "spot-2"}
    _reboot(story, SPOT)
    # The kubelet judges the pods bound to it by the Node it registered: if that is not
    # the new one, a pod it admits is this cluster's fault, not the kubelet's.
    found, registered = story.cluster.request("GET", f"/api/v1/nodes/{SPOT}")
    assert found == 200, f"{SPOT} after it returned: {found} {registered}"
    labels = registered.get("metadata", {}).get("labels", {})
    status = registered.get("status", {})
    assert labels.get(w.POOL) == "spot-2", f"{SPOT} registered with {labels}"
    assert status.get("allocatable", {}).get("cpu") != status.get("capacity", {}).get("cpu"), status
    _wait_reaped(story)


def _disk_pressure(story: Story) -> None:
    """A pod fills the disk past the kubelet's threshold: a node-pressure eviction."""
    story.phases["pressure"] = time.monotonic()
    node = story.cluster.nodes[SPOT]
    node.kill()
    with disk_held():
        # The threshold: 500 MiB less free space than there is now; the pod writes 1500,
        # so that whatever else this machine writes meanwhile, it alone crosses it.
        free = shutil.disk_usage(node.directory).free // 2**20
        node.eviction_hard = {**node.eviction_hard, "nodefs.available": f"{free - 500}Mi"}
        _reboot(story, SPOT)
        filler = w.pod_spec(
            ["sh", "-c", "dd if=/dev/zero of=/fill bs=1M count=1500; sleep 3600"], node=SPOT
        )
        _name_roles(story, [_post(story, w.pod("pressure", filler))])
        # The kubelet writes the pod Failed at once and its container's end when the
        # container has stopped; the node goes only after both, or which the corpus
        # records would be a race.
        _wait(
            lambda: any(
                p["metadata"]["name"] == "pressure" and _phase(p) == "Failed" and _stopped(p)
                for p in story.recorder.latest()
            ),
            "the kubelet to evict the pod and stop its container",
        )
        node.kill()


class _Viewer:
    """Asks ``scan`` and ``explain`` about each pod as soon as it turns terminal, while
    it waits for its min age: in a thread of its own, for the whole story."""

    def __init__(self, story: Story) -> None:
        self.story = story
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> None:
        self.thread.start()

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(60)
        if self.error is not None:
            raise ClusterError(f"scan or explain failed: {self.error}") from self.error

    def _run(self) -> None:
        while not self.stop.wait(0.3):
            try:
                self.view()
            except Exception as exc:
                self.error = exc
                return

    def gone(self) -> set[str]:
        """The names of the pods deleted, or being deleted, with no other of that name."""
        there = {
            p["metadata"]["name"]
            for p in self.story.recorder.latest()
            if not p["metadata"].get("deletionTimestamp")
        }
        return {
            seen[0].pod["metadata"]["name"] for seen in self.story.recorder.pods().values()
        } - there

    def view(self) -> None:
        story = self.story
        kubeconfig = str(story.cluster.kubeconfig(VIEWER))
        base = [sys.executable, "-m", "zombied"]
        config = story.workdir / "zombied.yaml"
        config.write_text(json.dumps(CONFIG))
        common = [f"--kubeconfig={kubeconfig}", f"--namespaces={NAMESPACE}", f"--config={config}"]
        terminal = [
            p["metadata"]["name"]
            for p in story.recorder.latest()
            if _phase(p) in TERMINAL and _unviewed(story, p)
        ]
        if not terminal:
            return
        scan = subprocess.Popen(
            [*base, "scan", *common, f"--namespace={NAMESPACE}", "--waiting", "-o", "json"],
            stdout=subprocess.PIPE,
        )
        explains = {
            name: subprocess.Popen(
                [*base, "explain", *common, f"{NAMESPACE}/{name}", "-o", "json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for name in terminal
        }
        listed = {item["pod"]["name"]: item["rule"] for item in json.loads(scan.communicate()[0])}
        for name, process in explains.items():
            out, err = process.communicate()
            if process.returncode != 0 and name in self.gone():
                continue  # its controller deleted it at once: nothing to explain
            if process.returncode != 0:
                raise ClusterError(f"explain {name}: {err.decode()}")
            explained = json.loads(out)
            story.views[explained["pod"]["uid"]] = View(
                name,
                listed.get(name),
                explained.get("rule"),
                explained.get("skip"),
                explained["pod"]["reason"],
            )


def _unviewed(story: Story, pod: dict[str, Any]) -> bool:
    """Whether scan and explain have yet to see ``pod`` with its reason: a pod is asked
    about again when its kubelet rewrites it (a 1.20 kubelet once turned Evicted into
    Shutdown)."""
    view = story.views.get(pod["metadata"]["uid"])
    return view is None or view.reason != (pod.get("status", {}).get("reason") or None)


def _wait_reaped(story: Story) -> None:
    """Until zombied has deleted every pod it will: none left that a rule selects. The
    next phase's reboot would have the kubelet write its terminal pods again."""
    rules = RuleSet((Rule("node-shutdown", MIN_AGE_S), Rule("admission-rejected", MIN_AGE_S)))
    now = datetime.now(UTC)

    def left() -> list[str]:
        return [
            p["metadata"]["name"]
            for p in story.recorder.latest()
            if judge(parse_pod(p), rules, first_seen=now).zombie
        ]

    _wait(lambda: not left(), f"zombied to reap {left()}", timeout=MIN_AGE_S + 60)
