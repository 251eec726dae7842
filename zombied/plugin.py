"""``kubectl zombies``: ``zombied scan`` and ``zombied explain`` as a kubectl plugin.

kubectl runs the ``kubectl-zombies`` executable it finds on PATH with the arguments
that follow ``zombies``. This module owns translating kubectl's conventions into the
``zombied`` command line, then hands over to `zombied.cli.main`, so exit codes, errors
and output are the CLI's own:

- no namespace flag means the namespace of the kubeconfig context in use (the current
  one, or ``--context``), else ``default``, as in ``kubectl get pods``; ``-A`` or
  ``--all-namespaces`` means every namespace; ``-n``/``--namespace`` names one;
- ``explain NAMESPACE/POD``, or ``explain POD`` in the namespace chosen as above;
- ``-l``/``--selector`` is ``--label-selector``; ``--kubeconfig``, ``--context``,
  ``-o``, ``--no-headers`` and every other zombied option pass through unchanged.

Reading the kubeconfig to find a context's namespace is the only I/O here, and it
follows kubectl's merge rules for ``$KUBECONFIG`` (the first file to set a value wins).
It must never talk to the API server or decide anything about pods itself.
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

__all__ = ["Invocation", "context_namespace", "main", "parse", "translate"]

USAGE = """\
usage: kubectl zombies [-n NAMESPACE | -A] [-o table|wide|json|yaml|name] [--no-headers]
                       [--kubeconfig PATH] [--context NAME] [zombied scan options]
       kubectl zombies explain [NAMESPACE/]POD [-n NAMESPACE] [-o table|json|yaml|name]

List the zombie pods (zombied scan) of the current namespace, of -n NAMESPACE, or of
every namespace with -A; or explain, rule by rule, whether zombied would delete a pod.
Run 'zombied scan --help' for every option. Exit codes: 0 done, 1 the API could not be
read (or a --delete failed), 2 invalid options.
"""

_NAMESPACE_FLAGS = ("-n", "--namespace", "--namespaces")
_ALL_FLAGS = ("-A", "--all-namespaces")
_SELECTOR_FLAGS = ("-l", "--selector")
#: zombied's own flags that take a value as the next argument (``-o json``).
_VALUED = frozenset(
    spelling
    for option in OPTIONS
    if option.const is None
    for spelling in (option.flag, option.short, *option.aliases)
    if spelling
)


@dataclass
class Invocation:
    """The plugin's arguments, sorted into what it translates and what passes through."""

    command: str = "scan"
    target: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    rest: list[str] = field(default_factory=list)


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
    """Sort kubectl-style arguments; ``ValueError`` names a flag missing its value."""
    inv = Invocation()
    positionals: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            positionals.extend(args[index + 1 :])
            break
        if flag := _matches(arg, _NAMESPACE_FLAGS):
            inv.namespace, index = _value(args, index, flag)
        elif arg in _ALL_FLAGS or arg.startswith("--all-namespaces="):
            inv.all_namespaces = arg.partition("=")[2].lower() not in ("false", "0", "no")
            index += 1
        elif flag := _matches(arg, _SELECTOR_FLAGS):
            selector, index = _value(args, index, flag)
            inv.rest.append(f"--label-selector={selector}")
        elif flag := _matches(arg, ("--kubeconfig", "--context")):
            value, index = _value(args, index, flag)
            setattr(inv, flag[2:], value)
        elif arg in _VALUED and index + 1 < len(args):
            inv.rest.extend(args[index : index + 2])
            index += 2
        elif arg.startswith("-"):
            inv.rest.append(arg)
            index += 1
        else:
            positionals.append(arg)
            index += 1
    if positionals and positionals[0] in ("scan", "explain", "version"):
        inv.command = positionals.pop(0)
    if inv.command == "explain" and positionals:
        inv.target = positionals.pop(0)
    inv.rest.extend(positionals)  # zombied names what it does not expect
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
    connection: list[str] = []
    if inv.kubeconfig is not None:
        connection.append(f"--kubeconfig={inv.kubeconfig}")
    if inv.context is not None:
        connection.append(f"--context={inv.context}")
    namespace = inv.namespace
    if namespace is None and not (inv.all_namespaces and inv.command == "scan"):
        needs_default = inv.command == "scan" or (inv.target is not None and "/" not in inv.target)
        if needs_default:
            docs = _load(_kubeconfig_paths(inv.kubeconfig, environ))
            namespace = context_namespace(docs, inv.context)
    if inv.command == "explain":
        target = inv.target or ""
        if target and "/" not in target:
            target = f"{namespace}/{target}"
        return ["explain", target, *connection, *inv.rest] if target else ["explain", *inv.rest]
    if inv.all_namespaces and inv.namespace is not None:
        # Let zombied reject the combination, with its own one-line error.
        return ["scan", *connection, "--all-namespaces", f"--namespaces={namespace}", *inv.rest]
    scope = ["--all-namespaces"] if namespace is None else [f"--namespaces={namespace}"]
    return ["scan", *connection, *scope, *inv.rest]


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
