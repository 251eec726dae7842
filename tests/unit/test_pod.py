"""parse_pod: the snapshot it builds, and how it copes with hostile input."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from zombied.pod import (
    DISRUPTION_TIME,
    FINISHED_AT,
    KEEP_ANNOTATION,
    KUBELET_WRITE,
    MIRROR_ANNOTATION,
    READY_TIME,
    PodParseError,
    PodSnapshot,
    parse_pod,
    parse_time,
)

from tests.daemon import pods

UID = "0b7f9c3e-1111-2222-3333-444455556666"
KEEP = KEEP_ANNOTATION


def annotated(value: object) -> dict[str, object]:
    return {"annotations": {KEEP: value}}


def make_pod(**overrides: Any) -> dict[str, Any]:
    """A node-shutdown zombie with no time of its own; ``status__phase=...`` sets a field
    of a section, ``status=...`` the whole section."""
    pod = pods.zombie("web-0", uid=UID, owner=("StatefulSet", "web"), finished_ago=None)
    pod["metadata"] |= {"resourceVersion": "1234", "creationTimestamp": "2020-01-01T00:00:00Z"}
    for path, value in overrides.items():
        section, _, key = path.partition("__")
        if key:
            pod[section][key] = value
        else:
            pod[section] = value
    return pod


def terminated(finished_at: object) -> dict[str, Any]:
    return {"name": "c", "state": {"terminated": {"exitCode": 137, "finishedAt": finished_at}}}


T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
T0_TEXT = "2024-05-01T12:00:00Z"


class TestParseTime:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("2024-05-01T12:00:00Z", T0),
            ("2024-05-01T12:00:00z", T0),
            ("2024-05-01t12:00:00Z", T0),
            ("2024-05-01T12:00:00.5Z", T0 + timedelta(microseconds=500_000)),
            ("2024-05-01T12:00:00.123456Z", T0 + timedelta(microseconds=123_456)),
            ("2024-05-01T12:00:00.123456789Z", T0 + timedelta(microseconds=123_456)),
            ("2024-05-01T14:00:00+02:00", T0),
            ("2024-05-01T07:30:00-04:30", T0),
            ("2024-05-01T12:00:00+00:00", T0),
            (" 2024-05-01T12:00:00Z\n", T0),
        ],
    )
    def test_valid(self, text: str, expected: datetime) -> None:
        parsed = parse_time(text)
        assert parsed == expected
        assert parsed is not None
        assert parsed.tzinfo is UTC

    @pytest.mark.parametrize(
        "value",
        [
            None,
            "",
            "yesterday",
            "2024-05-01",
            "2024-05-01T12:00:00",  # no offset: not RFC 3339
            "2024-13-01T12:00:00Z",
            "2024-02-30T12:00:00Z",
            "2024-05-01T25:00:00Z",
            "2024-05-01T12:00:00+24:00",
            "2024-05-01T12:00:60Z",  # Go (the API server) never writes a leap second
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59-23:59",
            "2024-05-01T12:00:00Z trailing",
            "2" * 10_000,
            1714564800,
            ["2024-05-01T12:00:00Z"],
            {"time": "2024-05-01T12:00:00Z"},
        ],
    )
    def test_invalid_is_none(self, value: object) -> None:
        assert parse_time(value) is None


class TestSnapshot:
    def test_fields(self) -> None:
        pod = make_pod()
        pod["metadata"]["annotations"] = {MIRROR_ANNOTATION: "3f9a"}
        pod["status"]["containerStatuses"] = [terminated("2024-05-01T12:00:00Z")]
        snap = parse_pod(pod)
        assert snap == PodSnapshot(
            namespace="team-a",
            name="web-0",
            uid=UID,
            resource_version="1234",
            phase="Failed",
            reason="Terminated",
            message="Pod was terminated in response to imminent node shutdown.",
            node="node-1",
            owner_kind="StatefulSet",
            owner_name="web",
            deleting=False,
            mirror=True,
            terminated_at=T0,
            terminated_source=FINISHED_AT,
        )
        assert snap.key == "team-a/web-0"
        assert snap.terminal

    def test_is_an_immutable_hashable_copy(self) -> None:
        pod = make_pod()
        snap = parse_pod(pod)
        with pytest.raises(AttributeError):
            snap.name = "other"  # type: ignore[misc]
        assert hash(snap) == hash(parse_pod(make_pod()))
        before = copy.deepcopy(snap)
        pod["metadata"]["labels"]["app"] = "changed"
        pod["metadata"]["name"] = "changed"
        assert snap == before
        assert not hasattr(snap, "__dict__")  # slots: nothing else can be attached

    @pytest.mark.parametrize("phase", [None, "Pending", "Running", "Unknown", "Bogus", ""])
    def test_minimal_and_non_terminal_pods(self, phase: str | None) -> None:
        if phase is None:
            snap = parse_pod({"metadata": {"namespace": "n", "name": "p", "uid": "u"}})
            assert snap == PodSnapshot(namespace="n", name="p", uid="u")
        else:
            snap = parse_pod(make_pod(status__phase=phase))
            assert snap.phase == phase
        assert not snap.terminal


class TestRequiredFields:
    @pytest.mark.parametrize("field", ["namespace", "name", "uid"])
    @pytest.mark.parametrize("value", [None, 42, True, ["a"], {"a": "b"}, "", "a" * 254])
    def test_unusable(self, field: str, value: object) -> None:
        pod = make_pod()
        pod["metadata"][field] = value
        if value is None:
            del pod["metadata"][field]
        with pytest.raises(PodParseError, match=rf"^metadata\.{field} "):
            parse_pod(pod)

    @pytest.mark.parametrize(
        "value", ["a/b", "..", ".", "a b", "a%2Fb", "a?x", "a#x", "a\\b", "a\nb", "a\x00b"]
    )
    def test_unsafe_names(self, value: str) -> None:
        pod = make_pod()
        pod["metadata"]["name"] = value
        with pytest.raises(PodParseError, match=r"^metadata\.name "):
            parse_pod(pod)

    @pytest.mark.parametrize(
        "obj",
        [
            None,
            "pod",
            3,
            ["metadata"],
            {"kind": "Pod"},
            *({"metadata": m} for m in (None, "x", 1, [{}])),
        ],
    )
    def test_not_a_pod(self, obj: object) -> None:
        with pytest.raises(PodParseError) as info:
            parse_pod(obj)
        assert info.value.reason
        assert isinstance(info.value, ValueError)


class TestDegradesGracefully:
    @pytest.mark.parametrize("value", [None, 7, ["Failed"], {"a": 1}, True])
    def test_wrong_types_read_as_empty(self, value: object) -> None:
        whole = make_pod(status=value, spec=value)
        fields = make_pod(
            status__phase=value, status__reason=value, status__message=value, spec__nodeName=value
        )
        for pod in (whole, fields):
            snap = parse_pod(pod)
            assert (snap.phase, snap.reason, snap.message, snap.node) == ("", "", "", "")
            assert snap.terminated_at is None

    @pytest.mark.parametrize(
        ("value", "expected"), [("77", "77"), (77, "77"), (None, ""), (True, ""), ([1], "")]
    )
    def test_resource_version(self, value: object, expected: str) -> None:
        pod = make_pod()
        pod["metadata"]["resourceVersion"] = value
        assert parse_pod(pod).resource_version == expected

    def test_huge_values_are_cut_or_not_kept(self) -> None:
        pod = make_pod(status__message="x" * 1_000_000)
        pod["metadata"]["annotations"] = {f"k{i}": "v" * 1000 for i in range(1000)}
        pod["metadata"]["annotations"][KEEP_ANNOTATION] = "true"
        snap = parse_pod(pod)
        assert len(snap.message) == 1024
        assert snap.keep
        assert not any(isinstance(v, dict) for v in (getattr(snap, f) for f in snap.__slots__))

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("containerStatuses", None),
            ("containerStatuses", "x"),
            ("containerStatuses", [None, 1, "x", []]),
            ("containerStatuses", [{"state": None}, {"state": "terminated"}]),
            ("containerStatuses", [{"state": {"terminated": "yes"}}]),
            ("containerStatuses", [terminated("not a time"), terminated(12), terminated(None)]),
            ("conditions", None),
            ("conditions", "Ready"),
            ("conditions", [None, 3, {"type": 5}, {"status": "True"}]),
            ("conditions", {"type": "Ready"}),
        ],
    )
    def test_status_lists_garbage(self, field: str, value: object) -> None:
        pod = make_pod()
        pod["status"][field] = value
        assert parse_pod(pod).terminated_at is None


def condition(kind: str, status: str, at: str, **extra: str) -> dict[str, str]:
    return {"type": kind, "status": status, "lastTransitionTime": at, **extra}


def written(manager: str, at: str, **extra: str) -> dict[str, str]:
    """A managedFields entry: ``manager`` wrote the pod at ``at``."""
    return {"manager": manager, "time": at, **extra}


T11, T13 = "2024-05-01T11:00:00Z", "2024-05-01T13:00:00Z"
READY_AT_T0 = condition("Ready", "False", T0_TEXT)
#: No terminal time: (terminated_at, terminated_source, disruption).
UNKNOWN = (None, "", "")


# The terminal time comes from the most precise source there is: the latest finishedAt
# of any container, the DisruptionTarget condition, the Ready condition of a terminal
# pod, the kubelet's last status write. ``changes`` go to the status, managedFields to
# the metadata.
@pytest.mark.parametrize(
    ("changes", "found"),
    [
        pytest.param(
            {
                "containerStatuses": [
                    terminated(T0_TEXT),
                    terminated("2024-05-01T12:00:03Z"),
                    {"name": "r", "state": {"running": {"startedAt": T13}}},
                ],
                "initContainerStatuses": [terminated(T11)],
                "ephemeralContainerStatuses": [terminated("2024-05-01T12:00:07Z")],
            },
            (T0 + timedelta(seconds=7), FINISHED_AT, ""),
            id="latest-finishedAt-of-every-container-kind",
        ),
        pytest.param(
            {"initContainerStatuses": [terminated(T0_TEXT)]}, (T0, FINISHED_AT, ""), id="init"
        ),
        pytest.param(
            {"containerStatuses": [{"name": "c", "lastState": terminated(T0_TEXT)["state"]}]},
            UNKNOWN,
            id="last-state-ignored",
        ),
        pytest.param(
            {"containerStatuses": [terminated("garbage"), terminated(T0_TEXT)]},
            (T0, FINISHED_AT, ""),
            id="bad-timestamp-skipped",
        ),
        pytest.param(
            {"containerStatuses": [terminated("2024-05-01T13:00:00+02:00"), terminated(T0_TEXT)]},
            (T0, FINISHED_AT, ""),
            id="offsets-normalised",
        ),
        pytest.param(
            {
                "containerStatuses": [terminated(T0_TEXT)],
                "conditions": [condition("DisruptionTarget", "True", T13, reason="Termination")],
            },
            (T0, FINISHED_AT, "Termination"),
            id="container-time-beats-conditions",
        ),
        pytest.param(
            {
                "conditions": [
                    condition("Ready", "False", T11),
                    condition("DisruptionTarget", "True", T0_TEXT, reason="Termination"),
                ]
            },
            (T0, DISRUPTION_TIME, "Termination"),
            id="disruption-target-beats-ready",
        ),
        pytest.param(
            {"conditions": [condition("DisruptionTarget", "False", T0_TEXT, reason="X")]},
            UNKNOWN,
            id="disruption-target-false-ignored",
        ),
        pytest.param(
            {"conditions": [condition("DisruptionTarget", "True", "soon"), READY_AT_T0]},
            (T0, READY_TIME, "unknown"),
            id="bad-disruption-time-falls-back-to-ready",
        ),
        pytest.param({"conditions": [READY_AT_T0]}, (T0, READY_TIME, ""), id="ready"),
        pytest.param(
            {"phase": "Succeeded", "conditions": [READY_AT_T0]},
            (T0, READY_TIME, ""),
            id="ready-of-a-succeeded-pod",
        ),
        pytest.param(
            {"phase": "Running", "conditions": [READY_AT_T0]}, UNKNOWN, id="ready-not-terminal"
        ),
        # A pod the kubelet rejected at admission carries no conditions and no container
        # states: its terminal time is the kubelet's status write.
        pytest.param(
            {
                "managedFields": [
                    written("kube-controller-manager", T13),
                    written("kubelet", T0_TEXT, operation="Update"),
                ]
            },
            (T0, KUBELET_WRITE, ""),
            id="kubelet-1.20-no-subresource",
        ),
        pytest.param(
            {
                "managedFields": [
                    written("kubelet", T11, subresource="status"),
                    written("kubelet", T0_TEXT, subresource="status"),
                    written("kubelet", T13, subresource="binding"),
                ]
            },
            (T0, KUBELET_WRITE, ""),
            id="latest-status-write",
        ),
        pytest.param(
            {"managedFields": [written("kubectl", T0_TEXT, subresource="status")]},
            UNKNOWN,
            id="not-the-kubelet",
        ),
        pytest.param(
            {"managedFields": [written("kubelet", T0_TEXT)], "phase": "Running"},
            UNKNOWN,
            id="kubelet-write-not-terminal",
        ),
        pytest.param({"managedFields": "garbage"}, UNKNOWN, id="managed-fields-not-a-list"),
        pytest.param(
            {"managedFields": [written("kubelet", T13)], "conditions": [READY_AT_T0]},
            (T0, READY_TIME, ""),
            id="conditions-beat-the-kubelet-write",
        ),
    ],
)
def test_terminated_at(changes: dict[str, Any], found: tuple[object, ...]) -> None:
    pod = make_pod()
    status = dict(changes)
    pod["metadata"]["managedFields"] = status.pop("managedFields", None)
    pod["status"].update(status)
    snap = parse_pod(pod)
    assert (snap.terminated_at, snap.terminated_source, snap.disruption) == found
    assert snap.terminated_at is None or snap.terminated_at.tzinfo is UTC


class TestOwnerKeepDeleting:
    @pytest.mark.parametrize(
        ("refs", "owner"),
        [
            # The controller reference wins, else the first one ("true" is no bool).
            (
                [{"kind": "CM", "name": "c"}, {"kind": "Job", "name": "j", "controller": True}],
                "Job/j",
            ),
            (
                [{"kind": "RS", "name": "r"}, {"kind": "Job", "name": "j", "controller": "1"}],
                "RS/r",
            ),
            (None, ""),
            ([], ""),
            ("Job", ""),
            ([None, "x", 3], ""),
            ({"kind": "Job"}, ""),
            ([{"kind": 3, "name": ["x"], "controller": True}], ""),
        ],
    )
    def test_owner(self, refs: object, owner: str) -> None:
        pod = make_pod()
        pod["metadata"]["ownerReferences"] = refs
        assert parse_pod(pod).owner == owner

    @pytest.mark.parametrize(
        ("metadata", "kept"),
        [
            *((annotated(v), (True, False, "annotation")) for v in ("true", "TRUE", " true ")),
            *((annotated(v), (False, False, "annotation")) for v in ("false", "FALSE")),
            # Anything else was written to keep the pod: kept, and said to be unclear.
            *((annotated(v), (True, True, "annotation")) for v in ("yes", "1", "")),
            # Annotations are strings; anything else is not what the API serves.
            *(({"annotations": a}, (False, False, "")) for a in ({KEEP: True}, None, [KEEP])),
            # A label of the same key counts, unless the annotation speaks.
            ({"labels": {KEEP: "true"}}, (True, False, "label")),
            ({"labels": {KEEP: "true"}, **annotated("false")}, (False, False, "annotation")),
        ],
    )
    def test_keep(self, metadata: dict[str, object], kept: tuple[bool, bool, str]) -> None:
        pod = make_pod()
        pod["metadata"].update(metadata)
        snap = parse_pod(pod)
        assert (snap.keep, snap.keep_unclear, snap.keep_via) == kept

    @pytest.mark.parametrize(
        ("value", "deleting"),
        [("2024-05-01T12:00:00Z", True), ("garbage", True), (None, False)],
    )
    def test_deletion_timestamp(self, value: object, deleting: bool) -> None:
        pod = make_pod()
        pod["metadata"]["deletionTimestamp"] = value
        assert parse_pod(pod).deleting is deleting
