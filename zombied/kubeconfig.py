"""Which API server zombied talks to and as whom: the pod's service account, or the
kubeconfig files, merged as kubectl merges them.

In a pod with a service account and no kubeconfig asked for, the in-cluster settings
are used. Otherwise ``--kubeconfig`` names one file, or ``$KUBECONFIG`` lists several
(missing ones skipped), or ``~/.kube/config`` is read. Several files merge as in
kubectl: the first file to name a cluster, user or context wins it, the first to set
``current-context`` sets it, and each relative path is read from the directory of the
file that holds it. kubernetes_asyncio's public loader then reads the chosen cluster
(server, TLS material, ``proxy-url``); the credentials are `zombied.credentials`'s, so
that they can be refreshed. Every error is one line naming where to look: ``--kubeconfig``,
``$KUBECONFIG`` or ``--context``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config.config_exception import ConfigException

from zombied.credentials import CredentialError, Source, TokenFile, source_for_user
from zombied.errors import KubeconfigError

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")

_NAMED: Final = ("clusters", "users", "contexts")
#: The path fields of each named entry, relative to the file that holds them (client-go's
#: ResolvePaths).
_PATHS: Final = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
    "contexts": (),
}
#: The user fields kubernetes_asyncio reads for TLS; the rest is credentials, ours.
_TLS_USER_FIELDS: Final = (
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
)


@dataclass(frozen=True, slots=True)
class Cluster:
    """How to reach the API server: its URL and TLS settings, and a proxy if named."""

    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_name: str | None = None
    proxy: str | None = None


@dataclass(frozen=True, slots=True)
class Access:
    """The cluster to talk to, where the credentials come from, and what to call the
    place they were read from in an error (``--kubeconfig``, ``$KUBECONFIG``)."""

    cluster: Cluster
    credentials: Source
    where: str


def in_cluster() -> bool:
    """True when running in a pod with a service account token mounted."""
    return "KUBERNETES_SERVICE_HOST" in os.environ and (SERVICE_ACCOUNT_DIR / "token").exists()


def own_namespace() -> str | None:
    """The namespace of the pod we run in, from the service account, if any."""
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def kubeconfig_files(explicit: str | None, environ: Mapping[str, str]) -> tuple[str, list[Path]]:
    """The files to merge, and the name an error gives them: ``--kubeconfig`` for an
    explicit or the default file, ``$KUBECONFIG`` for the files it lists."""
    if explicit:
        return "--kubeconfig", [Path(explicit).expanduser()]
    listed = [Path(part).expanduser() for part in environ.get("KUBECONFIG", "").split(os.pathsep)]
    listed = [path for path in listed if str(path) not in ("", ".")]
    if listed:
        return "$KUBECONFIG", listed
    return "--kubeconfig", [Path("~/.kube/config").expanduser()]


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


def _read(where: str, paths: Sequence[Path]) -> list[tuple[Path, Mapping[str, Any]]]:
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
    if not documents:
        listed = ", ".join(str(path) for path in paths)
        raise KubeconfigError(f"{where}: none of its files exists ({listed})")
    return documents


def _named(merged: Mapping[str, Any], section: str, name: str) -> Mapping[str, Any] | None:
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
    body = _named(merged, "contexts", context)
    if body is None:
        raise KubeconfigError(f"{option}: no context named {context!r} in {where}; {there}")
    cluster = _named(merged, "clusters", str(body.get("cluster") or ""))
    if not cluster or not cluster.get("server"):
        raise KubeconfigError(
            f"{where}: context {context!r} names cluster {body.get('cluster')!r}, which it "
            "does not define with a server"
        )
    return context, cluster, _named(merged, "users", str(body.get("user") or "")) or {}


async def load_access(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str] = os.environ
) -> Access:
    """The cluster and credentials to use: in-cluster without ``kubeconfig`` and
    ``context`` when a service account is mounted, else the kubeconfig files."""
    configuration = client.Configuration()
    if kubeconfig is None and context is None and in_cluster():
        try:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration, try_refresh_token=False
            )
        except ConfigException as exc:
            raise KubeconfigError(f"in-cluster configuration: {exc}") from exc
        token = TokenFile(SERVICE_ACCOUNT_DIR / "token")
        return Access(_cluster(configuration), token, "in-cluster")
    where, paths = kubeconfig_files(kubeconfig, environ)
    chosen, cluster, user = choose(merge(_read(where, paths)), context, where)
    try:
        source = source_for_user(user)
    except CredentialError as exc:
        raise KubeconfigError(f"{where}: context {chosen!r}: {exc}") from None
    # kubernetes_asyncio reads the cluster and the TLS half of the user; no credentials.
    tls = {field: user[field] for field in _TLS_USER_FIELDS if field in user}
    document = {
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "user", "user": tls}],
        "contexts": [{"name": chosen, "context": {"cluster": "cluster", "user": "user"}}],
        "current-context": chosen,
    }
    try:
        await config.load_kube_config_from_dict(document, client_configuration=configuration)
    except (ConfigException, OSError, ValueError) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise KubeconfigError(f"{where}: context {chosen!r}: {detail}") from exc
    return Access(_cluster(configuration), source, where)


def _cluster(configuration: client.Configuration) -> Cluster:
    return Cluster(
        server=str(configuration.host).rstrip("/"),
        ca_file=configuration.ssl_ca_cert or None,
        cert_file=configuration.cert_file or None,
        key_file=configuration.key_file or None,
        verify=bool(configuration.verify_ssl),
        server_name=configuration.tls_server_name or None,
        proxy=configuration.proxy or None,
    )
