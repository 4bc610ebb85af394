"""The paper sweeps (dags/sweeps/{vigor_table1,vip_table,vsr_table1,vsr_agentic}.yaml) against what
the papers state (analysis/paper_knobs.py): every stated value is the one set, every training knob
is set in the file (none falls back to the tiny policy's default), every unstated one is marked,
and the verl config the math sweeps render carries the papers' lengths, validation interval and
update count. A row the sweep model cannot express yet names the missing field."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from analysis.paper_knobs import AGENTIC_TRAIN_KNOBS, KNOBS, PAPER_SWEEPS, TRAIN_KNOBS, Knob
from components.sweep import Sweep, load_sweep

SWEEPS = Path(__file__).resolve().parents[2] / "dags" / "sweeps"
MARKERS = ("[not in the paper]", "[verl-agent]", "[derived]", "[reading]")
# a train param set at the sweep's top level (one budget for every stage that generates)
TOP_LEVEL = {"max_new_tokens": "max_response_tokens", "max_prompt_length": "max_prompt_tokens"}


def sweep(name: str) -> Sweep:
    return load_sweep(SWEEPS / f"{name}.yaml")


# what the train config's fields add up to (TrainConfig properties), read from the config
DERIVED = ("updates_per_step",)


def _train_value(params: dict, key: str):
    if key in DERIVED:
        from components.stages.train import Params
        return getattr(Params(**params), key)
    return params[key]


def values_of(cfg: Sweep, field: str) -> list:
    """The value(s) a field path holds: one per method for ``stages.train.*``."""
    head, _, rest = field.partition(".")
    if head == "stages":
        stage, key = rest.split(".", 1)
        if stage == "train":
            return [_train_value(cfg.train_params(m, 0), key) for m in cfg.methods]
        if stage == "prepare_data" and key.startswith("mixtures."):     # a mixture: its parts' sources
            return [[p["source"] for p in cfg.stages.prepare_data["mixtures"][key.split(".", 1)[1]]]]
        return [getattr(cfg.stages, stage)[key]]
    if head == "model_data":
        return [cfg.model_data[rest]]
    if head == "model_train":             # model names hold dots: the key is the last part
        model, key = rest.rsplit(".", 1)
        return [_train_value(cfg.train_params(m, 0, model), key) for m in cfg.methods]
    if head in ("method_config", "method_train"):
        method, key = rest.split(".", 1)
        return [getattr(cfg, head)[method][key]]
    if head == "kubernetes":
        res, stage, key = rest.split(".")
        return [getattr(getattr(cfg.kubernetes, res)[stage], key)]
    return [getattr(cfg, field)]


def _id(k: Knob) -> str:
    return f"{k.sweep}:{k.field}={k.value}"


@pytest.mark.parametrize("knob", [k for k in KNOBS if not k.missing], ids=_id)
def test_seed_stated_value_is_the_one_set(knob):
    got = values_of(sweep(knob.sweep), knob.field)
    for v in got:
        if knob.field.endswith("verl_overrides"):
            assert knob.value in v, f"{knob.sweep}: {knob.field} lacks {knob.value} ({knob.where}: {knob.says})"
        else:
            assert v == knob.value, f"{knob.sweep}: {knob.field} is {v!r}, the paper's is {knob.value!r} ({knob.where})"


def test_a_row_not_yet_expressible_names_a_field_still_missing():
    """A row marked missing whose field now exists has to become a checked row (none at present)."""
    for knob in (k for k in KNOBS if k.missing):
        module, _, rest = knob.missing.partition(":")
        model, field = rest.split(".")
        cls = getattr(importlib.import_module(module), model)
        assert field not in cls.model_fields, f"{knob.sweep}: {knob.missing} exists: check {knob.field} in the sweep"


def _train_block(text: str) -> str:
    m = re.search(r"^  train:\n((?:    .*\n|\s*#.*\n)+)", text, re.M)
    assert m, "no block-style stages.train"
    return m.group(1)


@pytest.mark.parametrize("name", PAPER_SWEEPS)
def test_every_training_knob_is_explicit(name):
    cfg = sweep(name)
    agentic = cfg.task_of(cfg.methods[0]) == "agentic"
    knobs = AGENTIC_TRAIN_KNOBS if agentic else TRAIN_KNOBS
    for m in cfg.methods:
        explicit = {**cfg.stages.train, **cfg.method_train.get(m, {})}
        missing = [k for k in knobs if k not in explicit]
        assert not missing, f"{name}: method {m} takes {missing} from the train stage's defaults"
    assert cfg.train_params(cfg.methods[0], 0)["n_gpus_per_node"] == cfg.kubernetes.resources["train"].gpus


def test_unstated_knobs_are_marked():
    """Every training knob no row of the table covers is set on its own line with a marker."""
    for name in PAPER_SWEEPS:
        cfg = sweep(name)
        knobs = AGENTIC_TRAIN_KNOBS if cfg.task_of(cfg.methods[0]) == "agentic" else TRAIN_KNOBS
        stated = {k.field.split(".")[-1] for k in KNOBS if k.sweep == name and k.field.startswith("stages.train.")}
        text = (SWEEPS / f"{name}.yaml").read_text()
        block = _train_block(text)
        unmarked = []
        for k in knobs:
            if k in stated or k in ("backend", "adv_estimator", "prompt_template"):
                continue
            line = re.search(rf"^\s*{TOP_LEVEL.get(k, k)}:.*$", text if k in TOP_LEVEL else block, re.M)
            assert line, f"{name}: {k} is not set on a line of its own"
            if not any(mk in line.group(0) for mk in MARKERS):
                unmarked.append(line.group(0).strip())
        assert not unmarked, f"{name}: unstated knobs without a marker: {unmarked}"


def _rendered(name: str, method: str, model: str | None = None):
    from components.stages.train import Params
    from components.trainer.train_config import train_config_of
    from components.trainer.verl.hydra_config import compose, overrides, samples_per_prompt

    p = Params(**sweep(name).train_params(method, 0, *([model] if model else [])))
    cfg = train_config_of(p)
    return compose(overrides(cfg, model_path="/models/m", work_dir="/tmp/w", n=samples_per_prompt(cfg), project=name,
                             experiment=method, n_gpus_per_node=p.n_gpus_per_node,
                             max_prompt_length=p.max_prompt_length, gpu_memory_utilization=p.gpu_memory_utilization,
                             extra=p.verl_overrides))


@pytest.fixture(scope="module")
def vigor_verl():
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    return _rendered("vigor_table1", "vigor")


def test_vigor_rendered_verl_config_has_the_papers_values(vigor_verl):
    c, a = vigor_verl, vigor_verl.actor_rollout_ref
    assert (c.data.max_prompt_length, c.data.max_response_length) == (1536, 2560)
    assert c.trainer.test_freq == 5 and c.trainer.n_gpus_per_node == 8
    assert a.actor.optim.lr == 1e-6 and a.actor.use_kl_loss is False and a.actor.ppo_epochs == 4
    assert a.rollout.gpu_memory_utilization == 0.5
    assert a.ref.log_prob_micro_batch_size_per_gpu == 32 and a.ref.fsdp_config.param_offload is True
    assert (a.rollout.val_kwargs.top_p, a.rollout.val_kwargs.temperature) == (0.7, 1.0)


def test_vigor_rendered_verl_config_has_the_papers_mini_batch(vigor_verl):
    a = vigor_verl.actor_rollout_ref.actor
    assert (vigor_verl.data.train_batch_size, a.ppo_mini_batch_size, a.ppo_epochs) == (160, 32, 4)   # 5 x 4 = 20


def test_vigor_rendered_verl_config_of_7b_has_its_mini_batch():
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    c = _rendered("vigor_table1", "vigor", "Qwen/Qwen2.5-7B")
    a = c.actor_rollout_ref.actor
    assert (c.data.train_batch_size, a.ppo_mini_batch_size, a.ppo_epochs) == (640, 64, 2)            # 10 x 2 = 20


@pytest.mark.parametrize("name,method,want", [
    ("vip_table", "vip", {"algorithm.adv_estimator": "rloo", "actor_rollout_ref.actor.use_kl_loss": False,
                          "data.max_prompt_length": 1024, "data.max_response_length": 3072}),
    ("vip_table", "grpo", {"algorithm.adv_estimator": "rloo", "actor_rollout_ref.rollout.n": 8}),
    ("vsr_table1", "vsr", {"data.train_batch_size": 128, "actor_rollout_ref.rollout.n": 8,
                           "trainer.n_gpus_per_node": 4, "algorithm.adv_estimator": "grpo"}),
    ("vsr_table1", "reinforce_ada_est", {"data.train_batch_size": 128, "algorithm.norm_adv_by_std_in_grpo": False}),
])
def test_paper_estimators_and_budgets_reach_the_rendered_verl_config(name, method, want):
    pytest.importorskip("verl", reason="verl (the GPU backend) is not installed in this environment")
    from omegaconf import OmegaConf

    c = _rendered(name, method)
    got = {k: OmegaConf.select(c, k) for k in want}
    assert got == want
