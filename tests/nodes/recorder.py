"""Every version of every pod of a namespace, as the API server streamed it.

A scenario needs what the kubelet wrote *before* zombied or a controller deleted the
pod, and when: a watch delivers each change in order, the last one (DELETED) carrying
the object as it was. The recorder keeps them all, keyed by uid, in a thread of its own
that resumes its watch where it stopped.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.realserver.cluster import RealCluster


@dataclass(frozen=True)
class Seen:
    """One watch event: its type, the monotonic time it arrived, the object."""

    type: str
    at: float
    pod: dict[str, Any]


@dataclass
class PodRecorder:
    cluster: RealCluster
    namespace: str
    history: dict[str, list[Seen]] = field(default_factory=lambda: defaultdict(list))
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> PodRecorder:
        status, body = self.cluster.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        if status != 200:
            raise RuntimeError(f"listing pods: {status} {body}")
        self._thread = threading.Thread(
            target=self._watch, args=(body["metadata"]["resourceVersion"],), daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _watch(self, version: str) -> None:
        context = ssl.create_default_context(cadata=self.cluster.ca_pem.decode())
        while not self._stop.is_set():
            url = (
                f"{self.cluster.url}/api/v1/namespaces/{self.namespace}/pods"
                f"?watch=1&resourceVersion={version}&timeoutSeconds=5"
            )
            request = urllib.request.Request(url)
            request.add_header("Authorization", f"Bearer {self.cluster.tokens['admin']}")
            try:
                with urllib.request.urlopen(request, timeout=30, context=context) as stream:
                    for line in stream:
                        event = json.loads(line)
                        obj = event["object"]
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            with self._lock:
                                self.history[obj["metadata"]["uid"]].append(
                                    Seen(event["type"], time.monotonic(), obj)
                                )
            except (urllib.error.URLError, OSError):
                if self._stop.wait(0.2):
                    return

    # ------------------------------------------------------------------ reading

    def pods(self) -> dict[str, list[Seen]]:
        """A copy of every pod's history, by uid."""
        with self._lock:
            return {uid: list(seen) for uid, seen in self.history.items()}

    def latest(self) -> list[dict[str, Any]]:
        """The last version of every pod still there."""
        return [seen[-1].pod for seen in self.pods().values() if seen[-1].type != "DELETED"]
