"""Container images made here: no registry is reachable.

Each image is one layer, written as a Docker image archive (``docker save``'s format),
which ``ctr images import`` and buildah's ``docker-archive:`` read. ``pause`` is the
release's own sandbox program (built with the release, see the build scripts);
``busybox`` is Debian's busybox-static with a link per applet, for the workloads; a
root filesystem tar (the Python base of zombied's image, see tests/ship/build-image.sh)
becomes an image with ``python -m tests.nodes.images ROOTFS.tar NAME:TAG OUT.tar``.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import IO, Any

BUSYBOX = "/usr/bin/busybox"


def _layer(files: dict[str, Path], links: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(name).parent) for name in [*files, *links]} - {"."})
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, source in sorted(files.items()):
            data = source.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in sorted(links.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buffer.getvalue()


def _archive(path: Path, ref: str, layer: IO[bytes], size: int, config: dict[str, Any]) -> Path:
    digest = hashlib.sha256()
    for chunk in iter(lambda: layer.read(1 << 20), b""):
        digest.update(chunk)
    layer.seek(0)
    image = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest.hexdigest()]},
    }
    blob = json.dumps(image, sort_keys=True).encode()
    config_name = hashlib.sha256(blob).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": ["layer.tar"]}])
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("layer.tar")
        info.size = size
        tar.addfile(info, layer)
        for name, data in ((config_name, blob), ("manifest.json", manifest.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def write_archive(
    path: Path,
    ref: str,
    files: dict[str, Path],
    *,
    links: dict[str, str] | None = None,
    entrypoint: list[str],
) -> Path:
    """Write the one-layer image ``ref`` (``name:tag``) of ``files`` to ``path``."""
    layer = _layer(files, links or {})
    config = {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]}
    return _archive(path, ref, io.BytesIO(layer), len(layer), config)


def rootfs_archive(path: Path, ref: str, rootfs: Path) -> Path:
    """Write the image ``ref`` whose one layer is the root filesystem tar ``rootfs``."""
    config = {
        "Env": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG=C.UTF-8",
        ],
        "Cmd": ["python3"],
    }
    with rootfs.open("rb") as layer:
        return _archive(path, ref, layer, rootfs.stat().st_size, config)


def pause_image(directory: Path, pause: Path, ref: str) -> Path:
    """The sandbox image: the release's ``pause`` as ``/pause``."""
    return write_archive(directory / "pause.tar", ref, {"pause": pause}, entrypoint=["/pause"])


def busybox_image(directory: Path, ref: str) -> Path:
    """Debian's static busybox as ``/bin/busybox`` with a link for each of its applets."""
    applets = subprocess.run(
        [BUSYBOX, "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    links = {f"bin/{applet}": "busybox" for applet in applets if applet != "busybox"}
    return write_archive(
        directory / "busybox.tar",
        ref,
        {"bin/busybox": Path(BUSYBOX)},
        links=links,
        entrypoint=["/bin/sh"],
    )


if __name__ == "__main__":
    rootfs_archive(Path(sys.argv[3]), sys.argv[2], Path(sys.argv[1]))
