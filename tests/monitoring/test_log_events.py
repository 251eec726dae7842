"""Every log event the alerts and the docs tell an operator to look for is one zombied
logs: a runbook that names a line nobody writes sends its reader nowhere."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where log events are named for operators: the docs and every copy of the alerts.
NAMING = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "manifests" / "components" / "monitoring").glob("*.yaml"),
        ROOT / "charts" / "zombied" / "files" / "zombied-rules.yaml",
    ]
)
EVENT = re.compile(r"[a-z]+\.[a-z][a-z_]*")
FILE_SUFFIXES = frozenset({"md", "py", "yaml", "yml", "json", "toml", "txt", "png", "sh"})


def logged() -> set[str]:
    """Every string in zombied's code shaped like an event name (``pod.reaped``)."""
    names = set()
    for path in (ROOT / "zombied").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return {name for name in names if EVENT.fullmatch(name)}


def named(text: str, prefixes: set[str]) -> set[str]:
    """The event names in ``text``: ``prefix.event`` (or ``prefix.*``) for a prefix of
    zombied's events or the name of one of its modules, file names left out."""
    alternatives = "|".join(sorted(prefixes))
    found = re.findall(rf"(?<![\w/.-])((?:{alternatives})\.(?:[a-z][a-z_]*|\*))", text)
    return {name for name in found if name.rpartition(".")[2] not in FILE_SUFFIXES}


@pytest.mark.parametrize("path", NAMING, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_event_named_for_operators_is_logged(path: Path) -> None:
    events = logged()
    prefixes = {name.partition(".")[0] for name in events}
    prefixes |= {module.stem for module in (ROOT / "zombied").glob("*.py")} - {"__init__"}
    for name in named(path.read_text(encoding="utf-8"), prefixes):
        prefix, _, event = name.partition(".")
        if event == "*":
            assert prefix in {known.partition(".")[0] for known in events}, name
        else:
            assert name in events, f"{path.name} names {name}, which zombied never logs"
