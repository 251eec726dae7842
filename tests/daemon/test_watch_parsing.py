"""The pure parts of the watch and of requests: scopes, their selectors, RBAC wording."""

import pytest
from zombied.kube import Request
from zombied.rules import Selection
from zombied.watch import CLUSTER_SCOPE, TERMINAL_FIELD_SELECTOR, scopes_for

TERMINAL = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"


@pytest.mark.parametrize(
    ("selection", "scopes", "query", "owned", "foreign"),
    [
        # One watch of every namespace: exclusions and the label selector on the server.
        (
            Selection((), ("kube-system", "infra"), "app=web"),
            [CLUSTER_SCOPE],
            {
                "fieldSelector": f"{TERMINAL},metadata.namespace!=kube-system"
                ",metadata.namespace!=infra",
                "labelSelector": "app=web",
            },
            "team-a",
            "infra",
        ),
        # One watch per namespace, each named once.
        (Selection(("a", "b", "a")), ["a", "b"], {"fieldSelector": TERMINAL}, "a", "b"),
    ],
)
def test_scopes_watch_terminal_pods_of_the_selection(
    selection: Selection, scopes: list[str], query: dict[str, str], owned: str, foreign: str
) -> None:
    assert TERMINAL_FIELD_SELECTOR == TERMINAL
    found = scopes_for(selection)
    assert [scope.label for scope in found] == scopes
    assert found[0].query == query
    assert (found[0].owns(owned), found[0].owns(foreign)) == (True, False)


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
