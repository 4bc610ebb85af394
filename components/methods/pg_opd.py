"""PG-OPD: Prefix-Guided On-Policy Distillation (arXiv 2606.21994; from its abstract;
no public code; docs/methods.md §10). Rules, the abstract sentence each comes from, and
our choices ([ours], config knobs of :class:`PGOPDConfig`):

1. "On-policy distillation (OPD) improves reasoning models by applying dense teacher
   supervision on student-sampled trajectories." The loss is per-token reverse-KL REINFORCE
   on the student's own samples: A_t = log pi_T(a_t | s_t) - log pi_S(a_t | s_t), loss
   -sg(A_t) log pi_S(a_t | s_t) (:func:`opd_token_advantages`; docs/methods.md §10 [SEC]).
   The teacher's log-probs are computed at rollout time, the student's by the trainer inside
   its loss (the current policy), through the ``token_advantages`` hook; rewards are graded
   and logged but do not enter the loss [ours: the abstract's OPD has no task reward].
2. "PG-OPD computes teacher-student top-k overlap in an early probe window": every
   candidate is first decoded to ``prefix_tokens`` tokens; over the window of response
   positions [``probe_start``, ``probe_start`` + ``probe_tokens``) of that prefix, overlap =
   mean over positions of |topk(pi_S) ∩ topk(pi_T)| / k, k = ``top_k``
   (:func:`topk_overlap`; ``overlap: sampled`` = share of the student's sampled tokens in
   the teacher's top-k, which needs no student logits). Defaults [ours]: prefix 32, window
   the first 16 tokens, k = 8.
3. "and allocates long rollouts only to high-overlap candidates, while stopping the rest at
   the prefix length." :func:`select_continuations`: of the candidates still running at the
   prefix length, the top ``keep_fraction`` x (all candidates of the batch) by overlap
   continue to ``max_new_tokens`` (ties to the earlier candidate), or with ``threshold`` set,
   those with overlap >= threshold [ours: default top fraction 0.5 across the batch]. A
   stopped candidate keeps its prefix as its response (finish reason ``pruned``) and stays
   in the loss [ours: its tokens still carry dense teacher signal].
   ``prune: false`` is plain OPD: the same module, every candidate decoded to full length in
   one pass (no probe).

Teacher: ``resources["teacher"]`` (a loaded model, or the path of a model artifact: the
train stage passes the ``teacher`` input, the pretrain output of the model the sweep's
``method_config.pg_opd.teacher`` names), else ``teacher_path`` (a model directory). It must
share the student's tokenizer. Budget: a step generates B n probe sequences plus one
continuation request per continued candidate; ``rollouts_per_step`` is the upper bound and
``step_stats()["rollouts"]`` the count (a variable-budget method, like DAPO).
On verl: ``verl_overrides`` turns the config into verl 0.9.1's distillation settings
(teacher model path, policy-gradient reverse-KL loss); the prefix pruning itself runs only
in the embedded trainer (verl refuses per-token-advantage methods).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from components.data.schema import Problem
from components.methods.base import Group, Method, MethodConfig, RolloutContext

if TYPE_CHECKING:
    import torch


# ---------------------------------------------------------------------------- the rules
def topk_overlap(student_logits, teacher_logits, k: int) -> float:
    """Mean over window positions of |topk(student) ∩ topk(teacher)| / k ([W, V] each)."""
    s, t = np.asarray(student_logits, dtype=float), np.asarray(teacher_logits, dtype=float)
    if s.shape != t.shape or s.ndim != 2:
        raise ValueError(f"topk_overlap: shapes {s.shape} and {t.shape} must be equal [W, V]")
    if len(s) == 0:
        return 0.0
    k = min(k, s.shape[1])
    ts = np.argsort(-s, axis=1, kind="stable")[:, :k]
    tt = np.argsort(-t, axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ts.tolist(), tt.tolist())]))


def sampled_in_topk(tokens: Sequence[int], teacher_logits, k: int) -> float:
    """Share of the sampled tokens that are in the teacher's top-k at their position."""
    t = np.asarray(teacher_logits, dtype=float)
    if len(tokens) == 0:
        return 0.0
    top = np.argsort(-t, axis=1, kind="stable")[:, :min(k, t.shape[1])]
    return float(np.mean([tok in set(row) for tok, row in zip(tokens, top.tolist())]))


