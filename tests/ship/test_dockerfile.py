"""The container image, checked without a Docker engine.

The Dockerfile is parsed and held to what the deployment relies on: a pinned slim base,
a builder stage, a runtime stage that installs nothing but the built wheel, a numeric
non-root user, exec-form ENTRYPOINT/CMD (so SIGTERM reaches zombied), no writes at run
time. Then the wheel is built as the builder stage builds it, installed on its own, and
its console script is run the way the image runs it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .manifests import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [value for kw, value in self.instructions if kw == keyword]


def _logical_lines(text: str) -> list[str]:
    """Instructions with line continuations joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "Dockerfile ends inside a continued line"
    return lines


def parse_dockerfile(text: str) -> list[Stage]:
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, value = line.partition(" ")
        keyword = keyword.upper()
        value = value.strip()
        if keyword == "FROM":
            words = [w for w in value.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif keyword == "ARG" and not stages:
            continue
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, value))
    return stages


def _run_words(run: str) -> list[str]:
    """The shell words of a RUN instruction, without its --mount/--network options."""
    words = shlex.split(run)
    while words and words[0].startswith("--"):
        words.pop(0)
    return words


def _pip_install_targets(words: list[str]) -> list[str]:
    """What each ``pip install`` in a shell command line installs (not its option values)."""
    targets: list[str] = []
    takes_value = {"-c", "--constraint", "-r", "--requirement", "--target", "-t", "--prefix"}
    commands: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", ";", "||"):
            commands.append([])
        else:
            commands[-1].append(word)
    for command in commands:
        if "pip" not in " ".join(command) or "install" not in command:
            continue
        rest = command[command.index("install") + 1 :]
        skip = False
        for word in rest:
            if skip:
                skip = False
            elif word in takes_value:
                skip = True
            elif not word.startswith("-"):
                targets.append(word)
    return targets


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def test_parser_understands_continuations_and_exec_form() -> None:
    parsed = parse_dockerfile(
        'ARG X=1\nFROM a:1 AS b\nRUN one \\\n  # note\n  two\nFROM c:2\nCMD ["x"]\n'
    )
    assert [(s.base, s.name) for s in parsed] == [("a:1", "b"), ("c:2", None)]
    assert parsed[0].all("RUN") == ["one two"]
    assert _pip_install_targets(
        _run_words("--mount=type=bind,x=y pip install -c c.txt /w/z.whl && pip install q")
    ) == ["/w/z.whl", "q"]


def test_multi_stage_on_a_pinned_slim_python(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    for stage in stages:
        image, _, tag = stage.base.partition(":")
        assert image in ("python", "docker.io/library/python"), stage.base
        # A full patch version and the slim variant, never a floating tag.
        assert tag.split("-")[0].count(".") == 2, f"pin the base image: {stage.base}"
        assert "-slim" in tag, f"use the slim variant: {stage.base}"
        assert tag.split(".")[:2] >= ["3", "11"]


def test_builder_builds_the_wheel(stages: list[Stage]) -> None:
    builder = stages[0]
    assert any("-m build --wheel" in run for run in builder.all("RUN"))


def test_runtime_installs_only_the_wheel(stages: list[Stage]) -> None:
    runtime = stages[-1]
    targets = [t for run in runtime.all("RUN") for t in _pip_install_targets(_run_words(run))]
    assert targets, "the runtime stage must install the wheel"
    assert all(t.endswith(".whl") for t in targets), targets
    installs = [run for run in runtime.all("RUN") if "pip" in run and "install" in run]
    # Dependencies resolve to the same pins as the tested environment.
    assert all("-c " in run or "--constraint" in run for run in installs)
    assert not runtime.all("ADD")
    copies = runtime.all("COPY")
    assert all("--from=builder" in copy for copy in copies), copies


def test_runtime_runs_as_numeric_non_root(stages: list[Stage]) -> None:
    users = stages[-1].all("USER")
    assert users, "the runtime stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) == 65532
    assert not gid or int(gid) != 0


def test_entrypoint_and_cmd_are_exec_form(stages: list[Stage]) -> None:
    runtime = stages[-1]
    # JSON arrays: zombied is PID 1 and gets SIGTERM itself, no shell in between.
    assert json.loads(runtime.all("ENTRYPOINT")[-1]) == ["zombied"]
    assert json.loads(runtime.all("CMD")[-1]) == ["run"]
    assert runtime.all("EXPOSE") == ["8080"]


def test_runtime_writes_nothing(stages: list[Stage]) -> None:
    env = " ".join(stages[-1].all("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PIP_NO_CACHE_DIR=1" in env
    assert not stages[-1].all("VOLUME")


def test_oci_labels(stages: list[Stage]) -> None:
    labels = " ".join(stages[-1].all("LABEL"))
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    # `make image` passes the version; the default must not go stale either.
    assert f"VERSION={project_version()}" in stages[-1].all("ARG")


def test_dockerignore_admits_exactly_what_the_build_copies(stages: list[Stage]) -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "start from an empty context and admit files one by one"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for stage in stages
        for copy in stage.all("COPY")
        if "--from=" not in copy
        for source in copy.split()[:-1]
        if not source.startswith("--")
    }
    mounted = {
        part.split("=", 1)[1]
        for stage in stages
        for run in stage.all("RUN")
        for word in shlex.split(run)
        if word.startswith("--mount=") and "from=" not in word
        for part in word.removeprefix("--mount=").split(",")
        if part.startswith("source=")
    }
    assert copied | mounted <= admitted
    # pyproject.toml names README.md as the long description: the build needs it.
    assert {"pyproject.toml", "README.md", "zombied", "constraints.txt"} <= admitted


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built the way the builder stage builds it."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (built,) = out.glob("zombied-*.whl")
    return built


@pytest.mark.subprocess
def test_wheel_contains_the_package_and_its_console_script(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    assert "zombied/py.typed" in names
    assert "zombied/cli.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    assert "zombied = zombied.cli:main" in scripts


@pytest.mark.subprocess
def test_wheel_ships_no_simulator(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert not [n for n in names if "kubesim" in n or "/sim/" in n]
    requires = [line for line in metadata.decode().splitlines() if line.startswith("Requires-Dist")]
    assert requires
    assert not [line for line in requires if "kubesim" in line]


@pytest.mark.subprocess
def test_console_script_runs_as_in_the_image(wheel: Path, tmp_path: Path) -> None:
    # Install only the wheel, as the runtime stage does; dependencies come from this
    # environment (already pinned by constraints.txt) so the test needs no network.
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert install.returncode == 0, install.stderr
    script = target / "bin" / "zombied"
    assert script.is_file()
    before = sorted(p.relative_to(target) for p in target.rglob("*"))
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("ZOMBIED_", "KUBE"))
    }
    env |= {"PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)}
    for argv in (["version"], ["--help"], ["run", "--help"]):
        result = subprocess.run(
            [str(script), *argv],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
            env=env,
            timeout=60,
        )
        assert result.returncode == 0, f"zombied {' '.join(argv)}: {result.stderr}"
        assert result.stdout.strip()
    version = subprocess.run(
        [str(script), "version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert project_version() in version.stdout
    # The code that ran is the wheel's, not the source tree's.
    origin = subprocess.run(
        [sys.executable, "-c", "import zombied.cli; print(zombied.cli.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert Path(origin.stdout.strip()).is_relative_to(target)
    # Nothing was written next to the installed code (read-only root filesystem).
    assert sorted(p.relative_to(target) for p in target.rglob("*")) == before
