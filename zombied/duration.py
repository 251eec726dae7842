"""Durations as operators write them (``500ms``, ``30s``, ``5m``, ``1h30m``) and read them.

One spelling for every place a duration appears: options, the config file, reports and
the documentation. Pure.
"""

from __future__ import annotations

import math
import re
from typing import Final

_PART: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ms|h|m|s)")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``30s``, ``5m``, ``1h30m`` or plain (fractional) seconds;
    `ValueError` saying what a duration looks like otherwise."""
    value = text.strip()
    unsigned = value.removeprefix("-")
    try:
        seconds = float(unsigned)
    except ValueError:
        parts = _PART.findall(unsigned)
        if not parts or "".join(number + unit for number, unit in parts) != unsigned:
            raise ValueError(
                f"must be a duration like 500ms, 30s, 5m, 1h30m or seconds, got {text!r}"
            ) from None
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    # "-5s" is a duration, only not one zombied can wait for: say so, not "like 30s".
    if value.startswith("-") or not math.isfinite(seconds):
        raise ValueError(f"must be a duration >= 0, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest duration string `parse_duration` reads back to ``seconds``."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds != int(seconds):
        return f"{seconds:g}s"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
