"""Configurations for running the daemon in-process against the simulator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from zombied.config import Config, load_config
from zombied.rules import Rule, RuleSet, Selection

ConfigFactory = Callable[..., Config]


def make_config(kubeconfig_path: Path, command: str = "run", **changes: Any) -> Config:
    """A configuration for tests: min age 0, ephemeral port, short watches and drains."""
    base = load_config(command, ["--kubeconfig", str(kubeconfig_path)], {})
    settings: dict[str, Any] = {
        "rules": RuleSet((Rule("node-shutdown", 0.0),)),
        "listen_host": "127.0.0.1",
        "listen_port": 0,
        "qps": 500.0,
        "burst": 100,
        "watch_timeout_min": 5.0,
        "watch_timeout_max": 8.0,
        "drain_timeout": 10.0,
    }
    settings.update(changes)
    # The selection is part of the rules, as the configuration builds them.
    settings["rules"] = replace(
        settings["rules"],
        scope=Selection(
            settings.get("namespaces", ()),
            settings.get("exclude_namespaces", ()),
            settings.get("label_selector", ""),
        ),
    )
    return replace(base, **settings)


@pytest.fixture
def config(kubeconfig: Path) -> ConfigFactory:
    """``config(**changes)``: a test configuration for the ``sim`` fixture's cluster."""

    def factory(**changes: Any) -> Config:
        return make_config(kubeconfig, **changes)

    return factory
