"""Generated sections of the documentation: configuration, rules and metrics references.

The references are rendered from the code's own definitions (the option table in
``zombied.config``, the built-in rules in ``zombied.rules`` and the metric objects in
``zombied.metrics``), so no page can drift from what the program accepts and exposes.
Any markdown file may hold any of the sections, each between
``<!-- BEGIN name -->`` and ``<!-- END name -->``; ``make docs`` rewrites the sections
of every file it is given, and ``test_readme.py`` fails when one is stale. The
runtime package never formats documentation: this module is the only generator.

Usage: ``python tests/ship/readme_sections.py --write README.md docs/*.md`` (or ``--check``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

_MARKER = re.compile(r"<!-- BEGIN ([a-z0-9-]+) -->")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def config_reference() -> str:
    """Every option: its flag and spellings, environment variable, default, commands."""
    from zombied.config import COMMANDS, OPTIONS  # noqa: PLC0415 - only when rendering

    rows = []
    for option in OPTIONS:
        flag = option.flag + (f"[={option.metavar}]" if option.const else f" {option.metavar}")
        spellings = [f"`{alias}`" for alias in (option.short, *option.aliases) if alias]
        rows.append(
            (
                f"`{flag}`" + (f" ({', '.join(spellings)})" if spellings else ""),
                f"`{option.env}`" if option.env else "flag only",
                option.shown,
                ", ".join(command for command in COMMANDS if command in option.commands),
                option.help,
            )
        )
    return _table(("Flag", "Environment", "Default", "Commands", "Description"), rows)


def rules_reference() -> str:
    """The built-in rules: what each matches, its min age, whether it is on by default."""
    from zombied.config import format_duration  # noqa: PLC0415 - only when rendering
    from zombied.rules import BUILTIN_RULES, DEFAULT_RULES, OWN_MIN_AGES  # noqa: PLC0415

    rows = []
    for name, pattern in BUILTIN_RULES.items():
        reasons = [f"`{reason}`" for reason in sorted(pattern.reasons)]
        if pattern.reason_pattern is not None:
            reasons.append("`OutOf<resource>`")
        if pattern.disruption is not None:
            reasons.append(
                "or none, with a `DisruptionTarget` condition of reason "
                f"`TerminationByKubelet` whose message matches `{pattern.disruption.pattern}`"
            )
        age = OWN_MIN_AGES.get(name)
        rows.append(
            (
                f"`{name}`",
                ", ".join(sorted(pattern.phases)),
                ", ".join(reasons) or "any",
                f"`{pattern.message.pattern}`" if pattern.message is not None else "anything",
                format_duration(age) if age is not None else "`--min-age`",
                "yes" if name in DEFAULT_RULES else "no",
            )
        )
    header = ("Rule", "Phases", "Reasons", "Message must match", "Min age", "On by default")
    return _table(header, rows)


def metrics_reference() -> str:
    """Every metric zombied exposes, with its type, labels and meaning."""
    from zombied.metrics import reference  # noqa: PLC0415 - only when rendering

    rows = [
        (f"`{name}`", kind, ", ".join(f"`{label}`" for label in labels) or "none", help_text)
        for name, kind, labels, help_text in reference()
    ]
    return _table(("Metric", "Type", "Labels", "Meaning"), rows)


def kubelet_corpus() -> str:
    """Every pod recorded on a real kubelet (`kubesim.recorded`): what it wrote, where
    zombied takes the pod's terminal time from, what zombied decided, who deleted it."""
    from zombied.pod import parse_pod  # noqa: PLC0415

    from kubesim.recorded import RELEASES, recorded  # noqa: PLC0415 - only when rendering

    rows = []
    for release in RELEASES:
        for written in recorded(release):
            status = written.pod["status"]
            wrote = [f"`{status['phase']}`"]
            wrote.append(f"reason `{status['reason']}`" if status.get("reason") else "no reason")
            if status.get("message"):
                wrote.append(f'"{status["message"]}"')
            wrote.extend(
                f"`DisruptionTarget` `{condition['reason']}`"
                for condition in status.get("conditions", [])
                if condition["type"] == "DisruptionTarget"
            )
            if not status.get("containerStatuses") and not status.get("conditions"):
                wrote.append("no conditions, no container states")
            rows.append(
                (
                    release,
                    written.scenario,
                    written.description,
                    ", ".join(wrote),
                    parse_pod(written.pod).terminated_source or "-",
                    f"`{written.verdict}`",
                    written.deleted_by or "-",
                )
            )
    header = ("Kubelet", "Scenario", "Pod", "Wrote", "Terminal since", "zombied", "Deleted by")
    return _table(header, rows)


SECTIONS: dict[str, Callable[[], str]] = {
    "kubelet-corpus": kubelet_corpus,
    "config-reference": config_reference,
    "rules-reference": rules_reference,
    "metrics-reference": metrics_reference,
}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- BEGIN {re.escape(name)} -->\n)(.*?)(<!-- END {re.escape(name)} -->)",
        flags=re.DOTALL,
    )


def names(text: str) -> list[str]:
    """The generated sections ``text`` holds, in order; unknown names are an error."""
    found = _MARKER.findall(text)
    unknown = sorted(set(found) - set(SECTIONS))
    if unknown:
        raise ValueError(f"no generator for section {unknown[0]!r} (known: {', '.join(SECTIONS)})")
    return found


def section(text: str, name: str) -> str:
    """The current content between the markers of section ``name``."""
    match = _pattern(name).search(text)
    if match is None:
        raise ValueError(f"no <!-- BEGIN {name} --> ... <!-- END {name} --> markers")
    return match.group(2).strip()


def render(text: str) -> str:
    """``text`` with each generated section it holds replaced by what the code says now."""
    for name in names(text):
        section(text, name)  # the END marker must exist too
        body = SECTIONS[name]()
        text = _pattern(name).sub(lambda m, body=body: f"{m.group(1)}{body}\n{m.group(3)}", text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the sections in place")
    mode.add_argument("--check", action="store_true", help="exit 1 when a section is stale")
    parser.add_argument("files", type=Path, nargs="+", metavar="FILE.md")
    args = parser.parse_args(argv)
    stale = 0
    for path in args.files:
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if new == text:
            continue
        if args.check:
            print(f"{path}: generated sections are stale; run `make docs`")
            stale += 1
        else:
            path.write_text(new, encoding="utf-8")
            print(f"{path}: generated sections updated")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
