"""``python -m kubesim``: run the simulated API server as a process.

This module owns the simulator's command line: start a :class:`Simulator`, load
RBAC files, faults and a named scenario, write a kubeconfig (atomically, and only
once the port accepts connections, so a waiting process may use it as soon as it
appears), then serve until SIGTERM or SIGINT and exit 0. It knows nothing of any controller.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from kubesim import Simulator
from kubesim.faults import Faults
from kubesim.rbac import InvalidRbac, PolicyRule, load_rules, service_account_user
from kubesim.scenario import SCENARIOS, build_named
from kubesim.versions import VERSIONS

SCENARIO_NAMES = ("empty", *SCENARIOS)


def build_parser(prog: str = "python -m kubesim") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run a simulated Kubernetes API server (pods, nodes, namespaces, events, leases) "
            "for tests, benchmarks and demos. Writes an admin kubeconfig once it listens and "
            "serves until SIGTERM or SIGINT."
        ),
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="port to listen on; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        required=True,
        metavar="PATH",
        help="where to write the kubeconfig (context 'sim' = admin, current); written "
        "atomically once the server accepts connections",
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIO_NAMES,
        default="empty",
        help="cluster to build at start: nodes, namespaces and running pods (default: %(default)s)",
    )
    parser.add_argument(
        "--rbac",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="Role/ClusterRole YAML (repeatable); adds a context 'restricted' whose token holds "
        "exactly the rules of these files",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="inject a fault (repeatable), e.g. 'error:verb=delete,resource=pods,status=503,"
        "fraction=0.2', 'latency:verb=list,seconds=0.05', 'cut-every:5', 'cut-after:100'",
    )
    parser.add_argument(
        "--history-window",
        type=int,
        default=10_000,
        metavar="N",
        help="changes kept for watch resumption; older resourceVersions answer 410 "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between BOOKMARK events on watches that allow them (default: %(default)s)",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a throw-away self-signed certificate (its CA goes into the "
        "kubeconfig); needed by kubectl, which sends tokens only over TLS",
    )
    parser.add_argument(
        "--imitate",
        choices=tuple(VERSIONS),
        default="current",
        help="kube-apiserver version to answer like where versions differ: 1.20 (v1.20.2) or "
        "current (v1.37.2) (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for uids, scenarios and faults")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.port < 0 or args.port > 65535:
        parser.error("--port: must be between 0 and 65535")
    if args.history_window < 1:
        parser.error("--history-window: must be at least 1")
    if args.bookmark_interval <= 0:
        parser.error("--bookmark-interval: must be positive")
    rules: list[PolicyRule] = []
    user = None
    for path in args.rbac:
        try:
            rules.extend(load_rules(path))
            user = user or service_account_user(path.read_text(encoding="utf-8"))
        except (InvalidRbac, OSError) as exc:
            parser.error(f"--rbac: {exc}")
    for spec in args.fault:
        try:
            Faults().apply_spec(spec)
        except ValueError as exc:
            parser.error(f"--fault: {exc}")
    try:
        return anyio.run(_serve, args, rules, user or "restricted")
    except KeyboardInterrupt:
        return 0
    except ValueError as exc:
        print(f"kubesim: {exc}", file=sys.stderr)
        return 2


async def _serve(args: argparse.Namespace, rules: list[PolicyRule], user: str) -> int:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with Simulator(
            args.host,
            args.port,
            history_window=args.history_window,
            bookmark_interval=args.bookmark_interval,
            seed=args.seed,
            tls=args.tls,
            imitate=args.imitate,
        ) as sim:
            for spec in args.fault:
                sim.faults.apply_spec(spec)
            if args.scenario != "empty":
                build_named(sim.cluster, args.scenario)
            contexts: dict[str, str] = {}
            if args.rbac:
                contexts["restricted"] = sim.add_token(user, rules)
            sim.write_kubeconfig(args.kubeconfig, contexts=contexts)
            print(
                f"kubesim: serving {sim.url} as {sim.version.git_version} "
                f"(kubeconfig {args.kubeconfig}, "
                f"{sim.store.count('pods')} pods)",
                file=sys.stderr,
                flush=True,
            )
            async for _ in signals:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
