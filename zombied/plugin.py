"""``kubectl zombies``: ``zombied scan`` and ``zombied explain`` as a kubectl plugin.

zombied's command line already speaks kubectl's flags and takes kubectl's namespace
(the kubeconfig context's, ``-A`` for all), so the plugin only picks the command and
keeps it read-only: ``--delete`` is refused and ``ZOMBIED_DELETE`` overridden. Which
flags were given zombied's own parser says. It never talks to the API server itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from zombied.cli import EXIT_CONFIG
from zombied.cli import main as zombied_main

USAGE = """\
usage: kubectl zombies [-n NAMESPACE | -A] [-l SELECTOR] [-o table|wide|json|yaml|name]
                       [--no-headers] [--waiting] [--kubeconfig PATH] [--context NAME]
                       [zombied scan options]
       kubectl zombies explain [NAMESPACE/]POD [-n NAMESPACE] [-o table|json|yaml|name]

List the zombie pods (zombied scan) of the current namespace, of -n NAMESPACE, or of
every namespace with -A; or explain, rule by rule, whether zombied would delete a pod.
It only reads: to delete what it lists, run 'zombied scan --delete' with the same
options. Run 'zombied scan --help' for every option. Exit codes: 0 done, 1 the API
could not be read, 2 invalid options.
"""

_READ_ONLY = (
    "--delete: kubectl zombies only reads; 'zombied scan --delete' takes the same options "
    "and deletes what it lists"
)


def translate(args: Sequence[str]) -> list[str]:
    """The ``zombied`` argument list that does what ``kubectl zombies ARGS`` asks;
    `ValueError` when it asks to delete."""
    from zombied.config import given_options  # noqa: PLC0415 - zombied.cli's lazy imports

    args = list(args)
    if "--version" in args or "-V" in args or args[:1] == ["version"]:
        return ["version"]
    command = args.pop(0) if args[:1] in (["scan"], ["explain"]) else "scan"
    if command == "explain":
        return ["explain", *args]
    if "delete" in given_options("scan", args):
        raise ValueError(_READ_ONLY)
    # Read only, whatever ZOMBIED_DELETE says: the flag wins over the environment.
    return ["scan", "--delete=false", *args]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kubectl-zombies`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(arg in ("-h", "--help") for arg in args):
        print(USAGE, end="")  # noqa: T201 - the plugin's help is its output
        return 0
    try:
        zombied_args = translate(args)
    except ValueError as exc:
        print(f"kubectl zombies: error: {exc}", file=sys.stderr)  # noqa: T201
        return EXIT_CONFIG
    return zombied_main(zombied_args)
