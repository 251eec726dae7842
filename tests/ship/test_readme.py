"""The README and the pages under docs/ say what the code does.

The generated sections (option, rules and metrics references) are the ones the code
generates, wherever they are; every relative link resolves to a file and heading that
exist; every ``make`` target, flag, environment variable, log event, ``zombied``
command line and config file shown is one the Makefile, the option parser or the code
has.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from urllib.parse import unquote

import pytest
from zombied.config import OPTIONS, build_parser, load_config

from . import readme_sections
from .manifests import ROOT
from .markdown import anchors, code_blocks, links

README = ROOT / "README.md"
#: Every markdown file ``make docs`` renders: the README and the pages under docs/.
DOCUMENTS = (README, *sorted((ROOT / "docs").glob("**/*.md")))
COMMANDS_WITH_OPTIONS = ("run", "scan", "explain")
#: Flags the docs mention that belong to other programs.
FOREIGN_FLAGS = frozenset(
    {
        "--terminated-pod-gc-threshold",  # kube-controller-manager
        "--field-selector",  # kubectl
        "--previous",
        "--subresource",
        "--type",
        "--image",
        "--overrides",
        "--tls",  # kubesim
        "--comment",  # amtool silence add
        "--duration",
        "--set",  # helm
        "--create-namespace",
        "--reuse-values",
        "--kube-version",
        "--build-arg",  # docker build, buildah bud
    }
)
#: YAML blocks that are another program's file say so on their first line.
FOREIGN_YAML = ("# kustomization.yaml", "# prometheus.yml", "# values.yaml")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_every_make_target_shown_exists(path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, flags=re.MULTILINE))
    text = path.read_text(encoding="utf-8")
    shown = set(re.findall(r"`make ([a-z][a-z0-9-]*)", text))
    for block in code_blocks(text, "sh"):
        shown |= set(re.findall(r"^make ([a-z][a-z0-9-]*)", block, flags=re.MULTILINE))
    assert shown <= targets, f"{_id(path)} shows make targets the Makefile lacks"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_generated_sections_match_the_code(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for name in readme_sections.names(text):
        expected = readme_sections.SECTIONS[name]().strip()
        assert readme_sections.section(text, name) == expected, (
            f"{_id(path)}: section {name} is stale: run `make docs`"
        )


def test_every_generated_section_is_published() -> None:
    published = [
        name for path in DOCUMENTS for name in readme_sections.names(path.read_text("utf-8"))
    ]
    assert sorted(published) == sorted(readme_sections.SECTIONS), "each section exactly once"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for link in links(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        target, _, anchor = unquote(link).partition("#")
        page = (path.parent / target).resolve() if target else path
        if not page.exists() or ROOT not in (page, *page.parents):
            broken.append(f"{link}: no file {target}")
        elif anchor and anchor not in anchors(page.read_text(encoding="utf-8")):
            broken.append(f"{link}: no heading #{anchor} in {_id(page)}")
    assert not broken, f"{_id(path)}: {broken}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_every_flag_mentioned_exists(path: Path) -> None:
    known = set().union(
        *(
            re.findall(r"(?<![\w-])--?[a-z][a-z0-9-]*", build_parser(command).format_help())
            for command in COMMANDS_WITH_OPTIONS
        )
    )
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", path.read_text("utf-8")))
    unknown = mentioned - known - {"--version"} - FOREIGN_FLAGS
    assert not unknown, f"{_id(path)} mentions flags zombied does not have: {sorted(unknown)}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_every_environment_variable_mentioned_exists(path: Path) -> None:
    known = {option.env for option in OPTIONS}
    mentioned = set(re.findall(r"\bZOMBIED_[A-Z0-9_]+", path.read_text("utf-8")))
    assert mentioned <= known, sorted(mentioned - known)


#: zombied's log events, by the prefixes they take (``pod.reaped``, ``api.forbidden``...).
_EVENT = r"(?:api|daemon|event|http|leader|pod|watch)\.[a-z_]+"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_every_log_event_mentioned_is_one_zombied_logs(path: Path) -> None:
    code = "\n".join(p.read_text("utf-8") for p in (ROOT / "zombied").glob("*.py"))
    logged = set(re.findall(rf'"({_EVENT})"', code))
    mentioned = set(re.findall(rf"`({_EVENT})`", path.read_text("utf-8")))
    assert mentioned <= logged, f"{_id(path)} names events zombied never logs"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_every_zombied_command_line_shown_parses(path: Path) -> None:
    for block in code_blocks(path.read_text("utf-8"), "sh"):
        for line in block.splitlines():
            if not line.startswith("zombied "):
                continue
            argv = shlex.split(line.split(" #")[0])
            if argv[1] in COMMANDS_WITH_OPTIONS:
                load_config(argv[1], argv[2:], {})
            else:
                assert argv[1:] in (["version"], ["--version"]), argv


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_every_config_file_shown_loads(path: Path, tmp_path: Path) -> None:
    for index, block in enumerate(code_blocks(path.read_text("utf-8"), "yaml")):
        if block.startswith(FOREIGN_YAML):
            continue
        config_file = tmp_path / f"config-{index}.yaml"
        config_file.write_text(block, encoding="utf-8")
        config = load_config("run", ["--config", str(config_file)], {})
        assert config.rules.rules
