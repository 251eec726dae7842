"""Container images for the test nodes, made here: no registry is reachable.

Each image is one layer of files from this machine, written as a Docker image archive
(``docker save``'s format), which ``ctr images import`` reads. ``pause`` is the
release's own sandbox program (built with the release, see the build scripts);
``busybox`` is Debian's busybox-static with a link per applet, for the workloads.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

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


def write_archive(
    path: Path,
    ref: str,
    files: dict[str, Path],
    *,
    links: dict[str, str] | None = None,
    entrypoint: list[str],
) -> Path:
    """Write the one-layer image ``ref`` (``name:tag``) to ``path``."""
    layer = _layer(files, links or {})
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        },
        sort_keys=True,
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": ["layer.tar"]}]
    with tarfile.open(path, "w") as tar:
        for name, data in (
            ("layer.tar", layer),
            (config_name, config),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


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
