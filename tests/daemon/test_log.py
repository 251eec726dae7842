"""Log set-up: JSON lines by default, console on request, stdlib loggers routed through."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import UTC, datetime, timedelta

import structlog
from zombied.log import configure_logging, get_logger, wants_console


def test_json_lines_with_context_and_stdlib_records() -> None:
    out = io.StringIO()
    configure_logging("json", "info", out)
    before = datetime.now(UTC)
    with structlog.contextvars.bound_contextvars(namespace="team-a", pod="web-0"):
        get_logger("zombied.test").info("pod.reaped", rule="node-shutdown")
    after = datetime.now(UTC)
    logging.getLogger("aiohttp.server").warning("from the stdlib %s", "logger")
    get_logger("zombied.test").debug("hidden")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["event"] == "pod.reaped"
    assert first["namespace"] == "team-a"
    assert first["pod"] == "web-0"
    assert first["rule"] == "node-shutdown"
    assert first["level"] == "info"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", first["timestamp"])
    # datetime rounds to the microsecond where the line's stamp truncates: 1 ms of slack.
    slack = timedelta(milliseconds=1)
    assert before - slack <= datetime.fromisoformat(first["timestamp"]) <= after + slack
    assert second["timestamp"] >= first["timestamp"]
    assert second["event"] == "from the stdlib logger"
    assert second["logger"] == "aiohttp.server"


def test_debug_level_and_console_renderer() -> None:
    out = io.StringIO()
    configure_logging("console", "debug", out)
    get_logger("zombied.test").debug("watch.synced", pods=3)
    text = out.getvalue()
    assert "watch.synced" in text
    assert "pods=3" in text
    assert not text.lstrip().startswith("{")


def test_auto_picks_console_only_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_console("auto", Terminal())
    assert not wants_console("auto", io.StringIO())
    assert not wants_console("json", Terminal())
    assert wants_console("console", io.StringIO())
    closed = io.StringIO()
    closed.close()
    assert not wants_console("auto", closed)


def test_a_line_that_cannot_be_written_never_stops_the_caller() -> None:
    out = io.StringIO()
    configure_logging("json", "info", out)
    out.close()
    get_logger("zombied.test").info("pod.reaped")  # no exception: the line is dropped
