"""What each answer to DELETE means: the pure outcome table."""

import pytest
from zombied.kube import TRANSPORT_ERROR, ApiStatus
from zombied.reaper import Action, outcome_for


def status(code: int, retry_after: float | None = None) -> ApiStatus:
    return ApiStatus(code, "Reason", "message", retry_after)


def test_success_is_deleted() -> None:
    outcome = outcome_for(None)
    assert (outcome.outcome, outcome.action, outcome.event) == (
        "deleted",
        Action.DONE,
        "pod.reaped",
    )
    assert not outcome.failed


@pytest.mark.parametrize(
    ("code", "label", "action", "event"),
    [
        (404, "gone", Action.DONE, "pod.gone"),
        (409, "conflict", Action.DONE, "pod.conflict"),
        (429, "error", Action.RETRY_AFTER, "pod.delete_failed"),
        (500, "error", Action.BACKOFF, "pod.delete_failed"),
        (503, "error", Action.BACKOFF, "pod.delete_failed"),
        (504, "error", Action.BACKOFF, "pod.delete_failed"),
        (408, "error", Action.BACKOFF, "pod.delete_failed"),
        (TRANSPORT_ERROR, "error", Action.BACKOFF, "pod.delete_failed"),
        (401, "error", Action.FORBIDDEN, "pod.delete_failed"),
        (403, "error", Action.FORBIDDEN, "pod.delete_failed"),
        (400, "error", Action.DROP, "pod.delete_failed"),
        (422, "error", Action.DROP, "pod.delete_failed"),
    ],
)
def test_status_codes(code: int, label: str, action: Action, event: str) -> None:
    outcome = outcome_for(status(code))
    assert (outcome.outcome, outcome.action, outcome.event, outcome.code) == (
        label,
        action,
        event,
        code,
    )


def test_gone_and_conflict_are_not_failures() -> None:
    assert not outcome_for(status(404)).failed
    assert not outcome_for(status(409)).failed
    assert outcome_for(status(503)).failed
    assert outcome_for(status(403)).failed


def test_throttled_carries_retry_after() -> None:
    assert outcome_for(status(429, retry_after=7.0)).retry_after == 7.0
    assert outcome_for(status(429)).retry_after is None
