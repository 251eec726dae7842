"""The README says what the code does.

It opens with the two commands that work on a fresh machine; its configuration and
metrics references are the ones the code generates; every flag, environment variable
and ``zombied`` command line it shows is accepted by the real option parser.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from zombied.config import OPTIONS, build_parser, load_config

from . import readme_sections
from .manifests import ROOT

README = ROOT / "README.md"
COMMANDS_WITH_OPTIONS = ("run", "scan", "explain")
#: Flags the README mentions that belong to other programs (kubectl, the controller manager).
FOREIGN_FLAGS = frozenset(
    {
        "--field-selector",
        "--terminated-pod-gc-threshold",
        "--previous",  # kubectl logs
        "--comment",  # amtool silence add
        "--duration",
    }
)
#: YAML blocks that are another program's file say so on their first line.
FOREIGN_YAML = ("# kustomization.yaml", "# prometheus.yml")


@pytest.fixture(scope="module")
def text() -> str:
    return README.read_text(encoding="utf-8")


def _flags(command: str) -> set[str]:
    """The flags ``zombied <command> --help`` shows."""
    return set(re.findall(r"(?<![\w-])--?[a-z][a-z0-9-]*", build_parser(command).format_help()))


def _code_blocks(text: str) -> Iterator[str]:
    yield from re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_opens_with_demo_and_test(text: str) -> None:
    before_first_section = text.split("\n## ", 1)[0]
    first_block = next(_code_blocks(before_first_section))
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    assert commands[:2] == ["make demo", "make test"]
    assert text.index("make demo") < text.index("\n## ")


#: Every markdown file ``make docs`` renders: the README and the pages under docs/.
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("**/*.md")))


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_generated_sections_match_the_code(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for name in readme_sections.names(text):
        expected = readme_sections.SECTIONS[name]().strip()
        assert expected, f"{name}: the generator produced nothing"
        assert readme_sections.section(text, name) == expected, (
            f"{path.name}: section {name} is stale: run `make docs`"
        )
    assert readme_sections.render(readme_sections.render(text)) == readme_sections.render(text)


def test_every_generated_section_is_published() -> None:
    published = {
        name for path in DOCUMENTS for name in readme_sections.names(path.read_text("utf-8"))
    }
    assert published == set(readme_sections.SECTIONS)


def test_the_generator_writes_any_markdown_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Rules\n<!-- BEGIN rules-reference -->\nold\n<!-- END rules-reference -->\n")
    assert readme_sections.main(["--check", str(page)]) == 1
    assert readme_sections.main(["--write", str(page)]) == 0
    assert readme_sections.main(["--check", str(page)]) == 0
    body = readme_sections.section(page.read_text(), "rules-reference")
    assert body.splitlines()[0].startswith("| Rule | Phases |")
    page.write_text("<!-- BEGIN nonsense -->\n<!-- END nonsense -->\n")
    with pytest.raises(ValueError, match="no generator for section 'nonsense'"):
        readme_sections.render(page.read_text())


def test_the_reference_lists_every_option_in_well_formed_rows() -> None:
    lines = readme_sections.config_reference().splitlines()
    assert lines[0] == "| Flag | Environment | Default | Commands | Description |"
    assert len(lines) == 2 + len(OPTIONS)
    for option, line in zip(OPTIONS, lines[2:], strict=True):
        assert f"`{option.flag}" in line
        # exactly five cells: no unescaped pipe inside a cell
        assert line.replace("\\|", "").count("|") == 6
    dry_run = next(line for line in lines if line.startswith("| `--dry-run"))
    assert dry_run.startswith("| `--dry-run[=client\\|server\\|none]` | `ZOMBIED_DRY_RUN` | none |")


def test_every_flag_mentioned_exists(text: str) -> None:
    known = set().union(*(_flags(command) for command in COMMANDS_WITH_OPTIONS))
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    unknown = mentioned - known - FOREIGN_FLAGS
    assert not unknown, f"README mentions flags zombied does not have: {sorted(unknown)}"


def test_every_environment_variable_mentioned_exists(text: str) -> None:
    known = {option.env for option in OPTIONS}
    mentioned = set(re.findall(r"\bZOMBIED_[A-Z0-9_]+", text))
    assert mentioned, "the README should show at least one environment variable"
    assert mentioned <= known, sorted(mentioned - known)


def test_every_zombied_command_line_shown_parses(text: str) -> None:
    shown = [
        shlex.split(line.split(" #")[0])
        for block in _code_blocks(text)
        for line in block.splitlines()
        if line.startswith("zombied ")
    ]
    assert shown
    for argv in shown:
        command = argv[1]
        if command in COMMANDS_WITH_OPTIONS:
            load_config(command, argv[2:], {})
        else:
            assert command == "version", argv


def test_every_config_file_shown_loads(text: str, tmp_path: Path) -> None:
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert blocks, "the README should show a --config file"
    for index, block in enumerate(blocks):
        if block.startswith(FOREIGN_YAML):
            continue
        path = tmp_path / f"config-{index}.yaml"
        path.write_text(block, encoding="utf-8")
        config = load_config("run", ["--config", str(path)], {})
        assert config.rules.rules
