#!/bin/bash
# `make demo` as a new user gets it: a fresh clone of REF (default main) of the repository at REPO (default this
# checkout), an empty SPECWATCH_HOME (the cache defaults under it), no SPECWATCH_CACHE, no virtualenv; prints the
# wall time from the clone to the verdict. Work goes under WORK (default /tmp/specwatch-fresh-demo), emptied first.
#   benchmarks/fresh_clone_demo.sh [REF] [REPO] [WORK]
set -u
ref=${1:-main}
repo=${2:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}
work=${3:-/tmp/specwatch-fresh-demo}
rm -rf "$work" && mkdir -p "$work/home"
git clone -q -b "$ref" "$repo" "$work/clone" || exit 1
cd "$work/clone" && git log --oneline -1
start=$(date +%s); date -u
env -u SPECWATCH_CACHE -u PYTHONPATH -u VIRTUAL_ENV SPECWATCH_HOME="$work/home" make demo
rc=$?
echo "make demo rc=$rc wall=$(( $(date +%s) - start ))s"; date -u
exit $rc
