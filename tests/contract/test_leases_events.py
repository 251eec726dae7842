"""A Kubernetes API server serves Leases (optimistic concurrency), Events, Nodes, Namespaces."""

from __future__ import annotations

import json

from kubernetes_asyncio import client

from tests.contract.conftest import make_pod, refused


def lease_body(name: str, holder: str) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


async def test_lease_create_get_update_patch_and_a_stale_update(
    coordination: client.CoordinationV1Api, namespace: str
) -> None:
    created = await coordination.create_namespaced_lease(namespace, lease_body("l", "a"))
    assert created.spec.holder_identity == "a"
    got = await coordination.read_namespaced_lease("l", namespace)
    got.spec.holder_identity = "b"
    updated = await coordination.replace_namespaced_lease("l", namespace, got)
    assert updated.spec.holder_identity == "b"
    assert int(updated.metadata.resource_version) > int(got.metadata.resource_version)
    patched = await coordination.patch_namespaced_lease(
        "l", namespace, {"spec": {"leaseTransitions": 3}}
    )
    assert patched.spec.lease_transitions == 3
    assert patched.spec.holder_identity == "b"
    # An update from the version read before is a conflict.
    got.spec.holder_identity = "stale"
    status = await refused(coordination.replace_namespaced_lease("l", namespace, got), 409)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "l": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert status["details"] == {"name": "l", "group": "coordination.k8s.io", "kind": "leases"}


async def test_missing_lease_is_not_found(
    coordination: client.CoordinationV1Api, namespace: str
) -> None:
    status = await refused(coordination.read_namespaced_lease("none", namespace), 404)
    assert status["message"] == 'leases.coordination.k8s.io "none" not found'


async def test_lease_delete_answers_a_success_status(
    coordination: client.CoordinationV1Api, namespace: str
) -> None:
    await coordination.create_namespaced_lease(namespace, lease_body("l", "a"))
    resp = await coordination.delete_namespaced_lease("l", namespace, _preload_content=False)
    body = json.loads(await resp.read())
    assert body["kind"] == "Status"
    assert body["status"] == "Success"


async def test_events_create_and_list(core: client.CoreV1Api, namespace: str) -> None:
    uid = (await make_pod(core, namespace, "p"))["metadata"]["uid"]
    involved = {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": "p", "uid": uid}
    event = {
        "metadata": {"generateName": "p."},
        "involvedObject": involved,
        "reason": "Reaped",
        "message": "deleted",
        "type": "Normal",
        "source": {"component": "zombied"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }
    await core.create_namespaced_event(namespace, event)
    events = await core.list_namespaced_event(namespace, field_selector="reason=Reaped")
    assert [e.involved_object.name for e in events.items] == ["p"]
    events = await core.list_namespaced_event(namespace, field_selector="involvedObject.name=other")
    assert events.items == []


async def test_nodes_and_namespaces_list(core: client.CoreV1Api, namespace: str) -> None:
    namespaces = await core.list_namespace(field_selector=f"metadata.name={namespace}")
    assert [n.metadata.name for n in namespaces.items] == [namespace]
    assert namespaces.items[0].status.phase == "Active"
    nodes = await core.list_node()
    assert nodes.metadata.resource_version


async def test_lease_precondition_conflict_names_the_kind_and_group(
    coordination: client.CoordinationV1Api, namespace: str
) -> None:
    await coordination.create_namespaced_lease(namespace, lease_body("l", "a"))
    wrong = "00000000-0000-4000-8000-000000000000"
    request = coordination.delete_namespaced_lease(
        "l", namespace, body={"preconditions": {"uid": wrong}}
    )
    status = await refused(request, 409)
    assert status["message"].startswith(
        'Operation cannot be fulfilled on Lease.coordination.k8s.io "l": '
    )
    assert wrong in status["message"]
    assert status["details"] == {"name": "l", "group": "coordination.k8s.io", "kind": "Lease"}
    assert (await coordination.read_namespaced_lease("l", namespace)).spec.holder_identity == "a"
