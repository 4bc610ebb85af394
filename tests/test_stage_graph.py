"""The stage graph's own rules (components/stage_graph.py), which every orchestrator emits:
each call reads the upstream results of ITS model (or trained run), a distilling method gets
its teacher's pretrain output, the tables' inputs keep the grid and eval order whatever order
a fan-in hands results over, and upstream results that do not fit the sweep fail in one line
naming the stage that produced them."""
from __future__ import annotations

import random

import pytest

from components import stage_graph
from components.stage_graph import GraphError, calls, walk
from components.sweep import parse_sweep

SWEEP = {"name": "g", "seeds": [0, 1], "models": ["tiny", "small"], "teachers": ["tiny_long"],
         "model_specs": {"tiny": {}, "small": {"seed": 3}, "tiny_long": {"steps": 600}},
         "methods": ["grpo", "pg_opd"], "method_config": {"pg_opd": {"teacher": "tiny_long"}},
         "benchmarks": ["aime24"]}


@pytest.fixture
def cfg():
    return parse_sweep(SWEEP, "g.yaml")


def uri(stage: str, cell: str) -> str:
    return f"file:///{stage}/{cell}"


def run(c: dict) -> dict:
    """A result whose URI names the call that made it."""
    return {"stage": c["stage"], "uri": uri(c["stage"], c["cell"])}


def test_each_call_reads_its_own_cells_results(cfg):
    made, results = walk(cfg, run)
    by = {(c["stage"], c["cell"]): c for c in made}
    assert [c["cell"] for c in made if c["stage"] == "pretrain"] == ["tiny", "small", "tiny-long"]
    assert [c["cell"] for c in made if c["stage"] == "filter_hard"] == ["tiny", "small"]   # a teacher is not filtered
    for m in ("tiny", "small"):
        assert by["filter_hard", m]["inputs"] == {"data": uri("prepare_data", "data"), "model": uri("pretrain", m)}
        assert by["seed_prefixes", m]["inputs"] == {"hard": uri("filter_hard", m)}
        assert by["train", f"{m}-grpo-s1"]["inputs"] == {
            "model": uri("pretrain", m), "hard": uri("filter_hard", m), "prefixes": uri("seed_prefixes", m)}
        assert by["train", f"{m}-pg_opd-s0"]["inputs"]["teacher"] == uri("pretrain", "tiny-long")
        # a trained run is scored by its own artifact, a base or teacher by its pretrain output,
        # each on the held-out set of the model it belongs to
        assert by["evaluate", f"{m}-grpo-s1@aime24"]["inputs"] == {
            "model": uri("train", f"{m}-grpo-s1"), "hard": uri("filter_hard", m)}
        assert by["evaluate", f"{m}-base"]["inputs"] == {"model": uri("pretrain", m), "hard": uri("filter_hard", m)}
        assert by["evaluate", f"{m}-teacher-tiny-long"]["inputs"] == {
            "model": uri("pretrain", "tiny-long"), "hard": uri("filter_hard", m)}
    assert by["evaluate", "small-base@aime24"]["extra"] == {"label": "small-base@aime24", "model": "small",
                                                            "benchmark": "aime24"}
    assert by["train", "tiny-grpo-s0"]["extra"] == {"model": "tiny", "method": "grpo", "seed": 0, "key": "tiny-grpo-s0"}
    # results reach later stages labelled with their cell: one result, or the list of them
    assert results["data"]["uri"] == uri("prepare_data", "data")
    assert [r["model"] for r in results["models"]] == ["tiny", "small", "tiny_long"]
    assert len(results["evals"]) == len(cfg.eval_cells()) == 2 * (4 + 2) * 2


def test_tables_inputs_keep_the_sweeps_order_whatever_the_fan_in_order(cfg):
    _, results = walk(cfg, run)
    rng = random.Random(0)
    shuffled = {k: rng.sample(v, len(v)) if isinstance(v, list) else v for k, v in results.items()}
    [tables] = calls(cfg, "tables", shuffled)
    keys = list(tables["inputs"])
    assert keys == [f"eval_{e['label']}" for e in cfg.eval_cells()] + [f"run_{g['key']}" for g in cfg.grid()] \
        + ["tokens"]
    assert calls(cfg, "tables", shuffled) == calls(cfg, "tables", results)


