#!/bin/bash
# A/A calibration of the demo's baseline (nospec) on a quiet 2-core host, with common prompts over rounds.
cd /work/main
date -u; start=$(date +%s)
env -u PYTHONPATH SPECWATCH_HOME=/work/realruns-home SPECWATCH_CACHE=/tmp/fresh-home/cache \
  .venv/bin/specwatch calibrate examples/cpu-ngram.yaml --arm nospec --rounds 4
echo "calibrate rc=$? wall=$(( $(date +%s) - start ))s"; date -u
