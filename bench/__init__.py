"""Benchmark of zombied against the `kubectl` CronJob it replaces.

`bench/run.py` is the entry point (`make bench`). The simulator and zombied run as
their own processes, exactly as users run them; this package only drives them over
HTTP on 127.0.0.1, samples the zombied process, and turns the simulator's request and
delete logs into the figures in `bench/RESULTS.md`. Pure computations (statistics,
audits, markdown) live in `stats` and `report` so they are unit-tested without
processes; everything that starts a process lives in `procs` and must stop it.
"""
