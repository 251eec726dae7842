#!/usr/bin/env bash
# Builds zombied's container image from the Dockerfile, as a user's image builder
# does, without a Docker engine and without a registry: Debian's buildah reads the
# Dockerfile (storage driver vfs, chroot isolation, its storage in the cache), and the
# Python base it builds on is assembled here from Debian's packages with mmdebstrap
# (python3 with pip and a `python` command, without Debian's externally-managed marker,
# trusting what this machine trusts), because the official image cannot be pulled.
# The result is a Docker image archive that `ctr images import` takes, cached by the
# hash of everything the build reads; the base is cached once.
#
#   tests/ship/build-image.sh            build (or nothing, when already built)
#   tests/ship/build-image.sh --print    print the directory holding zombied.tar
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml")
REF=zombied.test/zombied:$VERSION
BASE_REF=zombied.test/python:3.11-bookworm
cache=${XDG_CACHE_HOME:-$HOME/.cache}/zombied
base=$cache/python-base-bookworm/base.tar
storage=(--root "$cache/buildah/root" --runroot "$cache/buildah/run" --storage-driver vfs)

# What the build reads: the Dockerfile and the context .dockerignore admits.
inputs=$(cd "$root" && sha256sum Dockerfile .dockerignore pyproject.toml constraints.txt README.md \
    $(git ls-files zombied 2>/dev/null || find zombied -name '*.py' | sort) | sha256sum | cut -c1-16)
name=image-$inputs
label=image
built() { [[ -f $out/zombied.tar ]]; }
# The cache entry $out, --print, the lock, $work and step(), as for every cached build.
# shellcheck source=../cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cached-build.sh"

tools() {
    local tool
    for tool in buildah mmdebstrap; do
        command -v "$tool" >/dev/null || { echo "$tool is not installed (make node-packages)"; return 1; }
    done
}

assemble_base() {
    [[ -f $base ]] && return 0
    mkdir -p "$(dirname "$base")"
    mmdebstrap --variant=minbase --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --include=python3,python3-pip,python-is-python3,ca-certificates \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        --customize-hook='copy-in /usr/local/share/ca-certificates /usr/local/share' \
        --customize-hook='chroot "$1" update-ca-certificates' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        bookworm "$work/rootfs.tar"
    (cd "$root" && "$PYTHON" -m tests.nodes.images "$work/rootfs.tar" "$BASE_REF" "$work/base.tar")
    mv "$work/base.tar" "$base"
}

build() {
    cd "$root"
    buildah "${storage[@]}" bud --isolation chroot --build-arg "VERSION=$VERSION" \
        --build-arg "PYTHON_BASE=docker-archive:$base" -t "$REF" .
    mkdir -p "$work/out"
    buildah "${storage[@]}" push "$REF" "docker-archive:$work/out/zombied.tar:$REF"
    # Keep only the base's layers in the builder's storage between builds.
    buildah "${storage[@]}" rmi --all --force
}

install_result() {
    echo "$REF built by $(buildah --version) on $BASE_REF" >"$work/out/VERSION"
    rm -rf "$out"
    mv "$work/out" "$out"
    # Builds of other sources (other checkouts, earlier commits): the three newest stay.
    local old
    while read -r old; do
        rm -rf "$old" "$old.lock"
    done < <(ls -1dt "$cache"/image-*/ | tail -n +4 | sed 's|/$||')
}

main() {
    step "check buildah and mmdebstrap" tools
    step "assemble the Python base from Debian's packages (mmdebstrap)" assemble_base
    step "build $REF from the Dockerfile (buildah)" build
    step "install into $out" install_result
    rm -rf "$work"
    echo "image: built $REF in $(($(date +%s) - started))s into $out"
}

# Parsed whole before it runs, so editing this file during a build is harmless.
main "$@"; exit $?
