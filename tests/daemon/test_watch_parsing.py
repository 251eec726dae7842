"""The pure parts of the watch and of requests: scopes, their selectors, RBAC wording."""

import pytest
from zombied.kube import ApiError, Request
from zombied.rules import Selection
from zombied.watch import (
    CLUSTER_SCOPE,
    TERMINAL_FIELD_SELECTOR,
    Scope,
    scopes_for,
)


def test_cluster_scope_watches_terminal_pods_and_excludes_namespaces_server_side() -> None:
    assert TERMINAL_FIELD_SELECTOR == (
        "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
    )
    (scope,) = scopes_for(Selection((), ("kube-system", "infra"), "app=web"))
    assert scope.label == CLUSTER_SCOPE
    assert scope.query == {
        "fieldSelector": (
            f"{TERMINAL_FIELD_SELECTOR},metadata.namespace!=kube-system,metadata.namespace!=infra"
        ),
        "labelSelector": "app=web",
    }
    assert scope.owns("team-a")
    assert not scope.owns("infra")


def test_namespaced_scopes_one_per_namespace() -> None:
    scopes = scopes_for(Selection(("a", "b", "a")))
    assert [scope.label for scope in scopes] == ["a", "b"]
    assert scopes[0].query == {"fieldSelector": TERMINAL_FIELD_SELECTOR}
    assert scopes[0].owns("a")
    assert not scopes[0].owns("b")
    assert Scope("a").query == {"fieldSelector": TERMINAL_FIELD_SELECTOR}


@pytest.mark.parametrize(
    ("request_", "path", "rule", "text"),
    [
        (
            Request("list", "pods", "team-a"),
            "/api/v1/namespaces/team-a/pods",
            "list pods in namespace team-a",
            "list pods in namespace team-a",
        ),
        (
            Request("watch", "pods"),
            "/api/v1/pods",
            "watch pods at the cluster scope",
            "watch pods in every namespace",
        ),
        (
            Request("delete", "pods", "team-a", "web-0"),
            "/api/v1/namespaces/team-a/pods/web-0",
            "delete pods in namespace team-a",
            "delete pod team-a/web-0",
        ),
        (
            Request("update", "leases", "ops", "zombied", group="coordination.k8s.io"),
            "/apis/coordination.k8s.io/v1/namespaces/ops/leases/zombied",
            "update leases in API group coordination.k8s.io in namespace ops",
            "update lease ops/zombied",
        ),
    ],
)
def test_requests_are_named_as_rbac_names_them(
    request_: Request, path: str, rule: str, text: str
) -> None:
    assert (request_.path, request_.rule, str(request_)) == (path, rule, text)


def test_a_refusal_names_the_rule_to_grant() -> None:
    refusal = 'pods "x" is forbidden: User "z" cannot delete resource "pods" in API group ""'
    status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": refusal}
    error = ApiError.from_status(Request("delete", "pods", "team-a", "x"), status, 403)
    assert str(error) == f"missing RBAC permission to delete pods in namespace team-a: {refusal}"