def select_continuations(overlap: Sequence[float], running: Sequence[bool], keep_fraction: float | None,
                         threshold: float | None) -> list[bool]:
    """Which candidates continue: running ones with overlap >= threshold, or the top
    round(keep_fraction x all candidates) running ones by overlap (ties: earlier first)."""
    ov, run = np.asarray(overlap, dtype=float), np.asarray(running, dtype=bool)
    if threshold is not None:
        return (run & (ov >= threshold)).tolist()
    m = int(round(float(keep_fraction) * len(ov)))
    idx = [i for i in np.lexsort((np.arange(len(ov)), -ov)).tolist() if run[i]][:m]
    keep = np.zeros(len(ov), dtype=bool)
    keep[idx] = True
    return keep.tolist()


def opd_token_advantages(teacher_logp, student_logp, mask):
    """A_t = (log pi_T - log pi_S) on response tokens, 0 elsewhere (torch tensors [n, T])."""
    return (teacher_logp - student_logp) * mask


def token_logprobs(model, sequences: Sequence[Sequence[int]], starts: Sequence[int], pad_id: int,
                   with_logits_window: tuple[int, int] | None = None, chunk: int = 64):
    """Per sequence: log-prob of each token from ``start`` on given its past (list of lists);
    and, with ``with_logits_window`` (a, b), the logits predicting tokens start+a .. start+b-1.
    Forward passes of ``chunk`` sequences at a time."""
    out, win = [], []
    for i in range(0, len(sequences), chunk):
        o, w = _token_logprobs(model, sequences[i:i + chunk], starts[i:i + chunk], pad_id, with_logits_window)
        out += o
        win += w
    return out, win


def _token_logprobs(model, sequences, starts, pad_id, with_logits_window):
    import torch

    from components.trainer.sequences import pad_rows

    ids, att = pad_rows(sequences, pad_id)
    with torch.inference_mode():
        dev = next(model.parameters()).device
        ids, att = ids.to(dev), att.to(dev)
        logits = model(input_ids=ids, attention_mask=att, use_cache=False).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    out, win = [], []
    for i, (s, st) in enumerate(zip(sequences, starts)):
        out.append(logp[i, st - 1:len(s) - 1].tolist())
        if with_logits_window is not None:
            a, b = with_logits_window
            hi = min(st + b, len(s))
            win.append(logits[i, st - 1 + a:hi - 1].cpu().numpy())
    return out, win


