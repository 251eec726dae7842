"""Benchmark of zombied at its defaults, and the demo.

`bench.run` is the entry point (`make bench`): `realserver` (storms on a real
kube-apiserver against the `kubectl` CronJob of `cronjob`), `pacing` (storms on the
simulator, clean and under 429 pushback) and `memory` (memory against cluster size).
The simulator and zombied run as their own processes, exactly as users run them
(`simctl`); this package drives them over HTTP on 127.0.0.1, reads zombied's CPU and
memory from the kernel (`procs`), and turns the servers' logs into the figures of
`bench/RESULTS.md` (`stats`). Child processes, waits and ports come from
`tests.helpers`, shared with the test suite. `demo` is `make demo`; `monitoring_plot`
and `prometheus` draw `bench/monitoring.png` and serve the monitoring test.
"""
