"""The simulated API server's request log: what was asked, by whom, at what cost.

This module owns :class:`RequestLog`, a bounded list of :class:`RequestRecord`
plus exact counters by (verb, resource) that survive the bound, so a benchmark
can count API calls over a long run. It records; it never decides anything.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, overload


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One served request; ``verb`` as Kubernetes names it (get, list, watch, ...)."""

    verb: str
    resource: str
    namespace: str
    name: str
    path: str
    query: str
    status: int
    bytes: int
    duration: float
    user: str
    time: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RequestLog:
    """Recent requests (at most ``maxlen``) and exact totals since the start."""

    def __init__(self, maxlen: int = 100_000) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=maxlen)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.bytes: Counter[tuple[str, str]] = Counter()
        self.statuses: Counter[tuple[str, str, int]] = Counter()
        self.total = 0

    def add(self, record: RequestRecord) -> None:
        self._records.append(record)
        key = (record.verb, record.resource)
        self.counts[key] += 1
        self.bytes[key] += record.bytes
        self.statuses[(record.verb, record.resource, record.status)] += 1
        self.total += 1

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        """Exact number of requests matching ``verb`` and ``resource`` (None: any)."""
        return sum(
            n
            for (v, r), n in self.counts.items()
            if (verb is None or v == verb) and (resource is None or r == resource)
        )

    def filter(
        self, verb: str | None = None, resource: str | None = None, status: int | None = None
    ) -> list[RequestRecord]:
        """Recent records matching every given attribute."""
        return [
            r
            for r in self._records
            if (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (status is None or r.status == status)
        ]

    def summary(self) -> dict[str, Any]:
        """Counts and bytes by ``verb resource``, as the control API serves them."""
        return {
            "total": self.total,
            "counts": {f"{v} {r}": n for (v, r), n in sorted(self.counts.items())},
            "bytes": {f"{v} {r}": n for (v, r), n in sorted(self.bytes.items())},
            "statuses": {f"{v} {r} {s}": n for (v, r, s), n in sorted(self.statuses.items())},
        }

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(list(self._records))

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...
    def __getitem__(self, index: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(index, slice):
            return list(self._records)[index]
        return self._records[index]
