"""What each answer to DELETE means: the pure outcome table, by the failure's kind."""

import pytest
from zombied.kube import ApiError, Request
from zombied.reaper import Action, outcome_for

DELETE = Request("delete", "pods", "team-a", "web-0")


@pytest.mark.parametrize(
    ("code", "label", "action", "event", "overloaded"),
    [
        (200, "deleted", Action.DONE, "pod.reaped", False),
        (404, "gone", Action.DONE, "pod.gone", False),
        (409, "conflict", Action.DONE, "pod.conflict", False),
        (429, "error", Action.RETRY_AFTER, "pod.delete_failed", True),
        (500, "error", Action.BACKOFF, "pod.delete_failed", True),
        (503, "error", Action.BACKOFF, "pod.delete_failed", True),
        (504, "error", Action.BACKOFF, "pod.delete_failed", True),
        (408, "error", Action.BACKOFF, "pod.delete_failed", True),
        (0, "error", Action.BACKOFF, "pod.delete_failed", True),  # no answer: a timeout
        (401, "error", Action.BACKOFF, "pod.delete_failed", False),
        (403, "error", Action.BACKOFF, "pod.delete_failed", False),
        (400, "error", Action.DROP, "pod.delete_failed", False),
        (422, "error", Action.DROP, "pod.delete_failed", False),
    ],
)
def test_answers(code: int, label: str, action: Action, event: str, overloaded: bool) -> None:
    error = None if code == 200 else ApiError(DELETE, code, "Reason", "message", retry_after=7.0)
    outcome = outcome_for(error)
    assert (outcome.outcome, outcome.action, outcome.event, outcome.code) == (
        label,
        action,
        event,
        code,
    )
    assert (outcome.failed, outcome.overloaded) == (action is not Action.DONE, overloaded)
    assert outcome.retry_after == (None if error is None else 7.0)