def test_a_changed_call_changes_every_uri_downstream(cfg):
    made, results = walk(cfg, stage_graph.dry_result)

    def changed(c):
        if c["stage"] == "pretrain" and c["cell"] == "small":
            c = {**c, "params": {**c["params"], "seed": 4}}
        return stage_graph.dry_result(c)

    made2, _ = walk(cfg, changed)
    differ = {(a["stage"], a["cell"]) for a, b in zip(made, made2) if a["inputs"] != b["inputs"]}
    assert ("filter_hard", "small") in differ and ("train", "small-grpo-s0") in differ
    assert ("tables", "tables") in differ and ("filter_hard", "tiny") not in differ


def test_results_that_do_not_fit_fail_naming_the_stage(cfg):
    _, results = walk(cfg, run)
    up = {k: results[k] for k in stage_graph.BY_NAME["train"].needs}
    with pytest.raises(GraphError, match=r"^train: missing upstream results: prefixes$"):
        calls(cfg, "train", {**up, "prefixes": None})
    with pytest.raises(GraphError, match=r"^filter_hard: no result for 'small' \(have: tiny\)$"):
        calls(cfg, "train", {**up, "hard": [r for r in up["hard"] if r["model"] == "tiny"]})
    with pytest.raises(GraphError, match=r"^pretrain: result without 'model' or 'uri'"):
        calls(cfg, "train", {**up, "models": [{"uri": "file:///x"}]})
    with pytest.raises(GraphError, match=r"^train: no cell 'tiny-vsr-s0' in sweep 'g'$"):
        stage_graph.call_for(cfg, "train", up, "tiny-vsr-s0")
    with pytest.raises(GraphError, match=r"^unknown stage 'trian'"):
        calls(cfg, "trian", {})


def test_the_graph_is_closed():
    """Every stage reads only results of stages before it, and each result name is one stage's."""
    seen: set[str] = set()
    for s in stage_graph.STAGES:
        assert set(s.needs) <= seen, s.name
        assert s.fan in ("one", "model", "grid", "eval") and s.name in stage_graph.CALLS
        seen.add(s.result)
    assert len(seen) == len(stage_graph.STAGES) and set(stage_graph.CALLS) == set(stage_graph.BY_NAME)


def test_one_filter_model_gives_every_model_its_hard_subset():
    # the VSR paper filters once, with one model, and trains every model on that subset
    cfg = parse_sweep({**SWEEP, "stages": {"filter_hard": {"filter_model": "small"}}}, "g.yaml")
    made, _ = walk(cfg, run)
    assert [c["cell"] for c in made if c["stage"] == "filter_hard"] == ["small"]
    hard = {(c["stage"], c["cell"]): c["inputs"]["hard"] for c in made if "hard" in c["inputs"]}
    assert set(hard.values()) == {uri("filter_hard", "small")}
    assert {cell.split("-")[0] for s, cell in hard if s == "train"} == {"tiny", "small"}


def test_a_filter_model_outside_the_models_is_refused_in_one_line():
    with pytest.raises(ValueError) as e:
        parse_sweep({**SWEEP, "stages": {"filter_hard": {"filter_model": "tiny_long"}}}, "g.yaml")
    msg = str(e.value)
    assert "stages.filter_hard.filter_model" in msg and "tiny_long" in msg and "\n" not in msg.strip()


def test_model_train_sits_between_the_stage_block_and_method_train():
    cfg = parse_sweep({**SWEEP, "stages": {"train": {"steps": 5, "lr": 1e-3}},
                       "model_train": {"small": {"steps": 7, "lr": 2e-3}}, "method_train": {"grpo": {"lr": 3e-3}}},
                      "g.yaml")
    made, _ = walk(cfg, run)
    params = {c["cell"]: c["params"] for c in made if c["stage"] == "train"}
    assert (params["small-grpo-s0"]["steps"], params["small-grpo-s0"]["lr"]) == (7, 3e-3)
    assert (params["small-pg_opd-s0"]["steps"], params["small-pg_opd-s0"]["lr"]) == (7, 2e-3)
    assert (params["tiny-pg_opd-s0"]["steps"], params["tiny-pg_opd-s0"]["lr"]) == (5, 1e-3)
    with pytest.raises(ValueError, match="model_train.huge"):
        parse_sweep({**SWEEP, "model_train": {"huge": {"steps": 1}}}, "g.yaml")
