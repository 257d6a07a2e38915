#!/usr/bin/env bash
# The GPU validation runbook: every check the GPU items need, in stages of at most ~8 minutes,
# each writing its results into OUTDIR as it goes.
#
#   bash benchmarks/gpu_run.sh [--device cuda|cpu] [--merge] [--from DIR] [--budget SECONDS]
#                              [--compile-mode MODE] [--dry-run] STAGE|all OUTDIR
#
# Stages, in the order `all` runs them (the never-run issue-10 stages first; PLAN_S below):
#   env          versions (python, torch, CUDA, driver, typer, polars, …), nvidia-smi, the carried
#                wheels installed, the CLI run once (`generate --verify-lossless --json`, `collect`),
#                the benchmark scripts a GPU validation runs imported (gpu_verify, peers, executor)
#   steps-8b     llama-3.1-8b verification steps, eager and graph, contexts 256/2048/8192,
#                n = 1…256, and prefill of 2,048 and 8,192 tokens (gpu_verify.py)
#   compile      compiled steps at one context (256): llama-68m n = 1…8, llama-3.1-8b n = 1
#   steps-ssm    mamba2-2.7b (eager, graph; n = 1…64, with the commit) and bamba-9b (eager)
#   e2e          generate on the zoo per drafter (sequoia tree of 8, float32, checked lossless)
#   profile      specscope profile-hw --device cuda --quick (eager and graph) on the models that
#                validate and validate --load price (tiny-code, its draft, llama-68m)
#   load         specscope validate --load --device cuda --runtime graph --quick on tiny-code,
#                against that profile, with --drafter ngram and --drafter draft (serving under load)
#   validate     specscope validate --device cuda --quick on tiny-code, against that profile
#   steps-small  llama-68m and llama-3.2-1b, eager and graph, contexts 256/2048, n = 1…64
#   summary      the issue-10 GPU checks, pass or fail, from the files above
# and, named only: compile-long (llama-3.1-8b compiled n = 1 and 64 at context 8192).
#
# OUTDIR gets at most 8 files (the device tool brings back 8 a command): env.json,
# gpu_verify.json (steps, prefill, commit, e2e, groups), profile.toml, validate.json, load.json
# (one validate --load result per drafter), stages.json (what ran, how long, its status),
# run.log, summary.txt.
#
# --device cpu runs every stage with small shapes (CI: tests/test_gpu_run.py). --merge keeps the
# files OUTDIR already holds and adds to them; `all` then skips the stages stages.json says are
# done. --from DIR first copies an earlier run's files from DIR into OUTDIR (implies --merge).
# --budget SECONDS: `all` starts no stage that its estimate says would end past the budget, and
# cuts a running one at it (resume with --merge); a cuda `all` defaults to PLAN_S (12 minutes:
# by the estimates, env and the four never-run stages take 645 s and the summary 10, so profile,
# load and the rest run only in a later call; --budget 0: no budget). Each stage is cut at 8
# minutes (cuda).
# --compile-mode: torch.compile's mode for the compiled steps (default, or
# max-autotune-no-cudagraphs). --dry-run prints each stage's commands and runs nothing.
#
# Python packages: the image's, plus the wheels in $GPU_CARRY (default .gpu-carry/, made by
# `make gpu-carry` from benchmarks/gpu_carry.txt), installed with pip --target into $GPU_SITE and
# put first on PYTHONPATH with the checkout itself (no install needed). $PYTHON picks the
# interpreter (default python3); $GPU_WORK holds scratch files (default $TMPDIR/specscope-gpu-work).
set -uo pipefail

usage() {
  sed -n '4,5p' "$0" | sed 's/^# \{0,3\}//' >&2
  echo "stages: ${STAGES[*]} compile-long" >&2
  exit 2
}

PROFILE_MODELS=tiny-code-draft,tiny-code,llama-68m
STAGES=(env steps-8b compile steps-ssm e2e profile load validate steps-small summary)
# The stages no GPU loan has run yet come first (issue 10's items: steps-8b, compile, steps-ssm,
# e2e), then those earlier loans ran (profile, load, validate, steps-small) while time remains.
PLAN_S=720
# The default budget of a cuda `all`: 12 minutes of a 15-minute loan (a start and a give-back
# take the rest); `all` starts no stage whose estimate, with the summary's after it, would end
# past it.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
DEVICE=cuda
MERGE=0
FROM=""
BUDGET=""
COMPILE_MODE=default
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=${2:-}; shift 2 ;;
    --device=*) DEVICE=${1#*=}; shift ;;
    --merge) MERGE=1; shift ;;
    --from) FROM=${2:-}; MERGE=1; shift 2 ;;
    --budget) BUDGET=${2:-}; shift 2 ;;
    --compile-mode) COMPILE_MODE=${2:-}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage ;;
    -*) echo "gpu_run.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
