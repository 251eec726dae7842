"""The README's generated sections: configuration, built-in rules and metrics references.

The references are rendered from the code's own definitions (the option table in
``zombied.config``, the built-in rules in ``zombied.rules`` and the metric objects in
``zombied.metrics``), so the README cannot
drift from what the program accepts and exposes. ``make docs`` rewrites the sections
between their markers; ``test_readme.py`` fails when they are stale.

Usage: ``python tests/ship/readme_sections.py --write README.md`` (or ``--check``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def config_reference() -> str:
    from zombied.config import format_reference  # noqa: PLC0415 - only when rendering

    return format_reference().strip()


def rules_reference() -> str:
    from zombied.config import format_rules_reference  # noqa: PLC0415 - only when rendering

    return format_rules_reference().strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def metrics_reference() -> str:
    from zombied.metrics import reference  # noqa: PLC0415 - only when rendering

    lines = ["| Metric | Type | Labels | Meaning |", "|---|---|---|---|"]
    for name, kind, labels, help_text in reference():
        label_text = ", ".join(f"`{label}`" for label in labels) or "none"
        lines.append(f"| `{name}` | {kind} | {label_text} | {_cell(help_text)} |")
    return "\n".join(lines)


SECTIONS: dict[str, Callable[[], str]] = {
    "config-reference": config_reference,
    "rules-reference": rules_reference,
    "metrics-reference": metrics_reference,
}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- BEGIN {re.escape(name)} -->\n)(.*?)(<!-- END {re.escape(name)} -->)",
        flags=re.DOTALL,
    )


def section(text: str, name: str) -> str:
    """The current content between the markers of section ``name``."""
    match = _pattern(name).search(text)
    if match is None:
        raise ValueError(f"README has no <!-- BEGIN {name} --> ... <!-- END {name} --> markers")
    return match.group(2).strip()


def render(text: str) -> str:
    """``text`` with every generated section replaced by what the code says now."""
    for name, generate in SECTIONS.items():
        section(text, name)  # markers must exist
        body = generate()
        text = _pattern(name).sub(lambda m, body=body: f"{m.group(1)}{body}\n{m.group(3)}", text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the sections in place")
    mode.add_argument("--check", action="store_true", help="exit 1 when a section is stale")
    parser.add_argument("readme", type=Path)
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    new = render(text)
    if args.check:
        if new != text:
            print(f"{args.readme}: generated sections are stale; run `make docs`")
            return 1
        return 0
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
        print(f"{args.readme}: generated sections updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
