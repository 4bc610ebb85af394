"""Training mixtures (components/data/mixtures.py): prepare_data writes them beside the base set,
filter_hard reads a model's mixture where the sweep's model_data names one, and the sweep
refuses a model_data it could not honour. MATH and DAPO files in their public schemas, written
here; the full staged files where they are present."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from components import lineage
from components.data.mixtures import Part, load_mixture
from components.data.schema import read_problems
from components.error_text import FieldError
from components.sweep import Sweep, load_sweep

REPO = Path(__file__).resolve().parents[2]
STAGED = REPO.parent / "shared" / "data"


def jsonl(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def math_rows(n):
    return [{"problem": f"What is {i}*3?", "solution": f"\\boxed{{{3 * i}}}", "answer": str(3 * i),
             "level": "Level 2", "unique_id": f"train/algebra/{i}.json"} for i in range(n)]


def dapo_rows(n):
    return [{"data_source": "math_dapo", "prompt": [{"role": "user", "content": f"Find {i}+7."}],
             "reward_model": {"ground_truth": str(i + 7), "style": "rule"}, "extra_info": {"index": i}}
            for i in range(n)]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def test_prepare_data_writes_the_mixture_beside_the_base_set(home):
    math, dapo = jsonl(home / "math.jsonl", math_rows(20)), jsonl(home / "dapo.jsonl", dapo_rows(30))
    params = {"source": "math", "path": math, "heldout_fraction": 0.1, "seed": 2,
              "mixtures": {"math_dapo": [{"source": "math", "path": math}, {"source": "dapo17k", "path": dapo},
                                         {"source": "math", "path": math, "limit": 5}]}}
    res = lineage.run_stage("prepare_data", params, {}, sweep="mix")
    out = Path(res["uri"])
    base = read_problems(out / "train_pool.jsonl") + read_problems(out / "heldout_pool.jsonl")
    assert len(base) == 20 and all(p.uid.startswith("train/") for p in base)       # the base set is MATH alone
    d = out / "mixtures" / "math_dapo"
    train, held = read_problems(d / "train_pool.jsonl"), read_problems(d / "heldout_pool.jsonl")
    assert (len(train), len(held)) == (45, 5) == (res["summary"]["math_dapo/train_pool"],
                                                  res["summary"]["math_dapo/heldout_pool"])
    assert not {p.uid for p in train} & {p.uid for p in held}
    assert {p.uid.split("/")[0] for p in train + held} == {"train", "dapo17k"}
    stats = json.loads((d / "stats.json").read_text())
    assert stats["load"]["loaded"] == 50 and stats["load"]["duplicates"] == 5      # the third part: 5 seen already
    assert lineage.verify_manifest(out)
    # filter_hard (keep all) on the mixture's pools, and on the base set's by default
    kept = {}
    for mixture in (None, "math_dapo"):
        fh = {"keep_all": True, "max_prompts": 1000, **({"data_mixture": mixture} if mixture else {})}
        r = lineage.run_stage("filter_hard", fh, {"data": res["uri"], "model": res["uri"]}, sweep="mix")
        kept[mixture] = read_problems(Path(r["uri"]) / "train.jsonl")
    assert len(kept[None]) == 18 and [p.uid for p in kept["math_dapo"]] == [p.uid for p in train]
    with pytest.raises(Exception, match="no_such"):
        lineage.run_stage("filter_hard", {"keep_all": True, "data_mixture": "no_such"},
                          {"data": res["uri"], "model": res["uri"]}, sweep="mix")


def test_a_mixture_part_without_problems_is_refused(tmp_path):
    empty = jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(ValueError, match=r"mixture part math .*empty\.jsonl: no problems"):
        load_mixture([Part(source="math", path=empty)])


def _vigor(**change) -> dict:
    import yaml
    d = yaml.safe_load((REPO / "dags" / "sweeps" / "vigor_table1.yaml").read_text())
    d.update(change)
    return d


def test_the_sweep_gives_each_model_its_data():
    from components.stage_graph import planned_params

    cfg = load_sweep(REPO / "dags" / "sweeps" / "vigor_table1.yaml")
    filters = [p for stage, p in planned_params(cfg) if stage == "filter_hard"]
    assert sorted(p.get("data_mixture") or "base" for p in filters) == ["base", "base", "math_dapo", "math_dapo"]
    assert cfg.filter_params("Qwen/Qwen2.5-7B")["data_mixture"] == "math_dapo"
    assert "data_mixture" not in cfg.filter_params("Qwen/Qwen2.5-3B")


@pytest.mark.parametrize("change,match", [
    ({"model_data": {"Qwen/Qwen2.5-14B": "math_dapo"}}, "not one of the sweep's models"),
    ({"model_data": {"Qwen/Qwen2.5-7B": "math_orz"}}, "not one of stages.prepare_data.mixtures"),
])
def test_model_data_must_name_a_model_and_a_mixture(change, match):
    with pytest.raises((FieldError, ValueError), match=match):
        Sweep.model_validate(_vigor(**change))


def test_model_data_with_one_filter_model_is_refused():
    d = _vigor()
    d["stages"]["filter_hard"]["filter_model"] = "Qwen/Qwen2.5-3B"
    with pytest.raises((FieldError, ValueError), match="filter_model"):
        Sweep.model_validate(d)


def test_the_staged_math_and_dapo_files_mix():
    math = STAGED / "math_train" / "MATH_train12k_prm800k_style.jsonl"
    dapo = STAGED / "dapo_math_17k" / "dapo_math_17k.jsonl"
    for f in (math, dapo):
        if not f.is_file():
            pytest.skip(f"{f} missing: the full MATH train / DAPO-Math-17k files are staged beside the project")
    mix = load_mixture([Part(source="math", path=str(math)), Part(source="dapo17k", path=str(dapo))], on_error="skip")
    # each loader's own count (tests/data/test_loaders.py): 11998 MATH problems, 17243 DAPO prompts
    assert len(mix) == 11998 + 17243 and mix.report.skipped == 2 and mix.report.duplicates == 650