STAGE=$1
OUT=$2
case "$DEVICE" in cuda|cpu) ;; *) echo "gpu_run.sh: --device must be cuda or cpu" >&2; exit 2 ;; esac
if [ -z "$BUDGET" ]; then  # unstated: a cuda `all` takes PLAN_S, anything else none (0)
  if [ "$DEVICE" = cuda ] && [ "$STAGE" = all ]; then BUDGET=$PLAN_S; else BUDGET=0; fi
fi
case "$BUDGET" in *[!0-9]*) echo "gpu_run.sh: --budget takes whole seconds" >&2; exit 2 ;; esac
case "$COMPILE_MODE" in default|max-autotune-no-cudagraphs) ;;
  *) echo "gpu_run.sh: --compile-mode must be default or max-autotune-no-cudagraphs" >&2
     exit 2 ;;
esac
if [ "$STAGE" != all ] && [ "$STAGE" != compile-long ] \
   && [[ ! " ${STAGES[*]} " =~ \ $STAGE\  ]]; then
  echo "gpu_run.sh: unknown stage '$STAGE'" >&2; usage
fi

FILES=(env.json gpu_verify.json profile.toml validate.json load.json stages.json run.log
       summary.txt)
if [ "$DRY" = 0 ]; then
  mkdir -p "$OUT" || exit 2
  OUT=$(cd "$OUT" && pwd)
fi
if [ "$DRY" = 0 ] && [ -n "$FROM" ]; then
  [ -d "$FROM" ] || { echo "gpu_run.sh: --from $FROM: no such folder" >&2; exit 2; }
  for f in "${FILES[@]}"; do
    if [ -f "$FROM/$f" ] && [ ! -e "$OUT/$f" ]; then cp "$FROM/$f" "$OUT/$f"; fi
  done
fi
if [ "$DRY" = 0 ] && [ "$MERGE" = 0 ]; then
  for f in "${FILES[@]}"; do
    if [ -e "$OUT/$f" ]; then
      echo "gpu_run.sh: $OUT already holds $f from an earlier run: pass --merge to add to it," \
           "or give an empty folder" >&2
      exit 2
    fi
  done
fi

CARRY=${GPU_CARRY:-$REPO/.gpu-carry}
SITE=${GPU_SITE:-${TMPDIR:-/tmp}/specscope-gpu-site}
WORK=${GPU_WORK:-${TMPDIR:-/tmp}/specscope-gpu-work}
[ "$DRY" = 1 ] || mkdir -p "$WORK"
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export SPECSCOPE_PROFILE_DIR="$WORK/profiles"  # nothing written under ~/.config
export GPU_RUN_DEVICE=$DEVICE
LOG="$OUT/run.log"
HELPER=("$PYTHON" "$REPO/benchmarks/gpu_run.py")
VERIFY=("$PYTHON" "$REPO/benchmarks/gpu_verify.py" --device "$DEVICE" --merge
        -o "$OUT/gpu_verify.json")
if [ "$DEVICE" = cuda ]; then LIMIT=480; else LIMIT=300; fi

