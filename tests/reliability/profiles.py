"""Hypothesis budgets for the reliability suite: quick for ``make test``, deep for soaks.

``HYPOTHESIS_PROFILE`` picks one by name (``quick``, ``nightly``); without it a soak run
(``SOAK_S`` set, as ``make soak`` does) gets ``nightly`` and everything else ``quick``.
Profiles are applied per test with ``settings(parent=...)``, never loaded globally, so
the rest of the test suite keeps its own budgets.

A failure prints a ``@reproduce_failure`` blob (``print_blob``) that replays it. Locally,
failing examples are also saved in ``.hypothesis/`` and replayed first on the next run;
under CI (``CI`` set) nothing is saved, since the directory does not outlive the job:
the blob in the log is the reproduction (and hypothesis' own CI defaults derandomize,
so every CI run draws the same examples).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
#: Under CI no example database (see above); elsewhere hypothesis' directory database.
_DATABASE: dict[str, None] = {"database": None} if os.environ.get("CI") else {}

settings.register_profile(
    "quick",
    max_examples=20,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
    **_DATABASE,
)
settings.register_profile(
    "nightly",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
    **_DATABASE,
)


def profile_name() -> str:
    """The profile this run uses."""
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if name:
        return name
    return "nightly" if os.environ.get("SOAK_S") else "quick"


def budget(*, fuzz: bool = False) -> settings:
    """Settings for a test; ``fuzz`` tests are pure and cheap, so they get 10x more examples."""
    base = settings.get_profile(profile_name())
    if fuzz:
        return settings(base, max_examples=base.max_examples * 10)
    return base
