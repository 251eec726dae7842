"""``python -m tests.daemon.buggy_run run ...``: ``zombied`` with a bug in judging pods.

Judging a pod whose name starts with ``bug`` raises ``TypeError``, as a programming
error would; every other pod is classified as usual. Tests use it to check that zombied
treats a bug as a crash (traceback, non-zero exit), never as a failure to retry.
"""

from __future__ import annotations

import sys
from typing import Any

from zombied import cache, cli
from zombied.rules import judge as real_judge


def judge(pod: Any, *args: Any, **kwargs: Any) -> Any:
    if pod.name.startswith("bug"):
        raise TypeError("injected bug in classification")
    return real_judge(pod, *args, **kwargs)


if __name__ == "__main__":
    cache.judge = judge
    sys.exit(cli.main())
