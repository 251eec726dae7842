"""The kube-apiserver versions the simulator imitates, and how they differ.

This module owns one :class:`Version` per imitated server: kube-apiserver v1.20.2
(``"1.20"``, the oldest a controller must survive) and v1.37.2 (``"current"``). It
lists only differences a controller can observe — status codes of refused requests,
streaming lists, field labels, ``/version`` — so that the request handlers ask
"what does this server do?" in one place instead of comparing version strings. What
both versions do alike lives with the handlers, not here. It holds values only.
"""

from __future__ import annotations

from dataclasses import dataclass

JSONDict = dict[str, object]


@dataclass(frozen=True, slots=True)
class Version:
    """The behaviour of one kube-apiserver version, where it differs from the other."""

    #: The name ``Simulator(imitate=...)`` and ``--imitate`` take.
    name: str
    git_version: str
    #: A LIST with an unparsable resourceVersion: 500 without a reason on 1.20 (its
    #: watch cache fails to parse it), 400 BadRequest later. WATCH says 500 on both.
    bad_list_rv_status: int
    #: A DELETE body that does not decode as DeleteOptions: 500 without a reason on
    #: 1.20, 400 BadRequest later.
    undecodable_delete_status: int
    #: Streaming lists (WatchList): a watch with ``sendInitialEvents`` and
    #: ``resourceVersionMatch=NotOlderThan`` is served. Without it ``sendInitialEvents``
    #: is an unknown parameter, ignored, and any ``resourceVersionMatch`` on a watch
    #: is refused with 422.
    watch_list: bool
    #: An Exact LIST beyond the present waits for the version like any other list and
    #: answers 504; 1.20 reads it from etcd, which refuses a future revision (500).
    exact_list_waits: bool
    #: Pod field labels this version refuses in ``fieldSelector`` (400) that newer ones accept.
    unsupported_pod_fields: frozenset[str]

    def version_info(self) -> JSONDict:
        """The ``/version`` document."""
        major, minor, _ = self.git_version.removeprefix("v").split(".", 2)
        return {
            "major": major,
            "minor": minor,
            "gitVersion": self.git_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.22.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }


V1_20 = Version(
    name="1.20",
    git_version="v1.20.2",
    bad_list_rv_status=500,
    undecodable_delete_status=500,
    watch_list=False,
    exact_list_waits=False,
    unsupported_pod_fields=frozenset({"spec.hostNetwork"}),
)

CURRENT = Version(
    name="current",
    git_version="v1.37.2",
    bad_list_rv_status=400,
    undecodable_delete_status=400,
    watch_list=True,
    exact_list_waits=True,
    unsupported_pod_fields=frozenset(),
)

VERSIONS = {version.name: version for version in (V1_20, CURRENT)}


def imitated(name: str) -> Version:
    """The version called ``name``; ValueError naming the choices otherwise."""
    try:
        return VERSIONS[name]
    except KeyError:
        choices = ", ".join(repr(n) for n in VERSIONS)
        raise ValueError(f"imitate: unknown version {name!r} (choose {choices})") from None
