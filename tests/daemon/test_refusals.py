"""A 403 is read from its Status body: only the authorizer's refusal is a missing RBAC
rule, and a refusal counts for readiness only while it is seen again."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from zombied.daemon import Daemon
from zombied.kube import REFUSAL_TTL, ApiError, Kind, Permissions, Request

from kubesim import Simulator
from tests.daemon.conftest import ConfigFactory, captured_logs
from tests.daemon.pods import zombie
from tests.helpers import eventually

CREATE = Request("create", "events", "team-a")


def status(message: str, reason: str = "Forbidden", **details: Any) -> dict[str, Any]:
    body = {"kind": "Status", "code": 403, "reason": reason, "message": message}
    return {**body, "details": {"kind": "events", **details}} if details else body


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        # The authorizer: kube-apiserver's forbiddenMessage, namespaced and cluster-wide.
        (
            status(
                'events is forbidden: User "system:serviceaccount:zombied:zombied" cannot '
                'create resource "events" in API group "" in the namespace "team-a"'
            ),
            Kind.FORBIDDEN,
        ),
        (
            status(
                'User "system:anonymous" cannot list resource "pods" in API group "" at '
                "the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io not found"
            ),
            Kind.FORBIDDEN,
        ),
        # The NamespaceLifecycle admission plugin: a create in a namespace going away.
        (
            status(
                'events "x.1" is forbidden: unable to create new content in namespace team-a '
                "because it is being terminated",
                causes=[
                    {
                        "reason": "NamespaceTerminating",
                        "message": "namespace team-a is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            ),
            Kind.DENIED,
        ),
        # A quota (admission.NewForbidden: reason Forbidden, no causes), a webhook.
        (
            status('events "x.1" is forbidden: exceeded quota: q, requested: count/events=1'),
            Kind.DENIED,
        ),
        (status('admission webhook "policy.example.com" denied the request: no'), Kind.DENIED),
        # No Status at all: a proxy's 403 page.
        (None, Kind.DENIED),
    ],
)
def test_only_the_authorizers_403_is_a_missing_rule(body: object, kind: Kind) -> None:
    error = ApiError.from_status(CREATE, body, 403)
    assert error.kind is kind
    assert error.refused is (kind is Kind.FORBIDDEN)
    assert ("missing RBAC permission" in str(error)) is (kind is Kind.FORBIDDEN)


@pytest.mark.looptime
async def test_a_refusal_not_seen_again_expires() -> None:
    refusal = 'events is forbidden: User "z" cannot create resource "events" in API group ""'
    permissions = Permissions()
    with captured_logs() as logs:
        permissions.refused(ApiError.from_status(CREATE, status(refusal), 403))
        assert permissions.problems() == ["forbidden, missing RBAC rule: " + CREATE.rule]
        await anyio.sleep(REFUSAL_TTL)
        assert permissions.problems() == []
        # Refused again later: a new problem, logged again.
        permissions.refused(ApiError.from_status(CREATE, status(refusal), 403))
    assert permissions.problems() != []
    assert [entry["event"] for entry in logs] == ["api.forbidden", "api.forbidden"]


async def test_an_event_refused_in_a_terminating_namespace_never_makes_zombied_unready(
    sim: Simulator, config: ConfigFactory
) -> None:
    sim.store.create("pods", zombie("z"))
    # Deleted, and held by its finalizer: the simulator runs no namespace controller.
    namespace = sim.store.get_stored("namespaces", "", "team-a")
    assert namespace is not None
    namespace.deleting = True
    with captured_logs() as logs:
        async with Daemon(config()) as daemon:
            await eventually(lambda: any(e["event"] == "event.failed" for e in logs))
            assert daemon.readiness() == (True, "ok")
    refused = [e for e in logs if e["event"] == "event.failed"]
    assert refused[0]["code"] == 403
    assert "being terminated" in refused[0]["message"]
    assert not [e for e in logs if e["event"] == "api.forbidden"]
