#!/usr/bin/env bash
# Installs what the test nodes run, from Debian's packages, when it is missing: containerd
# and runc (the container runtime), the CNI plugins (pod networks), dbus (each node's
# system bus), busybox-static (the workloads' image), socat (each node's relay to the
# API server). A no-op when all are there.
set -euo pipefail

declare -A wanted=(
    [containerd]=containerd
    [runc]=runc
    [/usr/lib/cni/bridge]=containernetworking-plugins
    [dbus-daemon]=dbus
    [/usr/bin/busybox]=busybox-static
    [socat]=socat
    [nsenter]=util-linux
    [ip]=iproute2
    [buildah]=buildah [mmdebstrap]=mmdebstrap
)
missing=()
for thing in "${!wanted[@]}"; do
    if [[ $thing == /* ]]; then [[ -e $thing ]] && continue; else command -v "$thing" >/dev/null && continue; fi
    missing+=("${wanted[$thing]}")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) -ne 0 ]]; then
    echo "test nodes: ${missing[*]} missing; install them as root (apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "test nodes: installing ${missing[*]}"
apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
