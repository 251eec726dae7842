# Sourced by the build scripts (tests/realserver/build-*.sh, tests/ship/build-helm.sh):
# what every cached build shares. The script sets `name` (the cache entry, such as
# real-apiserver-v1.37.2), `label` (the prefix of its progress lines) and a `built`
# function that tells whether $out holds the result, then sources this file, which
#   - sets $out, the result's directory in the cache outside the checkout;
#   - answers --print with $out, and exits when the result is already there;
#   - takes the entry's lock (one build at a time: a second caller waits, then finds
#     the result) and makes an empty work directory $work with $work/logs;
#   - defines `step NAME COMMAND...`, which runs COMMAND into its own log and, when it
#     fails, prints the log's tail and one last line naming the step, and exits 1.
# shellcheck shell=bash

cache=${XDG_CACHE_HOME:-$HOME/.cache}/zombied
out=$cache/$name

if [[ "${1:-}" == "--print" ]]; then
    echo "$out"
    exit 0
fi
built && exit 0

mkdir -p "$cache"
exec 9>"$cache/$name.lock"
flock 9
built && exit 0

work=$cache/$name.build
rm -rf "$work"
mkdir -p "$work/logs"
started=$(date +%s)

step() {
    local step_name=$1
    shift
    local slug
    slug=$(tr -c 'A-Za-z0-9._=+-' '-' <<<"$step_name" | sed 's/-*$//')
    local log=$work/logs/$slug.log
    echo "$label: $step_name"
    if ! "$@" >"$log" 2>&1; then
        tail -n 25 "$log" >&2 || true
        echo "$label build failed at step '$step_name' (full log: $log)" >&2
        exit 1
    fi
}
