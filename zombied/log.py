"""Structured logging: one event per thing that happened, with stable keys.

This module owns the logging set-up of the process: structlog events rendered as JSON
lines on stdout (production), or by the console renderer on a terminal; the stdlib
loggers of aiohttp and kubernetes_asyncio are routed through the same
``ProcessorFormatter`` so every line on stdout has one shape. Per-item context (the pod
being reaped, the scope being watched) is bound with ``structlog.contextvars`` by the
callers and merged here. It must never decide *what* to log; callers do.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

#: Libraries that log at INFO about every request; their noise is kept at WARNING.
_QUIET_LOGGERS = ("aiohttp.access", "kubernetes_asyncio")


def wants_console(log_format: str, stream: TextIO) -> bool:
    """The console renderer for ``console``, or for ``auto`` when writing to a terminal."""
    if log_format == "console":
        return True
    if log_format == "json":
        return False
    return _is_terminal(stream)


def configure_logging(
    log_format: str = "auto", level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog and the stdlib root logger to write to ``stream`` (stdout)."""
    out = stream if stream is not None else sys.stdout
    level_no = logging.getLevelNamesMapping()[level.upper()]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if wants_console(log_format, out):
        renderer = structlog.dev.ConsoleRenderer(colors=_is_terminal(out))
    else:
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Caching would pin loggers created at import time to this configuration, and
        # ``structlog.testing.capture_logs`` could no longer see them.
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_no)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level_no, logging.WARNING))


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced stream: assume a pipe
        return False


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A logger named after the module that uses it."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
