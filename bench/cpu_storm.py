"""CPU per reaped pod in one storm: a focused run of `make bench`'s zombied storm.

A fresh simulator with a cluster of ``--pods`` pods, a fresh zombied with the storm's
lifted limits (as `bench/run.py` starts it), then 10 % of the nodes shut down at once.
Prints the CPU time of the zombied process (user + system, from just before the storm
until it is cleared) per reaped pod, and the machine's load: on shared cores CPU time,
not wall time, is what compares across runs. With ``--profile`` py-spy records zombied
meanwhile, and the summary `bench/profile.py` renders is printed too. It measures only;
it never judges or writes RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from bench import profile, run
from bench.simctl import ZombiedProcess


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--pods", type=int, default=100_000, help="cluster size (100000)")
    parser.add_argument("--profile", type=Path, help="py-spy zombied into this file")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="cpu-storm-"))
    plan = run.Plan(sizes=(args.pods,), profile=args.profile is not None, profile_path=args.profile)
    sim, session = run.start_cluster(workdir, plan, args.pods, "zombied")
    with sim:
        _, storm_nodes = run.pick_nodes(session.nodes, plan, args.pods)
        storm_pods = [pod for on_node in sim.pods_on(storm_nodes).values() for pod in on_node]
        extra = (*run.AS_DEPLOYED, *run.LIFTED)
        with ZombiedProcess(sim, workdir, name="zombied-storm", extra=extra) as daemon:
            process = psutil.Process(daemon.pid)
            profiler = run.start_profiler(plan, daemon, workdir, args.pods)
            load = os.getloadavg()
            machine_before, before = psutil.cpu_times(), process.cpu_times()
            started = time.monotonic()
            run.inject_storm(session, storm_pods)
            cleared = run.wait_cleared(session, {"storm"}, plan.clear_timeout_s)
            after = process.cpu_times()
            wall = time.monotonic() - started
            busy = run.busy_fraction(machine_before, psutil.cpu_times())
            if profiler is not None:
                profiler.stop()
    cpu = (after.user + after.system) - (before.user + before.system)
    print(
        f"{len(storm_pods):,} zombies in a cluster of {args.pods:,} pods, "
        f"{'cleared' if cleared else 'NOT cleared'} in {wall:.1f} s: zombied used "
        f"{cpu:.2f} s CPU, {cpu / len(storm_pods) * 1000:.3f} ms per reaped pod; machine "
        f"{busy:.0%} busy, load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}"
    )
    if args.profile is not None and args.profile.exists():
        stacks = profile.parse_collapsed(args.profile.read_text())
        print("\n".join(profile.render(profile.summarise(stacks), title="Profile")))
    return 0 if cleared else 1


if __name__ == "__main__":
    sys.exit(main())
