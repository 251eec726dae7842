"""The container image: the Dockerfile linted, and the image it builds checked.

hadolint lints the Dockerfile. ``tests/ship/build-image.sh`` builds the image from it as
a user's builder does (buildah, on a Python base assembled from Debian's packages: no
registry is reachable here) into a Docker image archive, and the tests read what users
get from that archive: the image's configuration, and every file of every layer. The
layers zombied adds to its base are the ones the base archive does not have.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import dockerfile
import pytest

from .manifests import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HADOLINT = Path(sysconfig.get_path("scripts")) / "hadolint"
BUILD = ROOT / "tests" / "ship" / "build-image.sh"
#: Set by `make test`: the image is built, not skipped, when its tools are missing.
REQUIRE_ENV = "ZOMBIED_REQUIRE_REAL_APISERVER"
#: A compiler's files: the driver (gcc, x86_64-linux-gnu-gcc-12) and its back end.
COMPILER = re.compile(r"(?:[\w.-]+-)?(?:gcc|g\+\+|cc1|cc1plus|clang)(?:-[\d.]+)?")

# One process builds the image (or finds it cached) for all of these tests.
pytestmark = pytest.mark.xdist_group("image")


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


@pytest.fixture(scope="module")
def instructions() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(DOCKERFILE)))


def test_hadolint_finds_nothing() -> None:
    # .hadolint.yaml: every finding fails, the OCI labels are required.
    config = ["--config", str(ROOT / ".hadolint.yaml"), "--format", "json"]
    result = subprocess.run(
        [str(HADOLINT), *config, str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout or "[]") == []


def test_default_base_is_a_pinned_slim_python_and_the_default_version_current(
    instructions: list[dockerfile.Command],
) -> None:
    # What users build on unless they pass PYTHON_BASE; the tests build on another base.
    args = dict(
        value.split("=", 1)
        for c in instructions
        if c.cmd == "ARG"
        for value in c.value
        if "=" in value
    )
    image, _, tag = args["PYTHON_BASE"].partition(":")
    assert image in ("python", "docker.io/library/python"), args["PYTHON_BASE"]
    # A full patch version and the slim variant, never a floating tag.
    assert tag.split("-")[0].count(".") == 2, f"pin the base image: {args['PYTHON_BASE']}"
    assert "-slim" in tag, f"use the slim variant: {args['PYTHON_BASE']}"
    assert [c.value[0] for c in instructions if c.cmd == "FROM"] == ["${PYTHON_BASE}"] * 2
    # `make image` passes the version; a plain `docker build` takes the default.
    assert args["VERSION"] == project_version()


def test_dockerignore_admits_exactly_what_the_build_copies(
    instructions: list[dockerfile.Command],
) -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "start from an empty context and admit files one by one"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for copy in instructions
        if copy.cmd == "COPY" and not any(flag.startswith("--from=") for flag in copy.flags)
        for source in copy.value[:-1]
    }
    mounted = {
        part.split("=", 1)[1]
        for run in instructions
        if run.cmd == "RUN"
        for flag in run.flags
        if flag.startswith("--mount=") and "from=" not in flag
        for part in flag.removeprefix("--mount=").split(",")
        if part.startswith("source=")
    }
    assert copied | mounted <= admitted
    # pyproject.toml names README.md as the long description: the build needs it.
    assert {"pyproject.toml", "README.md", "zombied", "constraints.txt"} <= admitted


def _stub(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n", encoding="utf-8")
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("tools", "builder"),
    [
        ({"docker": "exit 0", "buildah": "exit 0"}, "docker build"),
        ({"docker": '[ "$1" = info ] && exit 1 || exit 0', "buildah": "exit 0"}, "buildah bud"),
        ({"docker": '[ "$1" = info ] && exit 1 || exit 0'}, None),
        ({}, None),
    ],
    ids=["docker-engine", "docker-without-engine-and-buildah", "docker-without-engine", "none"],
)
def test_make_image_builds_with_what_the_machine_has(
    tmp_path: Path, tools: dict[str, str], builder: str | None
) -> None:
    # PATH holds only the stand-ins (each logs its arguments) and what make itself needs.
    log = tmp_path / "calls"
    for name, script in tools.items():
        _stub(tmp_path, name, f'echo "{name} $*" >>{log}\n{script}')
    sed = shutil.which("sed")
    assert sed is not None
    (tmp_path / "sed").symlink_to(sed)
    make = shutil.which("make")
    assert make is not None
    result = subprocess.run(
        [make, "-s", "-C", str(ROOT), "image", "IMAGE=registry.example.com/zombied"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(tmp_path), "PYTHON_BASE": "mirror.example.com/python:3.11"},
        timeout=60,
    )
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    builds = [call for call in calls if not call.endswith(" info")]
    if builder is None:
        assert result.returncode != 0
        assert not builds
        # One line of ours (make adds its own "Error 1" after it).
        line = result.stderr.splitlines()[0]
        assert "docker" in line.lower()
        assert "buildah" in line
        return
    assert result.returncode == 0, result.stderr
    assert builds == [
        f"{builder} --build-arg VERSION={project_version()} "
        "--build-arg PYTHON_BASE=mirror.example.com/python:3.11 "
        f"-t registry.example.com/zombied:{project_version()} ."
    ]


@dataclass(frozen=True)
class Layer:
    """One layer of the image archive: its tar in the archive, its size, its files."""

    member: str
    diff_id: str
    size: int
    files: dict[str, tarfile.TarInfo]


@dataclass(frozen=True)
class Image:
    """A Docker image archive (``docker save``, ``buildah push docker-archive:``)."""

    path: Path
    config: dict[str, Any]
    layers: list[Layer]

    @classmethod
    def read(cls, path: Path) -> Image:
        with tarfile.open(path) as archive:
            (manifest,) = json.load(_member(archive, "manifest.json"))
            config = json.load(_member(archive, manifest["Config"]))
            layers = []
            for name, diff_id in zip(manifest["Layers"], config["rootfs"]["diff_ids"], strict=True):
                with tarfile.open(fileobj=_member(archive, name)) as layer:
                    files = {_normal(info.name): info for info in layer.getmembers()}
                layers.append(Layer(name, diff_id, archive.getmember(name).size, files))
        return cls(path, config, layers)

    def read_file(self, layer: Layer, path: str) -> str:
        """A file of ``layer``, as text."""
        with (
            tarfile.open(self.path) as archive,
            tarfile.open(fileobj=_member(archive, layer.member)) as tar,
        ):
            return _member(tar, layer.files[path]).read().decode()


def _member(archive: tarfile.TarFile, name: str | tarfile.TarInfo) -> Any:
    """The file ``name`` of ``archive``, open for reading."""
    member = archive.extractfile(name)
    assert member is not None, name
    return member


def _normal(name: str) -> str:
    return str(PurePosixPath("/", name)).lstrip("/")


@dataclass(frozen=True)
class Built:
    """The image as the tests build it, its base, and the layers zombied adds."""

    image: Image
    base: Image
    own: list[Layer]

    def own_files(self) -> Iterator[tuple[Layer, str]]:
        for layer in self.own:
            for path in layer.files:
                yield layer, path


@pytest.fixture(scope="module")
def built() -> Built:
    missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed (make node-packages)"
        if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"the image is required ({REQUIRE_ENV}=1) but {reason}", pytrace=False)
        pytest.skip(f"cannot build the image: {reason}")
    # Cached by the hash of what the build reads: a no-op when already built.
    build = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, check=False, timeout=1800
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    where = subprocess.run(
        ["bash", str(BUILD), "--print"], capture_output=True, text=True, check=True
    )
    image = Image.read(Path(where.stdout.strip()) / "zombied.tar")
    # The base the build was given, by the label the Dockerfile sets from it.
    base_name = image.config["config"]["Labels"]["org.opencontainers.image.base.name"]
    base = Image.read(Path(base_name.removeprefix("docker-archive:")))
    base_ids = [layer.diff_id for layer in base.layers]
    assert [layer.diff_id for layer in image.layers[: len(base_ids)]] == base_ids
    return Built(image, base, image.layers[len(base_ids) :])


def test_runs_zombied_as_pid_1_as_a_numeric_non_root_user(built: Built) -> None:
    config = built.image.config["config"]
    # Numeric, as the manifests' runAsUser, so the kubelet can check runAsNonRoot.
    assert config["User"] == "65532:65532"
    # Exec form: zombied is PID 1 and gets SIGTERM itself, no shell in between.
    assert (config["Entrypoint"], config["Cmd"]) == (["zombied"], ["run"])
    assert config["ExposedPorts"] == {"8080/tcp": {}}
    # Nothing is written at run time: the root filesystem is read-only.
    env = dict(item.split("=", 1) for item in config["Env"])
    assert (env["PYTHONDONTWRITEBYTECODE"], env["PYTHONUNBUFFERED"]) == ("1", "1")
    assert not config.get("Volumes")


def test_oci_labels(built: Built) -> None:
    labels = built.image.config["config"]["Labels"]
    assert labels["org.opencontainers.image.title"] == "zombied"
    assert labels["org.opencontainers.image.version"] == project_version()
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.description"]


def test_no_layer_holds_a_pip_cache_a_compiler_or_the_build_inputs(built: Built) -> None:
    found = [
        path
        for layer in built.image.layers
        for path, info in layer.files.items()
        if "/.cache/pip" in f"/{path}"
        or (not info.isdir() and COMPILER.fullmatch(PurePosixPath(path).name))
        or path.endswith(".whl")
        or PurePosixPath(path).name == "constraints.txt"
    ]
    assert not found


def test_zombied_adds_its_package_and_console_scripts_and_nothing_of_the_tests(
    built: Built,
) -> None:
    paths = [path for _, path in built.own_files()]
    packages = {
        match.group(1)
        for path in paths
        if (
            match := re.match(
                r"usr/(?:local/)?lib/python3[.\d]*/(?:site|dist)-packages/([^/]+)/", path
            )
        )
    }
    assert "zombied" in packages
    assert not packages & {"tests", "bench", "kubesim"}
    assert not [path for path in paths if "kubesim" in path]
    # Compiled at install time: nothing needs writing when it starts.
    assert [p for p in paths if re.search(r"/zombied/__pycache__/cli\.cpython-3\d+\.pyc$", p)]
    assert {"usr/local/bin/zombied", "usr/local/bin/kubectl-zombies"} <= set(paths)
    (layer, entry_points) = next(
        (layer, path)
        for layer, path in built.own_files()
        if re.search(r"/zombied-[^/]+\.dist-info/entry_points\.txt$", path)
    )
    assert "zombied = zombied.cli:main" in built.image.read_file(layer, entry_points)
    # For whoever reads the test output (pytest -s): what users pull.
    mib = 1024 * 1024
    total = sum(layer.size for layer in built.image.layers)
    own = sum(layer.size for layer in built.own)
    print(
        f"\nimage: {total / mib:.0f} MiB uncompressed, of which zombied's "
        f"{len(built.own)} layer(s) {own / mib:.1f} MiB on a {(total - own) / mib:.0f} MiB base"
    )
