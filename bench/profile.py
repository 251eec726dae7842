"""Where zombied's time goes: a summary of a py-spy profile in collapsed-stack form.

`py-spy record --format raw` writes one line per distinct stack, `frame;frame;... N`,
each frame `function (path:line)`. This module reads that text and ranks functions by
inclusive and self samples, and libraries by self samples, for the profile section of
RESULTS.md. Pure: text in, tables out; it never runs py-spy itself.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")

# Path fragments mapped to the library a frame belongs to, most specific first.
_LIBRARIES = (
    ("zombied/", "zombied"),
    ("kubernetes_asyncio/", "kubernetes_asyncio"),
    ("aiohttp/", "aiohttp"),
    ("structlog/", "structlog"),
    ("prometheus_client/", "prometheus_client"),
    ("anyio/", "anyio"),
    ("yarl/", "yarl / multidict"),
    ("multidict/", "yarl / multidict"),
    ("json/", "json"),
    ("ssl.py", "ssl"),
    ("asyncio/", "asyncio"),
    ("logging/", "logging"),
)


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    path: str

    @property
    def label(self) -> str:
        return f"{self.function} ({self.path})"

    @property
    def library(self) -> str:
        for fragment, name in _LIBRARIES:
            if fragment in self.path:
                return name
        return "other"


def parse_frame(text: str) -> Frame:
    match = _FRAME.match(text.strip())
    if match is None:
        return Frame(text.strip(), "")
    return Frame(match["func"], match["path"])


def parse_collapsed(text: str) -> list[tuple[list[Frame], int]]:
    """Stacks (outermost first) with their sample counts."""
    stacks: list[tuple[list[Frame], int]] = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stacks.append(([parse_frame(part) for part in stack.split(";")], int(count)))
    return stacks


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    samples: int
    inclusive: list[tuple[str, int]]  # function label, samples with it on the stack
    own: list[tuple[str, int]]  # function label, samples with it on top
    libraries: list[tuple[str, int]]  # library, samples with one of its frames on top


def summarise(stacks: Iterable[tuple[list[Frame], int]], *, top: int = 15) -> ProfileSummary:
    """Rank functions (zombied's own only, for inclusive time) and libraries."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    samples = 0
    for frames, count in stacks:
        if not frames:
            continue
        samples += count
        seen = {frame.label for frame in frames if frame.library == "zombied"}
        for label in seen:
            inclusive[label] += count
        own[frames[-1].label] += count
        libraries[frames[-1].library] += count
    return ProfileSummary(
        samples=samples,
        inclusive=inclusive.most_common(top),
        own=own.most_common(top),
        libraries=libraries.most_common(),
    )


def render(summary: ProfileSummary, *, title: str) -> list[str]:
    """Markdown lines: libraries by own time, zombied's functions by inclusive time."""
    if not summary.samples:
        return []

    def pct(count: int) -> str:
        return f"{100.0 * count / summary.samples:.1f} %"

    return [
        f"## {title}",
        "",
        f"{summary.samples:,} samples of zombied's active threads (py-spy, 100 Hz).",
        "",
        "| library on top of the stack | share |",
        "| --- | ---: |",
        *(f"| {name} | {pct(count)} |" for name, count in summary.libraries),
        "",
        "| zombied function (on the stack) | share |",
        "| --- | ---: |",
        *(f"| `{label}` | {pct(count)} |" for label, count in summary.inclusive),
        "",
        "| hottest frames (on top of the stack) | share |",
        "| --- | ---: |",
        *(f"| `{label}` | {pct(count)} |" for label, count in summary.own[:10]),
        "",
    ]
