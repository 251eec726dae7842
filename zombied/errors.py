"""The failures a user must act on, one exception type each.

Every message is written for the operator who reads it: it names the option, the
object or the RBAC rule at fault and says what to change. Internal bugs are not
modelled here; they stay ordinary exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ZombiedError(Exception):
    """Base of every error zombied reports to its user."""


class Source(StrEnum):
    """Where a configuration value came from."""

    FLAG = "flag"
    ENV = "env"
    FILE = "file"


@dataclass(eq=False)
class ConfigError(ZombiedError):
    """Invalid configuration: start-up stops with exit code 2 and this one line.

    A structured value: the ``option`` at fault (``--qps``, or in the file its key, like
    ``rules[0].minAge``), its ``source``, ``where`` that source is (the environment
    variable or the file), the ``line`` in the file when known, and the ``problem``.
    Without a source, ``problem`` is the whole line: ``--qps: must be > 0, got -1``.
    """

    problem: str
    option: str | None = None
    source: Source | None = None
    where: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        parts = [f"--config {self.where}"] if self.source is Source.FILE else []
        parts += [f"line {self.line}"] if self.line is not None else []
        if self.option is not None:
            env = f" (from {self.where})" if self.source is Source.ENV else ""
            parts.append(self.option + env)
        return ": ".join([*parts, self.problem])


class KubeconfigError(ConfigError):
    """The cluster credentials could not be loaded (missing or broken kubeconfig)."""


class ListenError(ConfigError):
    """The ``--listen`` address cannot be served (taken, not local, or not allowed).

    A configuration problem as far as the operator is concerned: the fix is another
    ``--listen`` or stopping whatever holds the address, so it exits 2 like one.
    """