# ---------------------------------------------------------------------------- the method
class PGOPDConfig(MethodConfig):
    n: int = Field(4, ge=1, description="candidates per prompt")
    teacher: str | None = Field(None, description="the sweep's model name whose pretrain output is the teacher")
    teacher_path: str | None = Field(None, description="a teacher model directory (when no stage input)")
    prune: bool = True
    prefix_tokens: int = Field(32, ge=1)
    probe_start: int = Field(0, ge=0)
    probe_tokens: int = Field(16, ge=1)
    top_k: int = Field(8, ge=1)
    overlap: Literal["topk", "sampled"] = "topk"
    keep_fraction: float | None = Field(0.5, ge=0.0, le=1.0)
    threshold: float | None = Field(None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _window(self):
        if self.probe_start + self.probe_tokens > self.prefix_tokens:
            raise ValueError(f"probe window [{self.probe_start}, {self.probe_start + self.probe_tokens}) "
                             f"must lie inside the prefix ({self.prefix_tokens} tokens)")
        if (self.keep_fraction is None) == (self.threshold is None):
            raise ValueError("set exactly one of keep_fraction and threshold")
        return self


class PGOPD(Method):
    name = "pg_opd"
    Config = PGOPDConfig
    per_token_advantages = True

    def __init__(self, config: PGOPDConfig):
        super().__init__(config)
        self.teacher = None
        self.pad_id = 0
        self._teacher_logp: dict[str, list[list[float]]] = {}   # group uid -> per sample, per response token
        self._rows: list[list[float]] = []

    def setup(self, problems: Sequence[Problem], resources: dict[str, Any]) -> None:
        spec = resources.get("teacher") or self.config.teacher_path
        if spec is None:
            raise ValueError("pg_opd: no teacher (give the train stage a 'teacher' input via "
                             "method_config.pg_opd.teacher, or set teacher_path)")
        if hasattr(spec, "forward"):
            import copy
            self.teacher = copy.deepcopy(spec)         # the caller's model is left as it was
        else:
            from pathlib import Path

            from components.stages.common import load_model
            self.teacher, _ = load_model(Path(spec))
        self.teacher.eval().requires_grad_(False)
        tok = resources.get("tokenizer")
        if tok is not None:
            self.pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)

    def rollouts_per_step(self, batch_size: int) -> int:
        c = self.config
        return batch_size * c.n * (2 if c.prune else 1)      # upper bound: every candidate continued

    def _student(self, ctx: RolloutContext):
        model = getattr(ctx.engine, "model", None)
        if model is None:
            raise ValueError("pg_opd: overlap 'topk' needs the student's logits; this engine exposes no "
                             "model (use overlap: sampled)")
        return model

    def rollout(self, batch: Sequence[Problem], ctx: RolloutContext, rng: np.random.Generator) -> list[Group]:
        if self.teacher is None:
            raise ValueError("pg_opd: setup() was not called with a teacher")
        c, H = self.config, ctx.sampling.max_new_tokens
        items = ctx.prompt_items(batch)
        Lp = min(c.prefix_tokens, H)
        if not c.prune or Lp >= H:
            groups = ctx.sample_groups(items, c.n)
            cont_n, probe = 0, [float("nan")]
        else:
            short = dataclasses.replace(ctx, sampling=dataclasses.replace(ctx.sampling, max_new_tokens=Lp))
            groups = short.sample_groups(items, c.n)
            flat = [(gi, i) for gi, g in enumerate(groups) for i in range(g.n)]
            seqs = [tuple(groups[gi].context_ids) + tuple(groups[gi].responses[i]) for gi, i in flat]
            starts = [len(groups[gi].context_ids) for gi, _ in flat]
            win = (c.probe_start, c.probe_start + c.probe_tokens)
            _, t_win = token_logprobs(self.teacher, seqs, starts, self.pad_id, win)
            if c.overlap == "topk":
                _, s_win = token_logprobs(self._student(ctx), seqs, starts, self.pad_id, win)
                probe = [topk_overlap(s, t, c.top_k) for s, t in zip(s_win, t_win)]
            else:
                probe = [sampled_in_topk(groups[gi].responses[i][win[0]:win[1]], t, c.top_k)
                         for (gi, i), t in zip(flat, t_win)]
            running = [groups[gi].finish_reasons[i] == "length" for gi, i in flat]
            keep = select_continuations(probe, running, c.keep_fraction, c.threshold)
            cont = [(gi, i) for (gi, i), k in zip(flat, keep) if k]
            cont_n = len(cont)
            self._continue(groups, cont, ctx, H - Lp)
            for gi, g in enumerate(groups):
                g.meta["pgopd_overlap"] = [p for (gj, _), p in zip(flat, probe) if gj == gi]
        self._score_teacher(groups)
        n_probe = sum(g.n for g in groups)
        # continued_frac: share of candidates decoded past the prefix (plain OPD: all of them)
        frac = cont_n / max(n_probe, 1) if c.prune and Lp < H else 1.0
        self.last_stats = {"rollouts": float(n_probe + cont_n), "continued": float(cont_n),
                           "continued_frac": frac, "overlap_mean": float(np.mean(probe))}
        return groups

    def _continue(self, groups: list[Group], cont: list[tuple[int, int]], ctx: RolloutContext, rest: int) -> None:
        """Decode the chosen candidates from their prefix to the full length; the rest stop."""
        for g in groups:
            g.finish_reasons = ["pruned" if f == "length" else f for f in g.finish_reasons]
        if not cont:
            return
        items = []
        for gi, i in cont:
            g = groups[gi]
            prob = Problem(uid=g.problem_uid, prompt="", answer=g.answer)
            items.append((prob, tuple(g.context_ids) + tuple(g.responses[i]), g.texts[i], g.prompt_len, f"{g.uid}#{i}"))
        longer = dataclasses.replace(ctx, sampling=dataclasses.replace(ctx.sampling, max_new_tokens=rest))
        for (gi, i), cg in zip(cont, longer.sample_groups(items, 1, seed_offset=1)):
            g = groups[gi]
            g.responses[i] = tuple(g.responses[i]) + tuple(cg.responses[0])
            g.texts[i], g.rewards[i] = cg.texts[0], cg.rewards[0]
            g.reasons[i], g.finish_reasons[i] = cg.reasons[0], cg.finish_reasons[0]

    def _score_teacher(self, groups: list[Group]) -> None:
        flat = [(g, i) for g in groups for i in range(g.n)]
        lp, _ = token_logprobs(self.teacher, [tuple(g.context_ids) + tuple(g.responses[i]) for g, i in flat],
                               [len(g.context_ids) for g, _ in flat], self.pad_id)
        self._teacher_logp = {}
        for (g, i), v in zip(flat, lp):
            self._teacher_logp.setdefault(g.uid, []).append(v)

    # ---- the loss ----------------------------------------------------------------
    def token_advantage_groups(self, groups: Sequence[Group]) -> list[bool]:
        missing = [g.uid for g in groups if not g.supervised and g.uid not in self._teacher_logp]
        if missing:
            raise ValueError(f"pg_opd: no teacher log-probs for group {missing[0]} (not from this step's rollout)")
        self._rows = [self._teacher_logp[g.uid][i] for g in groups for i in range(g.n)] if groups else []
        return [not g.supervised for g in groups]

    def token_advantages(self, entropy: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor,
                         rows: torch.Tensor | None = None, logp: torch.Tensor | None = None) -> torch.Tensor:
        """A_t = log pi_T - log pi_S on each row's response tokens (rows: the step's sample
        indices, in ``token_advantage_groups`` order; logp: the student's detached log-probs)."""
        import torch

        if rows is None or logp is None:
            raise ValueError("pg_opd: the trainer must pass rows and the student's log-probs to token_advantages")
        teacher = torch.zeros_like(mask, dtype=logp.dtype)
        for j, r in enumerate(rows.tolist()):
            pos = torch.nonzero(mask[j] > 0).flatten()
            t = self._rows[r]
            if len(t) < len(pos):
                raise ValueError(f"pg_opd: row {r} has {len(pos)} response tokens, teacher scored {len(t)}")
            teacher[j, pos] = torch.tensor(t[:len(pos)], dtype=logp.dtype, device=logp.device)
        return opd_token_advantages(teacher, logp.detach(), mask.to(logp.dtype))

    def verl_overrides(self, teacher_path: str) -> list[str]:
        """verl 0.9.1 distillation settings for this config: reverse KL (k1) as a policy-gradient
        term against the teacher at ``teacher_path`` (the prefix pruning is embedded-only)."""
        return ["distillation.enabled=true",
                f"distillation.teacher_models.teacher_model.model_path={teacher_path}",
                "distillation.teacher_models.teacher_model.num_replicas=1",
                "distillation.distillation_loss.loss_mode=k1",
                "distillation.distillation_loss.use_policy_gradient=true",
                "distillation.distillation_loss.use_task_rewards=false"]
