"""The daemon and its watch in-process against an API server: configurations, logs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs
from structlog.typing import EventDict
from zombied.cache import PodCache
from zombied.config import Config, load_config
from zombied.kube import open_kube
from zombied.rules import Rule, RuleSet
from zombied.watch import Scope, Watcher

ConfigFactory = Callable[..., Any]


@contextmanager
def captured_logs() -> Iterator[list[EventDict]]:
    """Like ``capture_logs``, but per-pod fields bound with contextvars are included."""
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as entries:
        yield entries


def make_config(kubeconfig_path: Path, command: str = "run", **changes: Any) -> Config:
    """A configuration of ``command`` for tests: min age 0, ephemeral port, short watches
    and drains; ``changes`` set any field."""
    argv = ["--kubeconfig", str(kubeconfig_path)]
    base = load_config(command, ["default/pod", *argv] if command == "explain" else argv, {})
    settings: dict[str, Any] = {
        "rules": RuleSet((Rule("node-shutdown", 0.0),)),
        "listen": ("127.0.0.1", 0),
        "qps": 500.0,
        "burst": 100,
        "watch_timeout": 4.0,
        "drain_timeout": 10.0,
    }
    # Made as load_config makes it: the rules select the pods the fields name.
    return Config.model_construct(**{**dict(base), **settings, **changes})


@pytest.fixture
def config(kubeconfig: Path) -> ConfigFactory:
    """``config(**changes)``: a test configuration for the ``sim`` fixture's cluster."""

    def factory(**changes: Any) -> Any:
        return make_config(kubeconfig, **changes)

    return factory


@asynccontextmanager
async def watching(
    kubeconfig: Path, cache: PodCache, scope: Scope | None = None, **options: Any
) -> AsyncIterator[Watcher]:
    """The real `Watcher` of ``scope`` (every namespace) filling ``cache`` until the block
    ends; ``pool_size`` goes to the client, every other option to the watcher."""
    client = {"pool_size": options.pop("pool_size")} if "pool_size" in options else {}
    async with open_kube(str(kubeconfig), **client) as kube:
        watcher = Watcher(kube, scope or Scope(None), cache, **options)
        async with anyio.create_task_group() as tg:
            await tg.start(watcher.run)
            yield watcher
            tg.cancel_scope.cancel()
