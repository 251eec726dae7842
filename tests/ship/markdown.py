"""Markdown as the documentation tests read it: fenced blocks, prose, anchors, links."""

from __future__ import annotations

import re
from collections.abc import Iterator


def fenced(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of ``text`` in order: (language, body); "" for no language."""
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if not line.startswith("```"):
            if language is not None:
                lines.append(line)
        elif language is None:
            language, lines = line[3:].strip(), []
        else:
            blocks.append((language, "\n".join(lines) + "\n"))
            language = None
    return blocks


def code_blocks(text: str, language: str) -> list[str]:
    """The bodies of the blocks fenced as ``language`` ("sh", "yaml", "" for none)."""
    return [body for lang, body in fenced(text) if lang == language]


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (a ``# comment`` there is no heading)."""
    kept, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of ``text``."""
    found: set[str] = set()
    for heading in re.findall(r"^#+ +(.+?) *$", prose(text), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in found:  # GitHub numbers repeated headings: x, x-1, x-2
            n += 1
            anchor = f"{slug}-{n}"
        found.add(anchor)
    return found


def links(text: str) -> Iterator[str]:
    """The targets of the links and images of ``text``, outside code."""
    outside_code = re.sub(r"`[^`\n]*`", "", prose(text))
    yield from re.findall(r"\]\(([^)\s]+)\)", outside_code)
