"""Capturing structured log events in tests, with the context variables bound by callers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import structlog
from structlog.testing import capture_logs
from structlog.typing import EventDict


@contextmanager
def captured_logs() -> Iterator[list[EventDict]]:
    """Like ``capture_logs``, but per-pod fields bound with contextvars are included."""
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as entries:
        yield entries
