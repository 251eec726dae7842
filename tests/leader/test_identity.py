"""The pure parts of the elector: identities, MicroTime and duration checks."""

from __future__ import annotations

import re
import socket
from datetime import UTC, datetime, timedelta, timezone

import pytest
from zombied.leader import LeaseElector, default_identity, micro_time

from tests.leader.memory import LeaseServer, MemoryKube


def test_identity_uses_pod_name_and_a_random_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "zombied-7d9f-abcde")
    first, second = default_identity(), default_identity()
    assert re.fullmatch(r"zombied-7d9f-abcde-[0-9a-f]{8}", first)
    assert first != second


def test_identity_falls_back_to_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    host = re.escape(socket.gethostname())
    assert re.fullmatch(rf"{host}-[0-9a-f]{{8}}", default_identity())


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
    ("lease", "deadline", "retry"),
    [(1.0, 2.0, 0.2), (2.0, 2.0, 0.2), (2.0, 1.0, 1.0), (2.0, 1.0, 0.0)],
)
def test_rejects_inconsistent_durations(lease: float, deadline: float, retry: float) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
        LeaseElector(
            MemoryKube(LeaseServer()),
            name="zombied",
            namespace="default",
            identity="x",
            lease_duration=lease,
            renew_deadline=deadline,
            retry_period=retry,
        )
