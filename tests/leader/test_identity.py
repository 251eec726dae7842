"""The pure parts of the elector: identities, MicroTime and duration checks."""

from __future__ import annotations

import re
import socket
from datetime import UTC, datetime, timedelta, timezone

import pytest
from zombied.leader import LeaseElector, default_identity, micro_time

from tests.leader.memory import LeaseServer, MemoryKube


@pytest.mark.parametrize("pod_name", ["zombied-7d9f-abcde", None])
def test_identity_is_the_pod_or_host_name_and_a_random_suffix(
    monkeypatch: pytest.MonkeyPatch, pod_name: str | None
) -> None:
    if pod_name is None:
        monkeypatch.delenv("POD_NAME", raising=False)
    else:
        monkeypatch.setenv("POD_NAME", pod_name)
    first, second = default_identity(), default_identity()
    assert re.fullmatch(rf"{re.escape(pod_name or socket.gethostname())}-[0-9a-f]{{8}}", first)
    assert first != second


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2026, 11, 30, 11, 0, 0, 123456, tzinfo=UTC), "2026-11-30T11:00:00.123456Z"),
        (datetime(2026, 11, 30, 11, 0, 0, tzinfo=UTC), "2026-11-30T11:00:00.000000Z"),
        (
            datetime(2026, 11, 30, 12, 0, 0, 5, tzinfo=timezone(timedelta(hours=1))),
            "2026-11-30T11:00:00.000005Z",
        ),
    ],
)
def test_micro_time_is_rfc3339_utc_with_microseconds(moment: datetime, text: str) -> None:
    assert micro_time(moment) == text


@pytest.mark.parametrize(
    ("lease", "deadline", "retry", "fault"),
    [
        (1.0, 2.0, 0.2, "lease_duration"),
        (2.0, 2.0, 0.2, "lease_duration"),
        (2.0, 1.0, 1.0, "renew_deadline"),  # no room for a jittered retry
        (2.0, 1.0, 0.0, "retry_period"),
    ],
)
def test_rejects_client_gos_inconsistent_durations(
    lease: float, deadline: float, retry: float, fault: str
) -> None:
    durations = {"lease_duration": lease, "renew_deadline": deadline, "retry_period": retry}
    with pytest.raises(ValueError, match=f"^{fault}: "):
        LeaseElector(
            MemoryKube(LeaseServer()), name="zombied", namespace="n", identity="x", **durations
        )
