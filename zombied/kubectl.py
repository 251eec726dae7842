"""kubectl's conventions that zombied's reports follow: the namespace a command means.

Without ``-n``, kubectl works in the namespace of the kubeconfig context in use, merged
from every file of ``$KUBECONFIG`` as kubectl merges them, or, in a pod, in the pod's
own. It reads files, never the cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

#: The pod's own namespace, where kubectl reads it when it runs in a pod.
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def context_namespace(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str]
) -> str:
    """The namespace kubectl works in: in a pod (without --kubeconfig and --context, as
    zombied connects then) the pod's own; else the context's (by default the current one)
    in the kubeconfig files, merged as kubectl merges them; else ``default``."""
    if kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in environ:
        try:
            return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
        except OSError:
            pass
    listed = kubeconfig or environ.get("KUBECONFIG", "")
    home = [str(Path(environ["HOME"]) / ".kube" / "config")] if "HOME" in environ else []
    docs = (
        [_kubeconfig(path) for path in listed.split(os.pathsep) if path]
        if listed
        else [_kubeconfig(path) for path in home]
    )
    context = context or next(
        (str(d["current-context"]) for d in docs if d.get("current-context")), None
    )
    for entry in (entry for doc in docs for entry in doc.get("contexts") or ()):
        if isinstance(entry, dict) and entry.get("name") == context:
            settings = entry.get("context")
            return (
                str(settings.get("namespace") or "default")
                if isinstance(settings, dict)
                else "default"
            )
    return "default"


def _kubeconfig(path: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}  # zombied reports a broken kubeconfig when it connects, in its own words
    return loaded if isinstance(loaded, dict) else {}
