"""Pods as real kubelets left them: the recorded corpus, one file per release.

zombied's node tests run real kubelets (graceful node shutdown, a node that returns
under the same name, evictions) and record every pod they care about, by *role* (the
kind of pod and what happened to it), as the kubelet wrote it: ``recorded/<release>.json``.
Names, uids and resourceVersions are made stable; times keep their distances but start
at `EPOCH` (the moment the spot node was told to shut down). The simulated kubelet and
zombied's unit tests replay these pods, so neither can drift from what a kubelet does.
Never edit the files by hand: the node tests rewrite them (``ZOMBIED_RECORD_KUBELETS=1``)
and fail when a kubelet writes something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Final

#: The releases recorded, oldest first.
RELEASES: Final = ("v1.20.2", "v1.37.2")
#: Where every recorded time starts: the shutdown's announcement.
EPOCH: Final = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RecordedPod:
    """One pod a real kubelet wrote, and what happened to it."""

    #: Stable key: ``graceful``, ``late``, ``cpu-second``...
    role: str
    #: The part of the story: ``graceful node shutdown``, ``node lost, back with less CPU``...
    scenario: str
    #: What kind of pod it is, in words.
    description: str
    #: What zombied decided: the rule that selected it, or the veto (``no-rule``...).
    verdict: str
    #: Who deleted it (``zombied``, ``statefulset-controller``...); None: nobody.
    deleted_by: str | None
    #: The object as the API served it last before it was deleted (or at the end).
    pod: dict[str, Any]

    @property
    def zombie(self) -> bool:
        return self.verdict in ("node-shutdown", "admission-rejected")


def path(release: str) -> Any:
    """The corpus file of ``release`` (a `Traversable`)."""
    return resources.files("kubesim") / "recorded" / f"{release}.json"


def recorded(release: str) -> tuple[RecordedPod, ...]:
    """Every pod recorded on ``release``'s kubelet, in the order of the story."""
    document = json.loads(path(release).read_text())
    return tuple(
        RecordedPod(
            role=entry["role"],
            scenario=entry["scenario"],
            description=entry["description"],
            verdict=entry["verdict"],
            deleted_by=entry["deletedBy"],
            pod=entry["pod"],
        )
        for entry in document["pods"]
    )
