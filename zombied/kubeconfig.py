"""kubectl's kubeconfig files: which ones, merged how, and the context chosen in them.

``--kubeconfig`` names one file, or ``$KUBECONFIG`` lists several (missing ones
skipped), or ``~/.kube/config`` is read. Several files merge as kubectl merges them: the
first file to name a cluster, user or context wins it, the first to set
``current-context`` sets it, and each relative path is read from the directory of the
file that holds it. Every front end that reads a kubeconfig (the connection, the
namespace a report defaults to) merges it here. Errors are one line naming where to
look: ``--kubeconfig``, ``$KUBECONFIG`` or ``--context``. It never connects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from zombied.errors import KubeconfigError

_NAMED: Final = ("clusters", "users", "contexts")
#: The path fields of each named entry, relative to the file that holds them (client-go's
#: ResolvePaths).
_PATHS: Final = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
    "contexts": (),
}


def kubeconfig_files(explicit: str | None, environ: Mapping[str, str]) -> tuple[str, list[Path]]:
    """The files to merge, and the name an error gives them: ``--kubeconfig`` for an
    explicit or the default file, ``$KUBECONFIG`` for the files it lists."""
    if explicit:
        return "--kubeconfig", [Path(explicit).expanduser()]
    listed = [Path(part).expanduser() for part in environ.get("KUBECONFIG", "").split(os.pathsep)]
    listed = [path for path in listed if str(path) not in ("", ".")]
    if listed:
        return "$KUBECONFIG", listed
    home = environ.get("HOME")
    return "--kubeconfig", [Path(home) / ".kube" / "config"] if home else []


def merge(documents: Sequence[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """One kubeconfig from several, as kubectl merges them: for each cluster, user and
    context name the first file's entry, the first ``current-context`` set; relative
    paths made absolute against the directory of their file."""
    merged: dict[str, Any] = {name: [] for name in _NAMED}
    seen: dict[str, set[str]] = {name: set() for name in _NAMED}
    for path, document in documents:
        for section in _NAMED:
            for entry in document.get(section) or ():
                if not isinstance(entry, Mapping) or entry.get("name") in seen[section]:
                    continue
                seen[section].add(str(entry.get("name")))
                merged[section].append(_resolved(section, entry, path.parent))
        if not merged.get("current-context") and document.get("current-context"):
            merged["current-context"] = str(document["current-context"])
    return merged


def _resolved(section: str, entry: Mapping[str, Any], base: Path) -> dict[str, Any]:
    key = section[:-1]  # the entry's body: "cluster", "user", "context"
    body = dict(entry.get(key) or {})
    for name in _PATHS[section]:
        if body.get(name):
            body[name] = str(base / Path(str(body[name])).expanduser())
    plugin = body.get("exec")
    # As client-go: an exec command with a path separator is a path, else found on PATH.
    if isinstance(plugin, Mapping) and os.sep in str(plugin.get("command") or ""):
        body["exec"] = {**plugin, "command": str(base / str(plugin["command"]))}
    return {**entry, key: body}


def read(where: str, paths: Sequence[Path]) -> list[tuple[Path, Mapping[str, Any]]]:
    """Each existing file's document; none existing, or one unreadable, is an error."""
    documents: list[tuple[Path, Mapping[str, Any]]] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            if where == "--kubeconfig":
                raise KubeconfigError(f"--kubeconfig: no kubeconfig file at {path}") from None
            continue  # kubectl skips the files $KUBECONFIG lists that do not exist
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeconfigError(f"{where}: cannot read {path}: {exc}") from exc
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise KubeconfigError(f"{where}: {path} is not YAML: {exc}") from exc
        if document is not None and not isinstance(document, Mapping):
            raise KubeconfigError(f"{where}: {path} is not a kubeconfig (not a mapping)")
        documents.append((path, document or {}))
    if not paths:
        raise KubeconfigError("--kubeconfig: no kubeconfig file named, and no $HOME to look in")
    if not documents:
        listed = ", ".join(str(path) for path in paths)
        raise KubeconfigError(f"{where}: none of its files exists ({listed})")
    return documents


def named(merged: Mapping[str, Any], section: str, name: str) -> Mapping[str, Any] | None:
    """The body of the entry of ``section`` called ``name``; None if there is none."""
    for entry in merged[section]:
        if entry.get("name") == name:
            body = entry.get(section[:-1])
            return body if isinstance(body, Mapping) else {}
    return None


def choose(
    merged: Mapping[str, Any], context: str | None, where: str
) -> tuple[str, Mapping[str, Any], Mapping[str, Any]]:
    """The context to use, its cluster and its user (none: anonymous); `KubeconfigError`
    naming the contexts there are when ``context`` is not one of them or none is set."""
    names = [str(entry.get("name")) for entry in merged["contexts"]]
    there = f"the contexts are: {', '.join(names)}" if names else "it defines no context"
    option = "--context" if context is not None else where
    context = context if context is not None else merged.get("current-context")
    if not context:
        raise KubeconfigError(
            f"{where}: no current-context is set; choose one with --context ({there})"
        )
    body = named(merged, "contexts", context)
    if body is None:
        raise KubeconfigError(f"{option}: no context named {context!r} in {where}; {there}")
    cluster = named(merged, "clusters", str(body.get("cluster") or ""))
    if not cluster or not cluster.get("server"):
        raise KubeconfigError(
            f"{where}: context {context!r} names cluster {body.get('cluster')!r}, which it "
            "does not define with a server"
        )
    return context, cluster, named(merged, "users", str(body.get("user") or "")) or {}