log() { echo "[gpu_run $(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }

# The carried wheels, installed once per site folder (a stamp names the wheels it holds).
ensure_site() {
  local wheels=() stamp="$SITE/.carried"
  if [ -d "$CARRY" ]; then
    while IFS= read -r w; do wheels+=("$w"); done < <(ls "$CARRY"/*.whl 2>/dev/null | sort)
  fi
  local want
  want=$(for w in "${wheels[@]}"; do basename "$w"; done)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  rm -rf "$SITE"
  mkdir -p "$SITE"
  if [ ${#wheels[@]} -gt 0 ]; then
    log "installing ${#wheels[@]} carried wheel(s) from $CARRY into $SITE"
    if ! "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile \
         --disable-pip-version-check --target "$SITE" "${wheels[@]}" >>"$LOG" 2>&1; then
      log "pip could not install them; unzipping instead"
      for w in "${wheels[@]}"; do "$PYTHON" -m zipfile -e "$w" "$SITE" || return 1; done
    fi
  else
    log "no carried wheels in $CARRY: the image's packages only"
  fi
  echo "$want" >"$stamp"
}

# hw: the profile the checks price with: this run's profile.toml when the profile stage wrote it.
hw() {
  if [ -f "$OUT/profile.toml" ]; then echo "$OUT/profile.toml"
  elif [ "$DEVICE" = cuda ]; then echo h100
  else echo cpu-2core; fi
}

# stage_cmds STAGE: the commands of a stage, one per line (run by `bash -c`).
stage_cmds() {
  local cuda=0
  [ "$DEVICE" = cuda ] && cuda=1
  local V="${VERIFY[*]}" H="${HELPER[*]}" CLI="$PYTHON -m specscope"
  case "$1" in
    env)
      echo "$CLI --version"
      echo "$CLI generate --target tiny-code --drafter draft --algo sequoia --budget 8" \
           "--prompts builtin:code-edit --n 2 --output-len 32 --device $DEVICE" \
           "--dtype float32 --verify-lossless --json > $WORK/cli-generate.json"
      echo "$CLI collect --target tiny-code --prompts builtin:code-edit --n 1 --output-len 8" \
           "--device $DEVICE -o $WORK/trace.parquet --force"
      local b=$REPO/benchmarks
      echo "$H env --out $OUT/env.json --cli $WORK/cli-generate.json --site $SITE" \
           "--imports $b/gpu_verify.py,$b/peers.py,$b/executor.py" ;;
    steps-8b)
      if [ $cuda = 1 ]; then
        echo "$V --models llama-3.1-8b --contexts 256,2048,8192 --ns 1,2,4,8,16,32,64,128,256" \
             "--runtimes eager,graph --prefill 2048,8192 --no-e2e"
      else
        echo "$V --models llama-3.2-1b/8 --contexts 64,256 --ns 1,4,64 --runtimes eager" \
             "--prefill 256 --repeats 3 --no-e2e"
      fi ;;
    compile)
      if [ $cuda = 1 ]; then
        echo "$V --models llama-68m --contexts 256 --ns 1,2,4,8 --runtimes compile" \
             "--prefill '' --compile-mode $COMPILE_MODE --no-e2e"
        echo "$V --models llama-3.1-8b --contexts 256 --ns 1 --runtimes compile --prefill ''" \
             "--compile-mode $COMPILE_MODE --no-e2e"
      else
        echo "$V --models tiny-code-draft --contexts 64 --ns 1 --runtimes compile --prefill ''" \
             "--repeats 3 --no-e2e"
      fi ;;
    compile-long)
      if [ $cuda = 1 ]; then
        echo "$V --models llama-3.1-8b --contexts 8192 --ns 1,64 --runtimes compile" \
             "--prefill '' --compile-mode $COMPILE_MODE --no-e2e"
      else
        echo "$V --models tiny-code-draft --contexts 256 --ns 1,4 --runtimes compile" \
             "--prefill '' --repeats 3 --no-e2e"
      fi ;;
    steps-small)
      if [ $cuda = 1 ]; then
        echo "$V --models llama-68m,llama-3.2-1b --contexts 256,2048 --ns 1,2,4,8,16,32,64" \
             "--runtimes eager,graph --prefill 2048 --no-e2e"
      else
        echo "$V --models tiny-code-draft,tiny-code --contexts 64 --ns 1,2,4 --runtimes eager" \
             "--prefill '' --repeats 3 --no-e2e"
      fi ;;
    steps-ssm)
      if [ $cuda = 1 ]; then
        echo "$V --models mamba2-2.7b --contexts 256 --ns 1,2,4,8,16,32,64" \
             "--runtimes eager,graph --prefill '' --no-e2e"
        echo "$V --models bamba-9b --contexts 256,2048 --ns 1,2,4,8,16 --runtimes eager" \
             "--prefill '' --no-e2e"
      else
        echo "$V --models tiny-ssm,tiny-hybrid --contexts 64 --ns 1,2,4 --runtimes eager" \
             "--prefill '' --repeats 3 --no-e2e"
      fi ;;
    profile)
      if [ $cuda = 1 ]; then
        echo "$CLI profile-hw --name gpu-run --device cuda --quick --models $PROFILE_MODELS" \
             "-o $OUT/profile.toml"
      else
        echo "$H profile --out $OUT/profile.toml"
      fi ;;
    validate)
      if [ $cuda = 1 ]; then
        echo "$CLI validate --hw $(hw) --target tiny-code --device cuda --quick --json" \
             "> $WORK/validate.json && mv $WORK/validate.json $OUT/validate.json"
      else
        echo "$H validate --hw $(hw) --out $OUT/validate.json"
      fi ;;
    load)
      echo "$H load --hw $(hw) --device $DEVICE --out $OUT/load.json" ;;
    e2e)
      if [ $cuda = 1 ]; then
        echo "$V --e2e-only --runtimes graph --e2e-prompts 8 --e2e" \
             "tiny-code:draft,tiny-code:ngram,tiny-code:suffix,tiny-code:recycle,tiny-ssm:ngram"
        echo "$V --e2e-only --runtimes eager,compile --e2e-prompts 8 --e2e tiny-code:draft" \
             "--compile-mode $COMPILE_MODE"
      else
        echo "$V --e2e-only --runtimes eager --e2e-prompts 1 --e2e tiny-code:draft,tiny-code:ngram"
      fi ;;
    summary)
      echo "$H summary $OUT" ;;
  esac
}

# Seconds a stage is expected to take (cuda: guesses for an H100 until a run has measured them,
# stages.json's wall_s; cpu: this CI's 2 cores). `all --budget` starts a stage only if its
# estimate fits in what is left. env, profile and load were measured on an H100 (2026-11-26,
# two runs: 37 s; 59-66 s; 216-261 s, each cell's real run repeated, the n-gram drafter's
# validate --load 70-76 s and the draft model's 135-170 s plus the CLI's start).
estimate() {
  if [ "$DEVICE" = cuda ]; then
    case "$1" in
      env) echo 45 ;; steps-8b) echo 120 ;; compile) echo 180 ;; steps-small) echo 60 ;;
      steps-ssm) echo 120 ;; profile) echo 70 ;; validate) echo 150 ;; load) echo 270 ;;
      e2e) echo 180 ;;
      compile-long) echo 240 ;; *) echo 10 ;;
    esac
  else
    echo 10
  fi
}

if [ "$DRY" = 1 ]; then
  if [ "$STAGE" = all ]; then todo=("${STAGES[@]}"); else todo=("$STAGE"); fi
  planned=0
  for stage in "${todo[@]}"; do
    planned=$((planned + $(estimate "$stage")))
    fits=""
    if [ "$BUDGET" -gt 0 ] && [ "$stage" != summary ] \
       && [ $((planned + $(estimate summary))) -gt "$BUDGET" ]; then
      fits=", past the ${BUDGET} s budget: a later call"
    fi
    echo "# $stage (about $(estimate "$stage") s$fits)"
    stage_cmds "$stage"
  done
  exit 0
fi

START=$SECONDS
run_stage() {
  local stage=$1 limit=$LIMIT left
  if [ "$BUDGET" -gt 0 ] && [ "$stage" != summary ]; then
    left=$((BUDGET - (SECONDS - START)))
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  log "stage $stage: start (cut at ${limit} s)"
  "${HELPER[@]}" record "$OUT" "$stage" running --device "$DEVICE" >>"$LOG" 2>&1
  local t0=$SECONDS rc=0 status=done cmd
  while IFS= read -r cmd; do
    [ -n "$cmd" ] || continue
    log "\$ $cmd"
    local remaining=$((limit - (SECONDS - t0)))
    if [ "$remaining" -le 0 ]; then rc=124; break; fi
    timeout --signal=TERM --kill-after=20 "$remaining" bash -c "$cmd" </dev/null 2>&1 \
      | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || break
  done < <(stage_cmds "$stage")
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status=timeout; elif [ "$rc" != 0 ]; then
    status=failed; fi
  "${HELPER[@]}" record "$OUT" "$stage" "$status" --device "$DEVICE" --rc "$rc" \
    --wall "$((SECONDS - t0))" >>"$LOG" 2>&1
  log "stage $stage: $status in $((SECONDS - t0)) s"
  [ "$status" = done ]
}

: >>"$LOG"
log "gpu_run.sh --device $DEVICE $STAGE $OUT (merge $MERGE, budget ${BUDGET:-0} s," \
    "compile mode $COMPILE_MODE, python $PYTHON)"
ensure_site || { log "could not install the carried wheels"; exit 1; }

if [ "$STAGE" != all ]; then
  run_stage "$STAGE"
  exit $?
fi
failed=0
for stage in "${STAGES[@]}"; do
  if [ "$MERGE" = 1 ] && [ "$stage" != summary ] \
     && "${HELPER[@]}" done "$OUT" "$stage" 2>/dev/null; then
    log "stage $stage: already done (stages.json)"
    continue
  fi
  if [ "$BUDGET" -gt 0 ] && [ "$stage" != summary ] \
     && [ $((SECONDS - START + $(estimate "$stage") + $(estimate summary))) -gt "$BUDGET" ]; then
    log "stage $stage: not started, ${BUDGET} s budget nearly spent; run again with --merge" \
        "(--from the folder holding these files) to go on"
    run_stage summary || true
    exit 3
  fi
  run_stage "$stage" || failed=1
done
exit $failed
