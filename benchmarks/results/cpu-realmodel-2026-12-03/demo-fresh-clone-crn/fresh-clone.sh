#!/bin/bash
# A fresh clone of main, empty SPECWATCH_HOME (the cache defaults under it), then `make demo`.
set -u
rm -rf /tmp/specwatch-fresh /tmp/fresh-home
mkdir -p /tmp/fresh-home
git clone -q /work/main /tmp/specwatch-fresh || exit 1
cd /tmp/specwatch-fresh
git log --oneline -1
start=$(date +%s); date -u
env -u SPECWATCH_CACHE -u PYTHONPATH -u VIRTUAL_ENV SPECWATCH_HOME=/tmp/fresh-home make demo
rc=$?
echo "make demo rc=$rc wall=$(( $(date +%s) - start ))s"; date -u
