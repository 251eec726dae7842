"""A real Prometheus server scraping zombied, for the monitoring test and picture.

This module owns finding Debian's Prometheus 2.42 (unpacked by ``make prometheus`` into
a cache directory, never installed), running it on a loopback port with a throw-away
data directory, scraping one job every second with alert rules loaded, and a small
client for its HTTP API. It never talks to anything but 127.0.0.1 and never starts a
system service.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from tests.helpers import LOOPBACK, Child, free_port, wait_for

from bench.procs import Http, Served


def prometheus_dir() -> Path:
    """Where ``make prometheus`` unpacks the package (``ZOMBIED_PROMETHEUS_DIR``)."""
    configured = os.environ.get("ZOMBIED_PROMETHEUS_DIR")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "zombied" / "prometheus-2.42"


def binary(name: str) -> Path | None:
    """``prometheus`` or ``promtool`` from the unpacked package, if it is there."""
    path = prometheus_dir() / "usr" / "bin" / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


class Prometheus(Served):
    """``prometheus`` scraping ``targets`` (job ``zombied``) every second, with
    ``rule_files``; started on entering, stopped on leaving."""

    def __init__(
        self, workdir: Path, targets: Sequence[str], *, rule_files: Sequence[Path]
    ) -> None:
        executable = binary("prometheus")
        if executable is None:
            raise FileNotFoundError(
                f"no Prometheus under {prometheus_dir()}: run `make prometheus` first"
            )
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path.resolve()) for path in rule_files],
            "scrape_configs": [
                {"job_name": "zombied", "static_configs": [{"targets": list(targets)}]}
            ],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.child = Child(
            "prometheus",
            [
                str(executable),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                "--log.level=warn",
            ],
            log_path=workdir / "prometheus.log",
        )
        self.http = Http(f"http://{LOOPBACK}:{self.port}", timeout=30.0)

    def __enter__(self) -> Prometheus:
        """Start the server without waiting: it takes seconds to scrape, use them."""
        self.child.__enter__()
        return self

    def wait_scraping(self, timeout: float = 60.0) -> None:
        """Wait until the server is ready and its scrape targets are active.

        Ready is not enough: the scrape manager applies its targets a few seconds later,
        and a scrape missed at the start would miss the first zombies.
        """

        def active() -> bool:
            if not self.child.alive():
                raise RuntimeError(f"prometheus exited:\n{self.child.tail()}")
            return self.http.ok("/-/ready") and bool(
                self.api("targets", state="active")["activeTargets"]
            )

        if not wait_for(active, timeout=timeout, interval=0.1):
            raise RuntimeError(f"prometheus does not scrape:\n{self.child.tail()}")

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a GET on ``/api/v1/<path>``; an error answer raises."""
        code, body = self.http.request("GET", f"/api/v1/{path}?{urllib.parse.urlencode(params)}")
        answer = json.loads(body) if body else {}
        if code != 200 or answer.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} {params}: HTTP {code}: {body[:500]!r}")
        return answer["data"]

    def query(self, expr: str, at: float | None = None) -> dict[str, Any]:
        """An instant query: ``{"resultType": ..., "result": [...]}``."""
        moment = {} if at is None else {"time": f"{at:.3f}"}
        return self.api("query", query=expr, **moment)

    def query_range(self, expr: str, start: float, end: float, step: float) -> dict[str, Any]:
        """A range query over ``[start, end]`` every ``step`` seconds."""
        return self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}"
        )

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its health and last error."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def scrapes(self) -> int:
        """How many scrapes of the job have been stored so far."""
        result = self.query("sum(count_over_time(up[1h]))")["result"]
        return int(float(result[0]["value"][1])) if result else 0
