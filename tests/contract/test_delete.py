"""A Kubernetes API server deletes pods with preconditions, dry run and grace periods."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.conftest import (
    Server,
    by_version,
    checked,
    make_pod,
    pod_manifest,
    raw,
    refused,
    set_phase,
    watch_pods,
)


async def exists(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        await core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def delete_raw(
    core: client.CoreV1Api, namespace: str, name: str, **kw: Any
) -> dict[str, Any]:
    resp = await core.delete_namespaced_pod(name, namespace, _preload_content=False, **kw)
    return await checked(resp)


async def test_uid_precondition_mismatch_is_a_conflict(
    core: client.CoreV1Api, namespace: str
) -> None:
    pod = await make_pod(core, namespace, "web-0", phase="Failed")
    wrong = "00000000-0000-4000-8000-000000000000"
    body = {"preconditions": {"uid": wrong}}
    status = await refused(core.delete_namespaced_pod("web-0", namespace, body=body), 409)
    assert status["reason"] == "Conflict"
    assert wrong in status["message"]
    assert pod["metadata"]["uid"] in status["message"]
    assert status["details"]["name"] == "web-0"
    assert await exists(core, namespace, "web-0")


async def test_resource_version_precondition_mismatch_is_a_conflict(
    core: client.CoreV1Api, namespace: str
) -> None:
    pod = await make_pod(core, namespace, "p", phase="Failed")
    old_rv = pod["metadata"]["resourceVersion"]
    await core.patch_namespaced_pod("p", namespace, {"metadata": {"labels": {"x": "y"}}})
    body = {"preconditions": {"resourceVersion": old_rv}}
    status = await refused(core.delete_namespaced_pod("p", namespace, body=body), 409)
    assert status["reason"] == "Conflict"


async def test_missing_pod_is_not_found(core: client.CoreV1Api, namespace: str) -> None:
    status = await refused(core.delete_namespaced_pod("ghost", namespace), 404)
    assert status["reason"] == "NotFound"
    assert status["message"] == 'pods "ghost" not found'
    assert status["details"] == {"name": "ghost", "kind": "pods"}


async def test_invalid_dry_run_value_is_rejected(core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "keep", phase="Failed")
    with pytest.raises(ApiException) as info:
        await core.delete_namespaced_pod("keep", namespace, dry_run="Sometimes")
    assert info.value.status in (400, 422)
    assert await exists(core, namespace, "keep")


async def test_propagation_policy_and_options_in_body_are_accepted(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "bg", phase="Succeeded")
    await core.delete_namespaced_pod(
        "bg", namespace, body={"propagationPolicy": "Background", "gracePeriodSeconds": 0}
    )
    assert not await exists(core, namespace, "bg")


async def test_deleting_a_replaced_pod_by_old_uid_leaves_the_replacement(
    core: client.CoreV1Api, namespace: str
) -> None:
    old = await make_pod(core, namespace, "web-0", phase="Failed")
    await core.delete_namespaced_pod("web-0", namespace)
    new = await make_pod(core, namespace, "web-0")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    body = {"preconditions": {"uid": old["metadata"]["uid"]}}
    await refused(core.delete_namespaced_pod("web-0", namespace, body=body), 409)
    assert await exists(core, namespace, "web-0")
    await set_phase(core, namespace, "web-0", "Failed")


# DeleteOptions come from the body alone whenever a body is sent; the query is read only
# when the body is empty. A client that mixes the two loses its query options silently.
DELETE_OPTIONS = {"apiVersion": "v1", "kind": "DeleteOptions"}


async def test_dry_run_in_the_query_beside_a_body_deletes_for_real(
    core: client.CoreV1Api, namespace: str
) -> None:
    uid = (await make_pod(core, namespace, "mixed", phase="Failed"))["metadata"]["uid"]
    body = {**DELETE_OPTIONS, "preconditions": {"uid": uid}}
    await delete_raw(core, namespace, "mixed", body=body, dry_run="All")
    assert not await exists(core, namespace, "mixed")


async def test_dry_run_in_the_body_deletes_nothing(core: client.CoreV1Api, namespace: str) -> None:
    pod = await make_pod(core, namespace, "in-body", phase="Failed")
    meta = pod["metadata"]
    preconditions = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
    body = {**DELETE_OPTIONS, "dryRun": ["All"], "preconditions": preconditions}
    answer = await delete_raw(core, namespace, "in-body", body=body)
    assert answer["metadata"]["uid"] == pod["metadata"]["uid"]
    # Answered as deleted, yet nothing changed.
    assert answer["metadata"]["deletionTimestamp"]
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0
    kept = await core.read_namespaced_pod("in-body", namespace)
    assert kept.metadata.deletion_timestamp is None
    assert kept.metadata.resource_version == pod["metadata"]["resourceVersion"]


async def test_dry_run_in_the_query_without_a_body_deletes_nothing(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "in-query", phase="Failed")
    answer = await delete_raw(core, namespace, "in-query", dry_run="All")
    assert answer["metadata"]["name"] == "in-query"
    assert await exists(core, namespace, "in-query")


async def test_invalid_dry_run_value_in_the_body_is_invalid(
    core: client.CoreV1Api, namespace: str
) -> None:
    await make_pod(core, namespace, "odd", phase="Failed")
    request = core.delete_namespaced_pod("odd", namespace, body={"dryRun": ["Sometimes"]})
    status = await refused(request, 422)
    assert status["reason"] == "Invalid"
    # The value is quoted as Go's []string{"Sometimes"} by 1.20, ["Sometimes"] by newer.
    assert status["message"].startswith('DeleteOptions.meta.k8s.io "" is invalid: dryRun: ')
    assert "Unsupported value: " in status["message"]
    assert status["message"].endswith('supported values: "All"')
    assert await exists(core, namespace, "odd")


# A pod is deleted in two writes, as the pod registry's graceful deletion does: first
# deletionTimestamp (and deletionGracePeriodSeconds) are written, a MODIFIED event,
# even when the grace period is 0; then, for a grace period of 0 (a terminal or an
# unscheduled pod, or a forced delete), the removal, a DELETED event. The DELETE answer
# is the pod as last stored: at the version of the first write on 1.20, of the removal
# on newer servers. Nothing may depend on which.


async def _watch_from(api: ApiClient, namespace: str, rv: str, until: int) -> list[dict[str, Any]]:
    return await watch_pods(
        api, namespace, ("resourceVersion", rv), ("timeoutSeconds", "5"), until=until
    )


@pytest.mark.parametrize(
    "phase", ["Failed", "Succeeded", None], ids=["failed", "succeeded", "unscheduled"]
)
async def test_a_pod_deleted_at_once_is_modified_then_deleted(
    api: ApiClient, core: client.CoreV1Api, namespace: str, phase: str | None
) -> None:
    meta = (await make_pod(core, namespace, "p", phase=phase))["metadata"]
    answer = await delete_raw(core, namespace, "p", body={"preconditions": {"uid": meta["uid"]}})
    assert answer["kind"] == "Pod"
    assert answer["metadata"]["uid"] == meta["uid"]
    modified, deleted = await _watch_from(api, namespace, meta["resourceVersion"], until=2)
    assert (modified["type"], deleted["type"]) == ("MODIFIED", "DELETED")
    marked, removed = modified["object"]["metadata"], deleted["object"]["metadata"]
    assert marked["deletionTimestamp"]
    assert marked["deletionGracePeriodSeconds"] == 0
    assert int(removed["resourceVersion"]) > int(marked["resourceVersion"])
    assert removed["deletionTimestamp"] == marked["deletionTimestamp"]
    versions = (marked["resourceVersion"], removed["resourceVersion"])
    assert answer["metadata"]["resourceVersion"] in versions
    assert answer["metadata"]["deletionTimestamp"] == marked["deletionTimestamp"]
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0
    assert not await exists(core, namespace, "p")


async def test_a_finalizer_holds_a_deleted_pod_until_it_is_removed(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    body = pod_manifest("held")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await core.create_namespaced_pod(namespace, body)
    rv = (await set_phase(core, namespace, "held", "Failed"))["metadata"]["resourceVersion"]
    answer = await delete_raw(core, namespace, "held")
    assert answer["metadata"]["deletionTimestamp"]
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0
    held = await core.read_namespaced_pod("held", namespace)
    assert held.metadata.deletion_timestamp is not None
    # A pod being deleted takes no new finalizer; removing the last one deletes it.
    more = {"metadata": {"finalizers": ["example.com/hold", "example.com/late"]}}
    await refused(core.patch_namespaced_pod("held", namespace, more), 422)
    await core.patch_namespaced_pod("held", namespace, {"metadata": {"finalizers": None}})
    assert not await exists(core, namespace, "held")
    events = await _watch_from(api, namespace, rv, until=2)
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]


async def test_a_grace_period_can_only_be_shortened(
    api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    pod = await make_pod(core, namespace, "busy", phase="Running", nodeName="node-1")
    rv = pod["metadata"]["resourceVersion"]
    first = await delete_raw(core, namespace, "busy", grace_period_seconds=30)
    assert first["metadata"]["deletionTimestamp"]
    assert first["metadata"]["deletionGracePeriodSeconds"] == 30
    pending = await core.read_namespaced_pod("busy", namespace)
    assert pending.metadata.deletion_timestamp is not None
    # A longer (or equal, or no) grace period changes nothing: deletion is pending.
    for body in ({"gracePeriodSeconds": 60}, {"gracePeriodSeconds": 30}, {}):
        again = await delete_raw(core, namespace, "busy", body=body)
        assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        assert again["metadata"]["deletionGracePeriodSeconds"] == 30
    # Forcing it (grace 0) is again two writes: the shortened period, then the removal.
    await delete_raw(core, namespace, "busy", body={"gracePeriodSeconds": 0})
    events = await _watch_from(api, namespace, rv, until=3)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert [e["object"]["metadata"]["deletionGracePeriodSeconds"] for e in events] == [30, 0, 0]
    assert not await exists(core, namespace, "busy")


async def test_a_delete_body_of_another_kind_deletes_nothing(
    server: Server, api: ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    # Decoding fails with a 500 on 1.20 (the body is no DeleteOptions); newer servers
    # say 400 BadRequest. Either way nothing is deleted, and retrying cannot help.
    await make_pod(core, namespace, "p", phase="Failed")
    path = f"/api/v1/namespaces/{namespace}/pods/p"
    for body in ({"kind": "Pod", "apiVersion": "v1"}, [], {"dryRun": "All"}):
        code, answer = await raw(api, "DELETE", path, body=body)
        assert code in by_version(server, v1_20=500, current=400), answer
        status = json.loads(answer)
        assert (status["kind"], status["code"]) == ("Status", code)
        if code == 400:
            assert status["reason"] == "BadRequest"
    assert await exists(core, namespace, "p")


async def test_every_invalid_delete_option_is_named(core: client.CoreV1Api, namespace: str) -> None:
    await make_pod(core, namespace, "p", phase="Failed")
    body = {"dryRun": ["All", "Sometimes"], "propagationPolicy": "Bogus"}
    status = await refused(core.delete_namespaced_pod("p", namespace, body=body), 422)
    assert status["reason"] == "Invalid"
    details = status["details"]
    assert (details["group"], details["kind"]) == ("meta.k8s.io", "DeleteOptions")
    assert [c["field"] for c in details["causes"]] == ["propagationPolicy", "dryRun"]
    assert status["message"].startswith('DeleteOptions.meta.k8s.io "" is invalid: [')
    assert await exists(core, namespace, "p")
