"""The ``zombied`` command line: ``run``, ``scan``, ``explain`` and ``version``.

This module owns the process boundary: it picks the sub-command, turns arguments and
environment into the command's configuration (through :mod:`zombied.config`, the
single table of options), sets up logging and runs the event loop. Every configuration problem, a
broken kubeconfig included, ends as one line ``zombied: error: <message>`` on stderr
and exit code 2, never a traceback. It must never contain controller logic.

Exit codes: 0 success (``run`` after a clean drain on SIGTERM/SIGINT; ``explain`` read
and explained the pod, whatever the verdict), 1 ``scan`` could not list pods (one line
naming the cause, e.g. the missing RBAC rule), ``scan --delete`` had at least one
failed delete, or ``explain`` could not read the pod (not found included), 2 invalid
configuration or usage, a broken kubeconfig, or a ``--listen`` address ``run`` cannot
listen on (taken by another process, most often: the fix is another ``--listen``),
128 + signal number (143 for SIGTERM, 130 for SIGINT) when a second signal interrupts
the drain, 130 for a Ctrl-C before a command handles signals itself (while it starts)
and for one that interrupts ``scan``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from zombied.errors import ConfigError, ZombiedError

__all__ = ["main"]

EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
#: Longest error line printed; the value at fault is cut, never the option name before it.
MAX_ERROR_CHARS = 400
VERSION = "print the versions of zombied and kubernetes_asyncio"


def usage() -> str:
    """The top-level help text."""
    from zombied.config import COMMANDS  # noqa: PLC0415 - see main

    commands = {**COMMANDS, "version": VERSION}
    lines = [
        "usage: zombied {" + ",".join(commands) + "} [options]",
        "       zombied --version",
        "",
        "commands:",
    ]
    lines.extend(f"  {name:<9}{text}" for name, text in commands.items())
    lines.append("")
    lines.append("Run 'zombied COMMAND --help' for the options of a command.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of ``python -m zombied``.

    Everything heavy is imported in here, under the handler: a Ctrl-C while the libraries
    load, the configuration is read or the cluster is first reached exits 130 quietly.
    """
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # SIGINT before a command handles signals itself
        return EXIT_INTERRUPTED


def _main(args: list[str]) -> int:
    import anyio  # noqa: PLC0415

    from zombied.config import COMMANDS, load_config  # noqa: PLC0415
    from zombied.log import configure_logging  # noqa: PLC0415

    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else EXIT_CONFIG
    command, rest = args[0], args[1:]
    if command in ("version", "--version", "-V"):
        from zombied.daemon import versions  # noqa: PLC0415

        for name, value in versions().items():
            print(f"{name} {value}")
        return 0
    if command not in COMMANDS:
        known = ", ".join([*COMMANDS, "version"])
        return _fail(f"unknown command {command!r} (choose from {known})")
    try:
        config = load_config(command, rest, os.environ)
    except ConfigError as exc:
        return _fail(str(exc))
    # scan and explain print their report on stdout: logs must not interleave with it.
    configure_logging(
        config.log_format, config.log_level, sys.stdout if command == "run" else sys.stderr
    )
    try:
        if config.command == "run":
            from zombied.daemon import serve  # noqa: PLC0415

            return anyio.run(serve, config, backend="asyncio")
        if config.command == "explain":
            from zombied.explain import run_explain  # noqa: PLC0415

            return anyio.run(run_explain, config, backend="asyncio")
        from zombied.scan import scan  # noqa: PLC0415

        return anyio.run(scan, config, backend="asyncio")
    except ConfigError as exc:
        # The daemon and scan open the API client before their task groups, so a broken
        # kubeconfig arrives here as itself, never wrapped in an exception group.
        return _fail(str(exc))
    except ZombiedError as exc:  # e.g. scan could not list pods: a failure, not a crash
        print(f"zombied: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILED


def _fail(message: str) -> int:
    print(f"zombied: error: {one_line(message)}", file=sys.stderr)
    return EXIT_CONFIG


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """The message on one line, cut to ``limit`` characters.

    Errors echo the value at fault; a garbage value of megabytes (a binary file mounted
    as the config) must not turn the one-line error into a screenful.
    """
    flat = " ".join(message.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
