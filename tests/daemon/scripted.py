"""A pods API that plays scripted watch streams, at `Kube`'s boundary, on loop time.

For what no simulator sends: silent or hostile streams, bookmarks on a schedule, ERROR
events. The LIST answers at once with the pods the streams have sent so far; each WATCH
plays the next script (the last one again). A script step is a line to send (bytes; b""
ends the watch), a pod (sent as ADDED), `HANG` (silence for good) or an `ApiError` to
fail with, or ``(seconds, step)`` to wait that long on loop time first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from zombied.cache import PodCache
from zombied.kube import ApiError, Request
from zombied.watch import Scope, Watcher

HANG = object()


def event(kind: str, obj: object) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def bookmark(rv: int) -> bytes:
    return event("BOOKMARK", {"metadata": {"resourceVersion": str(rv)}})


class ScriptedApi:
    def __init__(self, *watches: list[Any]) -> None:
        self.watches = list(watches)
        #: Loop time and query of each WATCH.
        self.opened: list[tuple[float, dict[str, str | int]]] = []
        self.lists = 0
        self.listed: dict[str, Any] = {}
        self.resource_version = "1"

    async def request(self, request: Request, **_options: Any) -> Any:
        self.lists += 1
        items = list(self.listed.values())
        return {"metadata": {"resourceVersion": self.resource_version}, "items": items}

    @asynccontextmanager
    async def stream(
        self,
        request: Request,
        *,
        query: Any,
        timeout: float,  # noqa: ASYNC109 - the signature of Kube.stream
    ) -> AsyncIterator[Any]:
        script = iter(self.watches[min(len(self.opened), len(self.watches) - 1)])
        self.opened.append((anyio.current_time(), dict(query)))
        api = self

        class Lines:
            async def readline(self) -> bytes:
                step = next(script, b"")
                wait, then = step if isinstance(step, tuple) else (0.0, step)
                await anyio.sleep(wait)
                if then is HANG:
                    await anyio.sleep_forever()
                if isinstance(then, ApiError):
                    raise then
                if isinstance(then, dict):
                    api.listed[then["metadata"]["name"]] = then
                    api.resource_version = then["metadata"]["resourceVersion"]
                    return event("ADDED", then)
                assert isinstance(then, bytes)
                return then

        yield Lines()


@asynccontextmanager
async def scripted(api: ScriptedApi, cache: PodCache, **options: Any) -> AsyncIterator[Watcher]:
    """The real `Watcher` of every namespace on ``api``, filling ``cache``."""
    watcher = Watcher(api, Scope(None), cache, **options)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await tg.start(watcher.run)
        yield watcher
        tg.cancel_scope.cancel()
