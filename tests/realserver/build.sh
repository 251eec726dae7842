#!/usr/bin/env bash
# Builds the real kube-apiservers (with etcd) of the real-server test suites: v1.20.2
# from Debian's packages (build-v1.20.2.sh) and a current release from its Go modules
# (build-current.sh), each into its own cache directory, once. Each build takes its own
# lock and is a no-op when its result is there; a failure names the failed step.
#
#   tests/realserver/build.sh            build both (or nothing, when already built)
#   tests/realserver/build.sh --print    print the directories holding bin/, one a line
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
builds=("$here/build-v1.20.2.sh" "$here/build-current.sh")

if [[ "${1:-}" == "--print" ]]; then
    for build in "${builds[@]}"; do bash "$build" --print; done
    exit 0
fi

for build in "${builds[@]}"; do bash "$build"; done
