"""kubectl's conventions that zombied's reports follow: the namespace a command means.

Without ``-n``, kubectl works in the namespace of the kubeconfig context in use, merged
from every file of ``$KUBECONFIG`` as kubectl merges them, or, in a pod, in the pod's
own. It reads files, never the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from zombied.kubeconfig import kubeconfig_files, merge, named

#: Where a pod's service account is mounted: its token, and the pod's own namespace.
SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def own_namespace() -> str | None:
    """The namespace of the pod we run in, from the service account, if any."""
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def context_namespace(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str]
) -> str:
    """The namespace kubectl works in: in a pod (without --kubeconfig and --context, as
    zombied connects then) the pod's own; else the context's (by default the current one)
    in the kubeconfig files, merged as kubectl merges them; else ``default``."""
    if kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in environ:
        namespace = own_namespace()
        if namespace is not None:
            return namespace
    _, paths = kubeconfig_files(kubeconfig, environ)
    merged = merge([(path, _kubeconfig(path)) for path in paths])
    settings = named(merged, "contexts", context or merged.get("current-context") or "")
    return str((settings or {}).get("namespace") or "default")


def _kubeconfig(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}  # zombied reports a broken kubeconfig when it connects, in its own words
    return loaded if isinstance(loaded, dict) else {}
