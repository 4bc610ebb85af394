"""Does one GRPO update of the embedded trainer move the policy the right way, and by how much?

On a finished sweep's base policy and training prompts: samples 16 prompts x 8 with the
trainer's engine, checks that the samples follow the model's own distribution (mean NLL of
the sampled tokens vs the model's entropy at those positions), then applies ONE update
(``EmbeddedTrainer.update``) per learning rate, from the same starting weights, and prints the
change of each response's log-probability by the sign of its advantage. A sound update raises
the positive-advantage responses and lowers the negative ones; a step that lowers everything
by nats is too large (AdamW moves every parameter by about lr whatever the gradient's size).

    RLVR_HOME=... .venv/bin/python bench/rl_update_direction.py MODEL_ARTIFACT HARD_ARTIFACT [LR ...]
      (default LRs: 2e-4 2e-5 5e-6; artifacts: a pretrain and a filter_hard output directory)
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(model_dir: str, hard_dir: str, lrs: list[float]) -> None:
    import torch

    from components.data.schema import read_problems
    from components.stages.base import NullTracker
    from components.stages.common import grade_fn, load_model
    from components.trainer.sequences import build_sequences, response_logprobs
    from components.trainer.train_config import TrainConfig
    from components.algos.advantages import adv_estimator
    from components.trainer.embedded import EmbeddedTrainer

    torch.set_num_threads(1)
    model, tok = load_model(Path(model_dir))
    problems = read_problems(Path(hard_dir) / "train.jsonl")[:16]
    grade = grade_fn()
    try:
        base = EmbeddedTrainer(TrainConfig(max_new_tokens=128, val_size=0, method_config={"n": 8}),
                               copy.deepcopy(model), tok, grade, NullTracker())
        ctx = base.rollout_ctx(0, 0)
        groups = ctx.sample_groups(ctx.prompt_items(problems), 8)
    finally:
        grade.grader.close()
    seqs = build_sequences(groups, tok.pad_token_id)
    mask = seqs.response_mask
    adv = adv_estimator("grpo")(seqs, None)
    model.eval()
    with torch.no_grad():
        logp0, ent = response_logprobs(model, seqs.input_ids, seqs.attention, with_entropy=True)
    print(f"{len(problems)} prompts x 8: reward {float(seqs.rewards.mean()):.3f}; sampled tokens' mean NLL "
          f"{float((-logp0 * mask).sum() / mask.sum()):.4f} vs the model's entropy there "
          f"{float((ent * mask).sum() / mask.sum()):.4f} (equal when the engine samples the model)")
    print("| lr | Δ log p, advantage > 0 | advantage < 0 | advantage = 0 | grad norm |")
    print("|---|---|---|---|---|")
    for lr in lrs:
        tr = EmbeddedTrainer(TrainConfig(max_new_tokens=128, val_size=0, lr=lr, method_config={"n": 8}),
                             copy.deepcopy(model), tok, lambda t, g: [], NullTracker())
        stats = tr.update(groups)
        tr.model.eval()
        with torch.no_grad():
            logp1, _ = response_logprobs(tr.model, seqs.input_ids, seqs.attention)
        d = ((logp1 - logp0) * mask).sum(-1)
        cells = [f"{float(d[sel].mean()):+.3f}" if sel.any() else "-" for sel in (adv > 0, adv < 0, adv == 0)]
        print(f"| {lr:g} | {' | '.join(cells)} | {stats['grad_norm']:.3f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3:]] or [2e-4, 2e-5, 5e-6])
