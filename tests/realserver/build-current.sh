#!/usr/bin/env bash
# Builds a current Kubernetes release and etcd for the real-server and node test
# suites: kube-apiserver, kube-controller-manager, kube-scheduler and kubelet (one
# `go build`, so they share the compiled packages), etcd, and the release's pause
# container (its build/pause/linux/pause.c, compiled static with the machine's gcc).
#
# All are Go modules on the Go module proxy, built with the Go installed in
# /usr/local/go (GO, to use another). The build inputs are committed beside this
# script: gomod/kubernetes and gomod/etcd hold a go.mod naming the release and the
# go.sum of every dependency, so a rebuild builds the same code; the link flags are
# those of the upstream release build, with the build date taken from the release. The
# result lands in a cache outside the checkout, keyed by version; a second run is a
# no-op. A failing step prints the tail of its log and one last line naming the step.
#
#   tests/realserver/build-current.sh            build (or nothing, when already built)
#   tests/realserver/build-current.sh --print    print the directory holding bin/
set -euo pipefail

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
GO=${GO:-/usr/local/go/bin/go}

here=$(cd "$(dirname "$0")" && pwd)
name=real-apiserver-$K8S_VERSION
label=real-apiserver
commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
# Every binary is named: a cache entry from before the nodes existed is built again.
built() {
    local binary
    for binary in "${commands[@]}" etcd pause; do [[ -x $out/bin/$binary ]] || return 1; done
    [[ -f $out/VERSION ]]
}
# The cache entry $out, --print, the lock, $work and step(), as for every cached build.
# shellcheck source=../cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cached-build.sh"

check_go() {
    [[ -x $GO ]] || { echo "no Go at $GO (install Go 1.26 there, or set GO)"; return 1; }
    "$GO" version
    "$GO" version | grep -q ' go1\.2[6-9]' || { echo "Go 1.26 or newer is needed"; return 1; }
}

# The modules are copied out of the checkout: building never touches it.
download() {
    local m
    for m in kubernetes etcd; do
        mkdir -p "$work/mod/$m"
        cp "$here/gomod/$m/go.mod" "$here/gomod/$m/go.sum" "$here/gomod/$m/tools.go" "$work/mod/$m/"
        (cd "$work/mod/$m" && "$GO" mod download -x && "$GO" mod verify)
    done
}

# The binary's --version has the line $1. Read whole first: `grep -q` in a pipe would
# stop reading at the match, and the binary's next write would fail the pipe.
expect_version() {
    local line=$1 binary=$2 printed
    printed=$("$binary" --version)
    echo "$printed"
    grep -qxF "$line" <<<"$printed" || { echo "expected the line: $line"; return 1; }
}

compile_kubernetes() {
    cd "$work/mod/kubernetes"
    local pkg=k8s.io/kubernetes minor date ldflags="-s -w" p command
    [[ $K8S_VERSION =~ ^v1\.([0-9]+)\. ]] || { echo "not a v1 version: $K8S_VERSION"; return 1; }
    minor=${BASH_REMATCH[1]}
    # The release's time on the proxy, so that two builds are the same bytes.
    date=$("$GO" list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' "$pkg")
    # The proxy does not tell the release's git commit: left unset, as upstream does
    # when it builds from outside git.
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
        ldflags+=" -X $p.buildDate=$date"
    done
    mkdir -p "$work/out/bin"
    "$GO" build -trimpath -o "$work/out/bin/" -ldflags "$ldflags" "${commands[@]/#/$pkg/cmd/}"
    for command in "${commands[@]}"; do
        expect_version "Kubernetes $K8S_VERSION" "$work/out/bin/$command"
    done
}

# The sandbox ("pause") container every pod of the nodes starts with, from the
# release's own source: no registry is reachable to pull registry.k8s.io/pause.
compile_pause() {
    local src
    src=$("$GO" -C "$work/mod/kubernetes" list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
    gcc -Os -Wall -Werror -static -DVERSION="$K8S_VERSION" -o "$work/out/bin/pause" "$src"
    "$work/out/bin/pause" -v
}

compile_etcd() {
    cd "$work/mod/etcd"
    "$GO" build -trimpath -o "$work/out/bin/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3
    expect_version "etcd Version: ${ETCD_VERSION#v}" "$work/out/bin/etcd"
}

install_result() {
    echo "Kubernetes $K8S_VERSION (${commands[*]}, pause) and etcd $ETCD_VERSION (Go modules), built with $("$GO" version | cut -d' ' -f3)" \
        >"$work/out/VERSION"
    rm -rf "$out"
    mv "$work/out" "$out"
}

# Caches under ours, removed once built (kept across failed attempts: a retry is faster).
export GOPATH=$cache/real-apiserver-$K8S_VERSION.gopath
export GOMODCACHE=$GOPATH/pkg/mod
export GOCACHE=$cache/real-apiserver-$K8S_VERSION.gocache
export GOFLAGS="-modcacherw -mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GO111MODULE=on
unset GOROOT

main() {
    step "check Go ($GO)" check_go
    step "download the modules of gomod/ and check them against go.sum" download
    step "compile ${commands[*]} $K8S_VERSION" compile_kubernetes
    step "compile pause $K8S_VERSION (gcc)" compile_pause
    step "compile etcd $ETCD_VERSION" compile_etcd
    step "install into $out" install_result
    rm -rf "$work" "$GOPATH" "$GOCACHE"
    echo "real-apiserver: built $(cat "$out/VERSION") in $(($(date +%s) - started))s into $out"
}

# Parsed whole before it runs, so editing this file during a build is harmless.
main "$@"; exit $?
