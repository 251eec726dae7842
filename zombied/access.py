"""Which API server zombied talks to and as whom: the pod's service account, or the
kubeconfig context chosen in the merged files (`zombied.kubeconfig`).

In a pod with a service account and no kubeconfig or context asked for, the in-cluster
settings are used. Otherwise kubernetes_asyncio's public loader reads the chosen
cluster (server, TLS material, ``proxy-url``) and the TLS half of its user; the
credentials are `zombied.credentials`'s, so that they can be refreshed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kubernetes_asyncio import client, config
from kubernetes_asyncio.config.config_exception import ConfigException

from zombied.credentials import CredentialError, Source, TokenFile, source_for_user
from zombied.errors import KubeconfigError
from zombied.kubeconfig import choose, kubeconfig_files, merge, read
from zombied.kubectl import SERVICE_ACCOUNT_DIR

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
    chosen, cluster, user = choose(merge(read(where, paths)), context, where)
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
