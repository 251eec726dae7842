"""``kubectl zombies``: ``zombied scan`` and ``zombied explain`` as a kubectl plugin.

zombied's command line already speaks kubectl's flags, so this adds only what kubectl
does and zombied does not, then hands over to `zombied.cli.main`: without ``-n`` the
namespace of the kubeconfig context in use (else ``default``), and read-only
(``--delete`` is refused, ``ZOMBIED_DELETE`` overridden). Reading the kubeconfig is its
only I/O; it never talks to the API server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from zombied.cli import main as zombied_main
from zombied.config import OPTIONS

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

_NAMESPACE_FLAGS = ("-n", "--namespace")
_ALL_FLAGS = ("-A", "--all-namespaces")
_CONNECTION_FLAGS = ("--kubeconfig", "--context")
#: zombied's own flags that take a value as the next argument (``-o json``).
_VALUED = frozenset(
    spelling for option in OPTIONS if option.const is None for spelling in option.spellings()
)
_READ_ONLY = (
    "--delete: kubectl zombies only reads; 'zombied scan --delete' takes the same options "
    "and deletes what it lists"
)


@dataclass
class Invocation:
    """The plugin's arguments: what it must look at, and everything in order."""

    command: str = "scan"
    target: str | None = None
    namespace: bool = False  # -n given
    all_namespaces: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    args: list[str] = field(default_factory=list)  # for zombied, as given


def _value(args: Sequence[str], index: int, flag: str) -> tuple[str, int]:
    """The value of the flag at ``index`` (``--f=v``, ``-fv`` or ``--f v``), next index."""
    arg = args[index]
    if arg.startswith(flag + "="):
        return arg[len(flag) + 1 :], index + 1
    if len(flag) == 2 and arg != flag:  # -nfoo
        return arg[2:], index + 1
    if index + 1 >= len(args):
        raise ValueError(f"{flag}: expected a value")
    return args[index + 1], index + 2


def _matches(arg: str, flags: Sequence[str]) -> str | None:
    for flag in flags:
        if arg == flag or arg.startswith(flag + "="):
            return flag
        if len(flag) == 2 and arg.startswith(flag) and not arg.startswith("--"):
            return flag
    return None


def parse(args: Sequence[str]) -> Invocation:
    """Sort kubectl-style arguments; ``ValueError`` names a flag it refuses or that
    misses its value."""
    inv = Invocation()
    positionals: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        after = index + 1
        if arg == "--":
            positionals.extend(args[after:])
            break
        if _matches(arg, ("--delete",)):
            raise ValueError(_READ_ONLY)
        if arg in ("--version", "-V"):
            inv.command = "version"
        elif flag := _matches(arg, _NAMESPACE_FLAGS):
            inv.namespace = True
            _, after = _value(args, index, flag)
        elif _matches(arg, _ALL_FLAGS):
            inv.all_namespaces = arg.partition("=")[2].lower() not in ("false", "0", "no")
        elif flag := _matches(arg, _CONNECTION_FLAGS):
            value, after = _value(args, index, flag)
            setattr(inv, flag[2:], value)
        elif arg in _VALUED and after < len(args):
            after += 1
        elif not arg.startswith("-"):
            positionals.append(arg)
            index = after
            continue
        inv.args.extend(args[index:after])
        index = after
    if positionals and positionals[0] in ("scan", "explain", "version"):
        inv.command = positionals.pop(0)
    if inv.command == "explain" and positionals:
        inv.target = positionals.pop(0)
    inv.args.extend(positionals)  # zombied names what it does not expect
    return inv


def context_namespace(kubeconfigs: Sequence[Mapping[str, Any]], context: str | None) -> str:
    """The namespace of ``context`` (default: the current one) in merged kubeconfigs."""
    if context is None:
        context = next(
            (str(doc["current-context"]) for doc in kubeconfigs if doc.get("current-context")),
            None,
        )
    for doc in kubeconfigs:
        for entry in doc.get("contexts") or []:
            if isinstance(entry, Mapping) and entry.get("name") == context:
                namespace = (entry.get("context") or {}).get("namespace")
                return str(namespace) if namespace else "default"
    return "default"


def _kubeconfig_paths(flag: str | None, environ: Mapping[str, str]) -> list[Path]:
    if flag:
        return [Path(flag)]
    listed = environ.get("KUBECONFIG", "")
    if listed:
        return [Path(part) for part in listed.split(os.pathsep) if part]
    return [Path.home() / ".kube" / "config"]


def _load(paths: Sequence[Path]) -> list[Mapping[str, Any]]:
    docs: list[Mapping[str, Any]] = []
    for path in paths:
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue  # zombied reports a broken kubeconfig itself, in its own words
        if isinstance(loaded, Mapping):
            docs.append(loaded)
    return docs


def translate(inv: Invocation, environ: Mapping[str, str]) -> list[str]:
    """The ``zombied`` argument list that does what the plugin invocation asks."""
    if inv.command == "version":
        return ["version"]
    if inv.command == "explain":
        needs_namespace = inv.target is not None and "/" not in inv.target
        target = [inv.target] if inv.target is not None else []
        defaults = _default_namespace(inv, environ) if needs_namespace else []
        return ["explain", *target, *defaults, *inv.args]
    defaults = [] if inv.all_namespaces else _default_namespace(inv, environ)
    # Read only, whatever ZOMBIED_DELETE says: the flag wins over the environment.
    return ["scan", *defaults, *inv.args, "--delete=false"]


def _default_namespace(inv: Invocation, environ: Mapping[str, str]) -> list[str]:
    """``-n`` of the context in use, unless the invocation names a namespace itself."""
    if inv.namespace:
        return []
    docs = _load(_kubeconfig_paths(inv.kubeconfig, environ))
    return ["-n", context_namespace(docs, inv.context)]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kubectl-zombies`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(arg in ("-h", "--help") for arg in args):
        print(USAGE, end="")  # noqa: T201 - the plugin's help is its output
        return 0
    try:
        invocation = parse(args)
    except ValueError as exc:
        print(f"kubectl zombies: error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    return zombied_main(translate(invocation, os.environ))
