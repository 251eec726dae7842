"""What each answer to DELETE means: the pure outcome table, by the failure's kind."""

import pytest
from zombied.kube import ApiError, Request
from zombied.reaper import Action, outcome_for

DELETE = Request("delete", "pods", "team-a", "web-0")


def failure(code: int, retry_after: float | None = None) -> ApiError:
    return ApiError(DELETE, code, "Reason", "message", retry_after=retry_after)


def test_success_is_deleted() -> None:
    outcome = outcome_for(None)
    assert (outcome.outcome, outcome.action, outcome.event) == (
        "deleted",
        Action.DONE,
        "pod.reaped",
    )
    assert not outcome.failed


@pytest.mark.parametrize(
    ("code", "label", "action", "event", "failed", "overloaded"),
    [
        (404, "gone", Action.DONE, "pod.gone", False, False),
        (409, "conflict", Action.DONE, "pod.conflict", False, False),
        (429, "error", Action.RETRY_AFTER, "pod.delete_failed", True, True),
        (500, "error", Action.BACKOFF, "pod.delete_failed", True, True),
        (503, "error", Action.BACKOFF, "pod.delete_failed", True, True),
        (504, "error", Action.BACKOFF, "pod.delete_failed", True, True),
        (408, "error", Action.BACKOFF, "pod.delete_failed", True, True),
        (0, "error", Action.BACKOFF, "pod.delete_failed", True, True),
        (401, "error", Action.BACKOFF, "pod.delete_failed", True, False),
        (403, "error", Action.BACKOFF, "pod.delete_failed", True, False),
        (400, "error", Action.DROP, "pod.delete_failed", True, False),
        (422, "error", Action.DROP, "pod.delete_failed", True, False),
    ],
)
def test_answers(
    code: int, label: str, action: Action, event: str, failed: bool, overloaded: bool
) -> None:
    outcome = outcome_for(failure(code))
    assert (outcome.outcome, outcome.action, outcome.event, outcome.code) == (
        label,
        action,
        event,
        code,
    )
    assert (outcome.failed, outcome.overloaded) == (failed, overloaded)


def test_throttled_carries_retry_after() -> None:
    assert outcome_for(failure(429, retry_after=7.0)).retry_after == 7.0
    assert outcome_for(failure(429)).retry_after is None
