"""The pure parts of the elector: identities, MicroTime and duration checks."""

from __future__ import annotations

import re
import socket
from datetime import UTC, datetime, timedelta, timezone

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from zombied.leader import ApiLeases, LeaseElector, default_identity, micro_time


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
async def test_rejects_inconsistent_durations(lease: float, deadline: float, retry: float) -> None:
    async with ApiClient(Configuration(host="http://127.0.0.1:9")) as api:
        with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
            LeaseElector(
                ApiLeases(api, name="zombied", namespace="default"),
                identity="x",
                lease_duration=lease,
                renew_deadline=deadline,
                retry_period=retry,
            )


async def test_not_leader_before_running() -> None:
    async with ApiClient(Configuration(host="http://127.0.0.1:9")) as api:
        elector = LeaseElector(ApiLeases(api, name="zombied", namespace="default"), identity="x")
        assert not elector.leadership.leading
        assert elector.holder == ""
