#!/usr/bin/env bash
# Smoke test of the verl backend and the vLLM engine, the same steps on either device:
#
#   bash scripts/smoke.sh --device cpu  [WORKDIR]   # this machine: the scale env (make scale-env)
#   bash scripts/smoke.sh --device cuda [WORKDIR]   # one GPU, in the trainer image (verl[vllm]==0.9.1)
#
# 1. data: the synthetic task and a tiny Qwen2 policy (components.policy) pretrained on it
#    (300 steps x 64, the scale tests' pretrain: it solves 3-5-term chains 34-61 % of the time,
#    so rewards are not all 0), with "hard" and "prefixes" inputs in the train stage's layout;
# 2. verl: 2 training steps of GRPO and 2 of VSR, rollouts from vLLM through verl's agent loop
#    (on cpu: verl's FSDP actor over gloo and vLLM's CPU backend, components/trainer/verl/cpu_platform.py);
# 3. evaluate: the evaluate stage's code with the vLLM engine on the GRPO model;
# then a short report, which fails when a run's rewards are all 0 (no learning signal).
# PYTHON picks the interpreter (cpu default: .venv-scale/bin/python).
set -euo pipefail

DEVICE=""
if [[ "${1:-}" == "--device" ]]; then DEVICE="${2:-}"; shift 2; fi
case "$DEVICE" in
  cpu|cuda) ;;
  *) echo "usage: bash scripts/smoke.sh --device cpu|cuda [WORKDIR]" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-$(mktemp -d /tmp/rlvr-smoke-$DEVICE.XXXXXX)}"
if [[ "$DEVICE" == cpu ]]; then
  PY="${PYTHON:-$ROOT/.venv-scale/bin/python}"
  [[ -x "$PY" ]] || { echo "smoke --device cpu: $PY missing: run make scale-env" >&2; exit 2; }
  # the CPU defaults (eager, fp32, no sleep mode, SDPA, FSDP2 over gloo) come from
  # components/trainer/verl/hydra_config.py:CPU_OVERRIDES when no CUDA device is visible
  VERL_OVERRIDES='[]'
  BUDGET=1500
else
  PY="${PYTHON:-python}"
  VERL_OVERRIDES='["actor_rollout_ref.rollout.enforce_eager=true", "actor_rollout_ref.rollout.load_format=auto", "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32"]'
  BUDGET=480
fi
export RLVR_HOME="$WORK/rlvr" MLFLOW_TRACKING_URI="sqlite:///$WORK/mlflow.db"
export VLLM_LOGGING_LEVEL=WARNING TOKENIZERS_PARALLELISM=false
cd "$ROOT"
mkdir -p "$WORK"
START=$(date +%s)
if [[ "$DEVICE" == cuda ]]; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; fi
"$PY" -c "import vllm, verl; print('vllm', vllm.__version__, 'verl', verl.__version__)"

echo "== 1. tiny policy and inputs -> $WORK"
"$PY" - "$WORK" <<'PYEOF'
import json, sys, time
from pathlib import Path
import torch
from components.data.schema import write_problems
from components.data.synthetic import generate_problems
from components.policy.model import TinyPolicyConfig, build_policy, save_policy
from components.policy.pretraining import pretrain_policy
from components.policy.tokenizer import build_tokenizer

work = Path(sys.argv[1])
torch.set_num_threads(1)
tok = build_tokenizer()
model = build_policy(TinyPolicyConfig(), tok, seed=0)
t0 = time.monotonic()
corpus = generate_problems(2000, {3: 0.3, 4: 0.3, 5: 0.2, 6: 0.15, 7: 0.05}, seed=11, operand_digits=1)
info = pretrain_policy(model, tok, corpus, steps=300, batch_size=64, lr=3e-3, warmup=20, seed=0, progress=False)
print(f"pretrain: loss {info['final_loss']:.3f} in {time.monotonic() - t0:.0f} s")
save_policy(model, tok, work / "model" / "model")
problems = generate_problems(48, [3, 4, 5], seed=0, operand_digits=1, exclude={p.uid for p in corpus})
(work / "hard").mkdir(exist_ok=True)
write_problems(work / "hard" / "train.jsonl", problems[:32])
write_problems(work / "hard" / "heldout.jsonl", problems[32:])
(work / "prefixes").mkdir(exist_ok=True)
traces = {p.uid: p.traces[0] for p in problems[:32] if p.traces}
(work / "prefixes" / "traces.json").write_text(json.dumps(traces))
print(f"{len(problems)} problems, {len(traces)} expert traces")
PYEOF

INPUTS="{\"model\": \"$WORK/model\", \"hard\": \"$WORK/hard\", \"prefixes\": \"$WORK/prefixes\"}"
COMMON="\"steps\": 2, \"batch_prompts\": 4, \"max_new_tokens\": 64, \"val_size\": 4, \"val_every\": 2, \"ckpt_every\": 2, \"lr\": 1e-4, \"gpu_memory_utilization\": 0.3, \"verl_overrides\": $VERL_OVERRIDES"

echo "== 2a. verl GRPO, 2 steps ($DEVICE)"
"$PY" -m components.cli train-verl --params "{\"method\": \"grpo\", \"method_config\": {\"n\": 4}, $COMMON}" \
    --inputs "$INPUTS" --out "$WORK/train-grpo" --sweep smoke
echo "== 2b. verl VSR, 2 steps ($DEVICE)"
"$PY" -m components.cli train-verl --params "{\"method\": \"vsr\", \"method_config\": {\"n\": 4}, $COMMON}" \
    --inputs "$INPUTS" --out "$WORK/train-vsr" --sweep smoke

echo "== 3. evaluate (vLLM engine) on the GRPO model"
"$PY" - "$WORK" <<'PYEOF'
import json, sys
from pathlib import Path
from components.stages import evaluate
from components.stages.base import NullTracker, StageContext

work = Path(sys.argv[1])
model_dir = work / "train-grpo"
out = work / "eval-grpo"
out.mkdir(exist_ok=True)
ctx = StageContext(out_dir=out, work_dir=work / "eval-work", inputs={"model": model_dir, "hard": work / "hard"},
                   tracker=NullTracker())
summary = evaluate.run(evaluate.Params(label="grpo-verl", samples_per_seed=4, seeds=[0], pass_ks=[1, 4],
                                       max_new_tokens=64, engine="vllm"), ctx)
print(json.dumps(summary, indent=2))
PYEOF

echo "== report"
"$PY" - "$WORK" "$START" "$BUDGET" <<'PYEOF'
import json, sys, time
from pathlib import Path

work, start, budget = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for name in ("train-grpo", "train-vsr"):
    s = json.loads((work / name / "summary.json").read_text())
    rows = [json.loads(l) for l in (work / name / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    print(f"{name}: steps {s['steps']}, rollouts {s['rollouts']}, generated tokens {s['generated_tokens']}, "
          f"rewards {rewards}, val {s['final_val_accuracy']}, model files {sorted(p.name for p in (work / name / 'model').iterdir())}")
    if not rewards or max(rewards) <= 0:
        sys.exit(f"{name}: every training reward is 0 ({rewards}): no learning signal")
print("evaluate:", (work / "eval-grpo").exists() and sorted(p.name for p in (work / "eval-grpo").iterdir()))
print(f"wall time {time.time() - start:.0f}s (budget {budget}s)")
PYEOF
