"""The pure parts of the watch and of requests: event lines, scopes, RBAC wording."""

import json

import pytest
from zombied.kube import ApiError, Kind, Request, kind_of
from zombied.rules import Selection
from zombied.watch import (
    CLUSTER_SCOPE,
    TERMINAL_FIELD_SELECTOR,
    EventParseError,
    Scope,
    parse_event,
    scopes_for,
)


def line(kind: object, obj: object) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def test_added_event_carries_object_and_resource_version() -> None:
    event = parse_event(line("ADDED", {"metadata": {"name": "a", "resourceVersion": "12"}}) + b"\n")
    assert (event.type, event.resource_version) == ("ADDED", "12")
    assert event.object["metadata"]["name"] == "a"


def test_bookmark_needs_resource_version() -> None:
    event = parse_event(line("BOOKMARK", {"metadata": {"resourceVersion": "9"}}))
    assert event.resource_version == "9"
    with pytest.raises(EventParseError, match="BOOKMARK"):
        parse_event(line("BOOKMARK", {"metadata": {}}))


@pytest.mark.parametrize("version", [5, "", None])
def test_a_resource_version_that_is_no_string_or_empty_is_none(version: object) -> None:
    assert (
        parse_event(line("MODIFIED", {"metadata": {"resourceVersion": version}})).resource_version
        is None
    )


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not an object"),
        (line("EXPLODED", {}), "unknown event type"),
        (line(None, {}), "unknown event type"),
        (line("ADDED", "pod"), "without an object"),
        (json.dumps({"type": "ADDED"}).encode(), "without an object"),
    ],
)
def test_unusable_lines_are_rejected_with_a_reason(raw: bytes, why: str) -> None:
    with pytest.raises(EventParseError, match=why):
        parse_event(raw)


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        ({"kind": "Status", "code": 410, "reason": "Expired"}, Kind.GONE, 410),
        ({"kind": "Status", "code": 500, "message": "etcd"}, Kind.TRANSIENT, 500),
        ({"kind": "Status", "code": "410"}, Kind.TRANSIENT, 0),
        ({"code": 410}, Kind.TRANSIENT, 0),
        ("garbage", Kind.TRANSIENT, 0),
    ],
)
def test_a_watch_error_event_is_an_api_error_of_its_status(
    status: object, kind: Kind, code: int
) -> None:
    error = ApiError.from_status(Request("watch", "pods"), status)
    assert (error.kind, error.code) == (kind, code)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (0, Kind.TRANSIENT),
        (400, Kind.INVALID),
        (401, Kind.UNAUTHORIZED),
        (403, Kind.FORBIDDEN),
        (404, Kind.NOT_FOUND),
        (408, Kind.TRANSIENT),
        (409, Kind.CONFLICT),
        (410, Kind.GONE),
        (422, Kind.INVALID),
        (429, Kind.THROTTLED),
        (500, Kind.TRANSIENT),
        (504, Kind.TRANSIENT),
    ],
)
def test_kinds_of_status_codes(code: int, kind: Kind) -> None:
    assert kind_of(code) is kind


def test_cluster_scope_excludes_namespaces_server_side() -> None:
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
    scopes = scopes_for(Selection(("a", "b", "a", "x"), ("x",)))
    assert [scope.label for scope in scopes] == ["a", "b"]
    assert scopes[0].query == {"fieldSelector": TERMINAL_FIELD_SELECTOR}
    assert scopes[0].owns("a")
    assert not scopes[0].owns("b")
    assert Scope("a").query == {"fieldSelector": TERMINAL_FIELD_SELECTOR}


def test_field_selector_keeps_only_terminal_phases() -> None:
    assert TERMINAL_FIELD_SELECTOR == (
        "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
    )


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
    error = ApiError(Request("delete", "pods", "team-a", "x"), 403, "Forbidden", "no")
    assert str(error) == "missing RBAC permission to delete pods in namespace team-a: no"
