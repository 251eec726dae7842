"""The container image, checked without a Docker engine.

hadolint lints the Dockerfile; BuildKit's own parser (the ``dockerfile`` package) reads
the instructions this test holds to what the deployment relies on. Then the wheel is
built as the builder stage builds it, installed on its own, and its console script is
run the way the image runs it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import dockerfile
import pytest

from .manifests import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HADOLINT = Path(sysconfig.get_path("scripts")) / "hadolint"

# One process builds the wheel once for all of these tests.
pytestmark = pytest.mark.xdist_group("wheel")


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


@dataclass
class Stage:
    """One build stage: its FROM and the instructions after it."""

    base: str
    commands: list[dockerfile.Command] = field(default_factory=list)

    def all(self, keyword: str) -> list[dockerfile.Command]:
        return [c for c in self.commands if c.cmd == keyword]

    def values(self, keyword: str) -> list[str]:
        """The arguments of every ``keyword`` instruction, joined as one string each."""
        return [" ".join(c.value) for c in self.all(keyword)]

    def pairs(self, keyword: str) -> dict[str, str]:
        """The key=value pairs of every ENV or LABEL instruction (quotes removed)."""
        values = [value for command in self.all(keyword) for value in command.value]
        return {key: value.strip('"') for key, value in zip(values[::2], values[1::2], strict=True)}


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    stages: list[Stage] = []
    for command in dockerfile.parse_file(str(DOCKERFILE)):
        if command.cmd == "FROM":
            stages.append(Stage(command.value[0]))
        else:
            stages[-1].commands.append(command)
    return stages


def test_hadolint_finds_nothing() -> None:
    # .hadolint.yaml: every finding fails, the OCI labels are required.
    config = ["--config", str(ROOT / ".hadolint.yaml"), "--format", "json"]
    result = subprocess.run(
        [str(HADOLINT), *config, str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout or "[]") == []


def test_multi_stage_on_a_pinned_slim_python(stages: list[Stage]) -> None:
    assert len(stages) == 2
    for stage in stages:
        image, _, tag = stage.base.partition(":")
        assert image in ("python", "docker.io/library/python"), stage.base
        # A full patch version and the slim variant, never a floating tag.
        assert tag.split("-")[0].count(".") == 2, f"pin the base image: {stage.base}"
        assert "-slim" in tag, f"use the slim variant: {stage.base}"


def test_runtime_installs_only_the_wheel_and_writes_nothing(stages: list[Stage]) -> None:
    runtime = stages[-1]
    installs = [run for run in runtime.values("RUN") if "pip install" in run]
    assert installs, "the runtime stage must install the wheel"
    for run in installs:
        words = shlex.split(run)
        # Dependencies resolve to the same pins as the tested environment (-c).
        constraints = words[words.index("-c") + 1]
        targets = [word for word in words[words.index("install") + 1 :] if word[0] != "-"]
        assert targets == [constraints, words[-1]], run
        assert words[-1].endswith(".whl"), run
    assert not runtime.all("ADD")
    assert all("--from=builder" in copy.flags for copy in runtime.all("COPY"))
    env = runtime.pairs("ENV")
    assert (env["PYTHONDONTWRITEBYTECODE"], env["PIP_NO_CACHE_DIR"]) == ("1", "1")
    assert not runtime.all("VOLUME")


def test_runtime_runs_zombied_as_pid_1_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    runtime = stages[-1]
    # Numeric, as the manifests' runAsUser, so the kubelet can check runAsNonRoot.
    assert runtime.values("USER")[-1] == "65532:65532"
    # Exec form: zombied is PID 1 and gets SIGTERM itself, no shell in between.
    (entrypoint,) = runtime.all("ENTRYPOINT")
    (cmd,) = runtime.all("CMD")
    assert (entrypoint.json, entrypoint.value) == (True, ("zombied",))
    assert (cmd.json, cmd.value) == (True, ("run",))
    assert runtime.values("EXPOSE") == ["8080"]


def test_oci_labels(stages: list[Stage]) -> None:
    labels = stages[-1].pairs("LABEL")
    assert labels["org.opencontainers.image.title"] == "zombied"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.base.name"].endswith(stages[-1].base)
    # `make image` passes the version; the default must not go stale either.
    assert f"VERSION={project_version()}" in stages[-1].values("ARG")


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
        if not any(flag.startswith("--from=") for flag in copy.flags)
        for source in copy.value[:-1]
    }
    mounted = {
        part.split("=", 1)[1]
        for stage in stages
        for run in stage.all("RUN")
        for flag in run.flags
        if flag.startswith("--mount=") and "from=" not in flag
        for part in flag.removeprefix("--mount=").split(",")
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
def test_wheel_holds_the_package_and_its_console_script_and_no_simulator(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = {n.rsplit("/", 1)[-1]: archive.read(n).decode() for n in names if ".dist-info/" in n}
    assert {"zombied/py.typed", "zombied/cli.py"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "bench/")) or "kubesim" in n]
    assert "zombied = zombied.cli:main" in info["entry_points.txt"]
    requires = [line for line in info["METADATA"].splitlines() if line.startswith("Requires-Dist")]
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
    before = sorted(p.relative_to(target) for p in target.rglob("*"))
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("ZOMBIED_", "KUBE"))
    }
    env |= {"PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)}

    def run(*argv: str) -> str:
        result = subprocess.run(
            argv, capture_output=True, text=True, check=False, cwd=tmp_path, env=env, timeout=60
        )
        assert result.returncode == 0, f"{' '.join(argv)}: {result.stderr}"
        return result.stdout

    assert project_version() in run(str(script), "version")
    assert run(str(script), "--help").strip()
    assert run(str(script), "run", "--help").strip()
    # The code that ran is the wheel's, not the source tree's.
    origin = run(sys.executable, "-c", "import zombied.cli; print(zombied.cli.__file__)")
    assert Path(origin.strip()).is_relative_to(target)
    # Nothing was written next to the installed code (read-only root filesystem).
    assert sorted(p.relative_to(target) for p in target.rglob("*")) == before
