"""Structured logging: one event per thing that happened, with stable keys.

structlog events as JSON lines on stdout, or the console renderer on a terminal; the
stdlib loggers of aiohttp and kubernetes_asyncio go through a ``ProcessorFormatter`` so
every line has one shape. Callers decide what to log.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import msgspec
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


class _NamedWriteLogger(structlog.WriteLogger):
    """structlog's line writer, with the name ``add_logger_name`` reports; like a stdlib
    handler, it drops a line it cannot write (closed stdout) instead of raising."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name

    def msg(self, message: str) -> None:
        try:
            super().msg(message)
        except (OSError, ValueError):
            return

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


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
        renderer = structlog.processors.JSONRenderer(serializer=_dumps)

    def writer(*args: Any) -> _NamedWriteLogger:
        return _NamedWriteLogger(out, str(args[0]) if args else "")

    structlog.configure(
        processors=[*shared, renderer],
        logger_factory=writer,
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        # Cached loggers would escape ``structlog.testing.capture_logs``.
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


def _dumps(event: Any, **_kwargs: Any) -> str:
    return msgspec.json.encode(event, enc_hook=str).decode()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced stream: assume a pipe
        return False


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
