"""The pure parts of the watch: event lines, scopes, selectors and RBAC wording."""

import json

import pytest
from zombied.kube import rbac_rule
from zombied.watch import (
    CLUSTER_SCOPE,
    TERMINAL_FIELD_SELECTOR,
    EventParseError,
    Scope,
    parse_event,
    peek_event,
    request_args,
    scopes_for,
)


def line(kind: object, obj: object) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def test_added_event_carries_object_and_resource_version() -> None:
    event = parse_event(line("ADDED", {"metadata": {"name": "a", "resourceVersion": "12"}}))
    assert event.type == "ADDED"
    assert event.resource_version == "12"
    assert event.object["metadata"]["name"] == "a"


def test_bookmark_needs_resource_version() -> None:
    assert (
        parse_event(line("BOOKMARK", {"metadata": {"resourceVersion": "9"}})).resource_version
        == "9"
    )
    with pytest.raises(EventParseError, match="BOOKMARK"):
        parse_event(line("BOOKMARK", {"metadata": {}}))


def test_error_event_keeps_status_object() -> None:
    event = parse_event(line("ERROR", {"kind": "Status", "code": 410}))
    assert event.type == "ERROR"
    assert event.resource_version is None
    assert event.object["code"] == 410


def test_a_deleted_event_is_read_from_its_metadata() -> None:
    meta = {"namespace": "ns", "name": "a", "uid": "u-1", "resourceVersion": "12"}
    head = peek_event(line("DELETED", {"metadata": meta, "spec": {"nodeName": "n"}}))
    assert head is not None
    assert (head.type, head.namespace, head.name, head.uid) == ("DELETED", "ns", "a", "u-1")
    assert head.resource_version == "12"


def test_a_pod_being_deleted_is_read_from_its_metadata() -> None:
    meta = {"namespace": "ns", "name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    head = peek_event(line("MODIFIED", {"metadata": meta, "status": {"phase": "Failed"}}))
    assert head is not None
    assert (head.type, head.namespace, head.name, head.uid) == ("MODIFIED", "ns", "a", None)


def test_an_empty_resource_version_is_none_as_the_full_parser_has_it() -> None:
    raw = line("DELETED", {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": ""}})
    head = peek_event(raw)
    assert head is not None
    assert head.resource_version is None
    assert parse_event(raw).resource_version is None


def test_a_bookmark_is_read_from_its_metadata() -> None:
    head = peek_event(line("BOOKMARK", {"metadata": {"resourceVersion": "9"}}))
    assert head is not None
    assert (head.type, head.resource_version) == ("BOOKMARK", "9")


@pytest.mark.parametrize(
    "raw",
    [
        # A pod to judge, and what only the full parser can judge or explain.
        line("MODIFIED", {"metadata": {"namespace": "ns", "name": "a"}}),
        line("MODIFIED", {"metadata": {"namespace": "ns", "name": "a", "deletionTimestamp": None}}),
        line("ERROR", {"kind": "Status", "code": 410, "metadata": {}}),
        line("BOOKMARK", {"metadata": {}}),
        line("DELETED", {"metadata": {"name": "a"}}),
        line("DELETED", {"metadata": {"namespace": "ns", "name": 7}}),
        line("DELETED", {"metadata": "none"}),
        line("DELETED", "pod"),
        line(None, {"metadata": {"namespace": "ns", "name": "a"}}),
        b"not json",
        b"[1, 2]",
    ],
)
def test_anything_else_is_left_to_the_full_parser(raw: bytes) -> None:
    assert peek_event(raw) is None


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


def test_non_string_resource_version_is_ignored() -> None:
    event = parse_event(line("MODIFIED", {"metadata": {"resourceVersion": 5}}))
    assert event.resource_version is None


def test_cluster_scope_excludes_namespaces_server_side() -> None:
    (scope,) = scopes_for((), ("kube-system", "infra", "kube-system"))
    assert scope.label == CLUSTER_SCOPE
    assert scope.field_selector == (
        f"{TERMINAL_FIELD_SELECTOR},metadata.namespace!=kube-system,metadata.namespace!=infra"
    )
    assert scope.owns("team-a")
    assert not scope.owns("infra")


def test_namespaced_scopes_one_per_namespace() -> None:
    scopes = scopes_for(("a", "b", "a", "x"), ("x",))
    assert [scope.label for scope in scopes] == ["a", "b"]
    assert scopes[0].field_selector == TERMINAL_FIELD_SELECTOR
    assert scopes[0].owns("a")
    assert not scopes[0].owns("b")


def test_field_selector_keeps_only_terminal_phases() -> None:
    assert TERMINAL_FIELD_SELECTOR == (
        "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
    )


def test_request_args_send_label_selector_only_when_set() -> None:
    scope = Scope("a")
    assert request_args(scope, "") == {"field_selector": TERMINAL_FIELD_SELECTOR}
    assert request_args(scope, "app=web")["label_selector"] == "app=web"


def test_rbac_rule_wording() -> None:
    assert rbac_rule("list", "pods", "team-a") == "list pods in namespace team-a"
    assert rbac_rule("watch", "pods", None) == "watch pods at the cluster scope"
