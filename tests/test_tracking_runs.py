"""What a person sees in MLflow for one grid cell: readable run names, the cell's tags on
every stage run, params under a stage prefix, descriptions linking upstream runs, the git
commit, system metrics, weights + a registered model version, tables, and the evaluation's
numbers on the training run. Real MLflow (sqlite in tmp_path) with toy stages; the two toys
below write a real safetensors policy and an evaluation summary, as the real stages do."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import toy_stages
from components import lineage, run_card, tracking
from components.lineage import run_stage
from components.stages.base import StageParams


class policy_train(toy_stages.train):
    """toy train + a ``model/`` directory holding real weights, as the trainer saves them."""

    @staticmethod
    def run(params, ctx):
        import time

        import torch
        from safetensors.torch import save_file
        out = toy_stages._toy_run("train", params, ctx)
        time.sleep(1.2)  # long enough for a few system-metric samples at the test's interval
        (ctx.out_dir / "model").mkdir()
        save_file({"w": torch.full((64, 64), float(params.seed))}, str(ctx.out_dir / "model" / "model.safetensors"))
        (ctx.out_dir / "model" / "config.json").write_text(json.dumps({"method": params.method}))
        for step in range(3):
            ctx.tracker.log_metrics({"train/reward": 0.1 * step}, step=step)
        return out


class scored_evaluate(toy_stages.evaluate):
    """toy evaluate whose summary and CSV have the real stage's shape."""

    class Params(StageParams):
        label: str
        score: float = 0.25

    @staticmethod
    def run(params, ctx):
        toy_stages._toy_run("evaluate", params, ctx)
        (ctx.out_dir / "results.csv").write_text(f"label,mean_at_k\n{params.label},{params.score}\n")
        return {"label": params.label, "method": "x", "mean_at_k": params.score, "maj_at_k": params.score / 2,
                "pass_at_k": {"1": params.score, "4": 2 * params.score}}


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.3")
    for v in ("MLFLOW_TRACKING_URI", lineage.OVERRIDES_ENV, "TOY_FAIL", "TOY_SLEEP", "TOY_CALLS"):
        monkeypatch.delenv(v, raising=False)
    toy_stages.premigrated_mlflow_db(tmp_path / "rlvr")
    saved = dict(lineage.STAGES)
    for n in toy_stages.ALL:
        lineage.register_stage(n, f"toy_stages:{n}")
    lineage.register_stage("train", "test_tracking_runs:policy_train")
    lineage.register_stage("evaluate", "test_tracking_runs:scored_evaluate")
    yield tmp_path / "rlvr"
    lineage.STAGES.clear()
    lineage.STAGES.update(saved)


def _cell(sweep="sw", methods=("grpo", "vsr"), seed=0, score=0.25):
    """One model, its per-model stages and one train + evaluate per method, wired as the DAG does."""
    parent = tracking.start_sweep_run(sweep, {"name": sweep, "seeds": [seed], "methods": list(methods)})
    kw = {"sweep": sweep, "parent_run_id": parent}
    data = run_stage("prepare_data", {}, {}, **kw)
    model = run_stage("pretrain", {"model": "tiny"}, {"data": data["uri"]}, cell={"model": "tiny"}, **kw)
    hard = run_stage("filter_hard", {}, {"data": data["uri"], "model": model["uri"]}, cell={"model": "tiny"}, **kw)
    pre = run_stage("seed_prefixes", {}, {"hard": hard["uri"]}, cell={"model": "tiny"}, **kw)
    out = {"parent": parent, "pretrain": model, "filter_hard": hard}
    for m in methods:
        key = f"tiny-{m}-s{seed}"
        out[f"train {m}"] = run_stage("train", {"method": m, "seed": seed},
                                      {"model": model["uri"], "hard": hard["uri"], "prefixes": pre["uri"]},
                                      cell={"model": "tiny", "method": m, "seed": seed, "key": key}, **kw)
        out[f"evaluate {m}"] = run_stage("evaluate", {"label": key, "score": score},
                                         {"model": out[f"train {m}"]["uri"], "hard": hard["uri"]},
                                         cell={"model": "tiny", "label": key, "benchmark": None}, **kw)
    out["evaluate base"] = run_stage("evaluate", {"label": "tiny-base", "score": score},
                                     {"model": model["uri"], "hard": hard["uri"]},
                                     cell={"model": "tiny", "label": "tiny-base"}, **kw)
    return out


def _run(res):
    return lineage.client().get_run(res["run_id"])


def test_readable_names_and_cell_tags(home):
    cell = _cell()
    names = {k: _run(v).info.run_name for k, v in cell.items() if k != "parent"}
    assert names == {"pretrain": "pretrain tiny", "filter_hard": "filter_hard tiny",
                     "train grpo": "train tiny grpo s0", "train vsr": "train tiny vsr s0",
                     "evaluate grpo": "evaluate tiny grpo s0", "evaluate vsr": "evaluate tiny vsr s0",
                     "evaluate base": "evaluate tiny base"}
    for m in ("grpo", "vsr"):  # training and evaluation of a cell carry the same four tags
        t, e = _run(cell[f"train {m}"]).data.tags, _run(cell[f"evaluate {m}"]).data.tags
        want = {"rlvr.model": "tiny", "rlvr.method": m, "rlvr.seed": "0", "rlvr.label": f"tiny-{m}-s0"}
        assert {k: t[k] for k in want} == want and {k: e[k] for k in want} == want
        assert t["rlvr.cache_key"] == cell[f"train {m}"]["cache_key"]       # the key stays a tag
    base = _run(cell["evaluate base"]).data.tags
    assert base["rlvr.method"] == "base" and base["rlvr.label"] == "tiny-base" and "rlvr.seed" not in base
    assert _run(cell["filter_hard"]).data.tags["rlvr.model"] == "tiny"
    assert "rlvr.method" not in _run(cell["filter_hard"]).data.tags
    tok = run_stage("tokens", {}, {f"run_{m}": cell[f"train {m}"]["uri"] for m in ("grpo", "vsr")}, sweep="sw")
    t = _run(tok).data.tags   # over two cells: the shared model only
    assert _run(tok).info.run_name == "tokens tiny" and "rlvr.seed" not in t and "rlvr.label" not in t
    sweep = lineage.client().get_run(cell["parent"])
    assert sweep.info.run_name.startswith("sweep sw ")


def test_cell_tags_inherited_without_a_cell(home):
    """`rlvr run-stage` without --extra: an evaluation takes its policy's cell from the
    training run (and from its manifest's params), the label from its own params."""
    cell = _cell(methods=("vsr",))
    ev = run_stage("evaluate", {"label": "again@math500", "score": 0.5},
                   {"model": cell["train vsr"]["uri"], "hard": cell["filter_hard"]["uri"]}, sweep="sw")
    t = _run(ev).data.tags
    assert (t["rlvr.model"], t["rlvr.method"], t["rlvr.seed"], t["rlvr.label"], t["rlvr.benchmark"]) == \
           ("tiny", "vsr", "0", "again", "math500")
    assert _run(ev).info.run_name == "evaluate tiny vsr s0 @math500"


def test_params_under_stage_prefix_description_and_commit(home):
    cell = _cell(methods=("vsr",))
    r = _run(cell["train vsr"])
    assert r.data.params["train.method"] == "vsr" and r.data.params["train.seed"] == "0"
    assert "seed" not in r.data.params and "method" not in r.data.params
    assert _run(cell["evaluate vsr"]).data.params["evaluate.label"] == "tiny-vsr-s0"
    note = r.data.tags["mlflow.note.content"]
    exp = r.info.experiment_id
    for name, res in (("model", cell["pretrain"]), ("hard", cell["filter_hard"])):
        link = f"#/experiments/{exp}/runs/{res['run_id']}?workflowType=machine_learning"
        assert f"- `{name}`: [{_run(res).info.run_name}]({link})" in note
    assert cell["train vsr"]["cache_key"] in note and cell["train vsr"]["uri"] in note
    commit = run_card.git_commit()
    assert commit and len(commit) == 40 and r.data.tags["mlflow.source.git.commit"] == commit


def test_experiment_opens_on_runs(home):
    _cell(methods=("vsr",))
    exp = lineage.client().get_experiment_by_name("sw")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    url = tracking.runs_url("http://127.0.0.1:5000/", exp.experiment_id)
    assert url == f"http://127.0.0.1:5000/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"


def test_system_metrics_on_training_runs_only(home):
    cell = _cell(methods=("vsr",))
    t = _run(cell["train vsr"]).data.metrics
    assert t.get("system/cpu_utilization_percentage") is not None, sorted(t)
    assert any(k.startswith("system/system_memory") for k in t)
    assert not any(k.startswith("system/") for k in _run(cell["evaluate vsr"]).data.metrics)


def test_weights_logged_as_model_and_registered_once(home, tmp_path):
    """The policy is a logged model that is an output of its training run (the Models column),
    holding the weights; the registry version points at that model; the held-out evaluation
    is also the model's metric."""
    c = lineage.client()
    cell = _cell()
    for m in ("grpo", "vsr"):
        rid = cell[f"train {m}"]["run_id"]
        run = _run(cell[f"train {m}"])
        assert [a.path for a in c.list_artifacts(rid, "model")] == []   # not twice: once, in the model
        [out] = run.outputs.model_outputs
        model = c.get_logged_model(out.model_id)
        assert (model.name, model.source_run_id, str(model.status)) == (f"sw-tiny-{m}", rid, "READY")
        assert model.params["train.method"] == m and model.tags["rlvr.label"] == f"tiny-{m}-s0"
        assert run.data.tags["rlvr.logged_model"] == model.model_id
        assert {a.path for a in c.list_logged_model_artifacts(model.model_id)} == {"model.safetensors", "config.json"}
        versions = c.search_model_versions(f"name = 'sw.tiny.{m}'")
        assert [(str(v.version), v.run_id, v.source) for v in versions] == [("1", rid, f"models:/{model.model_id}")]
        assert json.loads(c.get_logged_model(model.model_id).tags["mlflow.modelVersions"]) == \
               [{"name": f"sw.tiny.{m}", "version": "1"}]
        assert run.data.tags["rlvr.registered_model"] == f"sw.tiny.{m}/1"
        import mlflow
        with pytest.MonkeyPatch.context() as mp:   # as a user reads it: their shell names the store
            mp.setenv("MLFLOW_TRACKING_URI", lineage.tracking_uri())
            got = Path(mlflow.artifacts.download_artifacts(f"models:/sw.tiny.{m}/1", dst_path=str(tmp_path / m)))
        assert (got / "model.safetensors").read_bytes() == \
               (Path(cell[f"train {m}"]["uri"]) / "model" / "model.safetensors").read_bytes()
        assert {x.key: x.value for x in model.metrics}["heldout/mean_at_k"] == 0.25
    assert {a.path for a in c.list_artifacts(cell["pretrain"]["run_id"], "model")} == set()  # toy pretrain: none
    again = _cell()  # a cached rerun: no new run, no new version
    assert all(again[k]["cached"] for k in again if k != "parent")
    assert len(c.search_model_versions("name = 'sw.tiny.vsr'")) == 1
    forced = run_stage("train", {"method": "vsr", "seed": 0},
                       {n: lineage.read_manifest(cell["train vsr"]["uri"])["inputs"][n]["uri"]
                        for n in ("model", "hard", "prefixes")}, sweep="sw", force=True,
                       cell={"model": "tiny", "method": "vsr", "seed": 0})
    vs = sorted((str(v.version), v.run_id) for v in c.search_model_versions("name = 'sw.tiny.vsr'"))
    assert vs == [("1", cell["train vsr"]["run_id"]), ("2", forced["run_id"])]   # a version per run
    # the spooled outputs record replayed (an outage at the end): the same model, the same version
    rec = {"stage": "train", "final": forced["uri"], "ident": {"model": "tiny", "method": "vsr", "seed": "0",
                                                                "label": "tiny-vsr-s0"},
           "sweep": "sw", "key": forced["cache_key"], "summary": forced["summary"], "upstream": {}}
    lineage.log_outputs_record(forced["run_id"], rec)
    assert len(c.get_run(forced["run_id"]).outputs.model_outputs) == 1
    assert len(c.search_model_versions("name = 'sw.tiny.vsr'")) == 2
    import os
    assert "MLFLOW_TRACKING_URI" not in os.environ   # registering left the process's store as it was


def test_heavy_weights_stay_in_the_store(home, monkeypatch):
    monkeypatch.setenv(tracking.WEIGHTS_MAX_MB_ENV, "0.001")
    cell = _cell(methods=("vsr",))
    rid = cell["train vsr"]["run_id"]
    assert [a.path for a in lineage.client().list_artifacts(rid, "model")] == []
    run = _run(cell["train vsr"])
    assert "kept at" in run.data.tags["rlvr.weights"]
    model = lineage.client().get_logged_model(run.outputs.model_outputs[0].model_id)
    assert model.tags["mlflow.model.isExternal"] == "true"
    where = (Path(cell["train vsr"]["uri"]) / "model").as_uri()
    assert model.tags["rlvr.weights_uri"] == where
    v = lineage.client().search_model_versions("name = 'sw.tiny.vsr'")[0]
    assert v.source == where
    assert json.loads(lineage.client().get_logged_model(model.model_id).tags["mlflow.modelVersions"]) == \
           [{"name": "sw.tiny.vsr", "version": "1"}]


def test_evaluation_on_the_training_run_and_tables(home):
    cell = _cell(score=0.25)
    c = lineage.client()
    for m in ("grpo", "vsr"):
        r = _run(cell[f"train {m}"])
        assert r.data.metrics["heldout/mean_at_k"] == 0.25 and r.data.metrics["heldout/pass_at_4"] == 0.5
        assert r.data.tags["rlvr.eval.heldout"] == cell[f"evaluate {m}"]["run_id"]
    assert _run(cell["pretrain"]).data.metrics["heldout/mean_at_k"] == 0.25   # the base row
    ev = cell["evaluate vsr"]["run_id"]
    table = json.loads(Path(c.download_artifacts(ev, "tables/results.json")).read_text())
    assert table["columns"] == ["label", "mean_at_k"] and table["data"] == [["tiny-vsr-s0", 0.25]]
    logged = json.loads(_run(cell["evaluate vsr"]).data.tags["mlflow.loggedArtifacts"])
    assert {"path": "tables/results.json", "type": "table"} in logged


def test_rlvr_ui_prints_the_runs_url_and_serves_it(home, tmp_path):
    """No tracking server around: `rlvr ui SWEEP` prints the runs URL of the sweep's experiment
    and starts the MLflow UI on the local store, which then answers at that address."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from live_services import free_port
    _cell(methods=("vsr",))
    exp_id = lineage.client().get_experiment_by_name("sw").experiment_id
    port = free_port(8190, 8199)
    env = {**os.environ, "RLVR_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = subprocess.Popen([sys.executable, "-m", "components.cli", "ui", "sw", "--port", str(port)],
                         cwd=Path(__file__).resolve().parents[1], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        url = p.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}/#/experiments/{exp_id}/runs?workflowType=machine_learning"
        deadline = time.monotonic() + 240
        while True:
            assert p.poll() is None, "the MLflow UI exited"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the MLflow UI did not answer within 240 s"
            time.sleep(1)
        got = httpx.get(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get",
                        params={"experiment_id": exp_id}, timeout=10).json()
        assert got["experiment"]["name"] == "sw"
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)


def test_rlvr_ui_names_a_missing_sweep(home):
    import os
    import subprocess
    import sys
    _cell(methods=("vsr",))
    env = {**os.environ, "RLVR_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    r = subprocess.run([sys.executable, "-m", "components.cli", "ui", "nope"], cwd=Path(__file__).resolve().parents[1],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip() == f"no MLflow experiment 'nope' in sqlite:///{home / 'mlflow.db'}"


def test_whole_run_wall_time_over_reruns(home):
    """A cleared and rerun sweep closes its run twice: the run records the whole span, first
    start to last end, with each close, not the rerun's time alone."""
    from components import sweep_runs
    c = lineage.client()
    rid, _ = sweep_runs.open_sweep_run("sw", {"name": "sw", "methods": ["vsr"]}, "rlvr_sw/manual__1")
    tracking.end_sweep_run(rid, "FAILED")
    first = c.get_run(rid)
    assert sweep_runs.open_sweep_run("sw", {}, "rlvr_sw/manual__1")[0] == rid   # the rerun reopens it
    time.sleep(1.1)
    tracking.end_sweep_run(rid, "FINISHED")
    run = c.get_run(rid)
    closes = json.loads(run.data.tags["rlvr.closes"])
    assert [st for st, _ in closes] == ["FAILED", "FINISHED"] and closes[1][1] == run.info.end_time
    walls = [m.value for m in c.get_metric_history(rid, "sweep/wall_time_s")]
    start = run.info.start_time
    assert walls == [(first.info.end_time - start) / 1000, (run.info.end_time - start) / 1000]
    assert walls[1] - walls[0] >= 1.0 and run.info.status == "FINISHED"
    text = sweep_runs.sweep_wall_time("rlvr_sw/manual__1")
    assert text == run.data.tags["rlvr.wall_time"] and "closed 2 times: FAILED at " in text and ", FINISHED at " in text
    assert sweep_runs.sweep_wall_time("rlvr_sw/other") is None


def test_param_names_mlflow_refuses_are_spelled_out(home, tmp_path):
    """A pre-registration block's claim ids ("vsr>grpo") are param names MLflow refuses: they are
    spelled out (vsr_gt_grpo), or the tables stage of a study with a paper effect fails."""
    parent = tracking.start_sweep_run("sw", {"name": "sw", "seeds": [0], "methods": ["grpo"]})
    t = tracking.MlflowTracker(parent, spool_dir=tmp_path / "spool")
    t.log_params({"tables": {"preregistration": {"paper_effects": {"vsr>grpo": 0.2403, "grpo<base": 1}}}})
    params = lineage.client().get_run(parent).data.params
    assert params["tables.preregistration.paper_effects.vsr_gt_grpo"] == "0.2403"
    assert params["tables.preregistration.paper_effects.grpo_lt_base"] == "1"


def test_tables_of_a_sweep_whose_tables_stage_was_a_cache_hit(home):
    """A sweep renamed (or one whose tables inputs another sweep computed first) hits the tables
    stage's cache: the tables run is tagged with the other sweep. ``rlvr tables`` of the new name
    finds it through the sweep run that used it; a later tables run of its own wins over it."""
    first = _cell(sweep="old")
    inputs = {"eval_base": first["evaluate base"]["uri"], "tokens": first["evaluate base"]["uri"]}
    done = run_stage("tables", {}, inputs, sweep="old", parent_run_id=first["parent"])
    with pytest.raises(LookupError, match="no finished 'tables' run for sweep 'new'"):
        tracking.latest_tables_run("new")
    parent = tracking.start_sweep_run("new", {"name": "new", "seeds": [0], "methods": ["grpo", "vsr"]})
    hit = run_stage("tables", {}, inputs, sweep="new", parent_run_id=parent)
    assert hit["cached"] and hit["run_id"] == done["run_id"]
    tracking.end_sweep_run(parent, "FINISHED", tables=hit)
    assert tracking.latest_tables_run("new").info.run_id == done["run_id"]
    time.sleep(0.01)
    own = run_stage("tables", {}, {**inputs, "eval_grpo": first["evaluate grpo"]["uri"]}, sweep="new")
    assert not own["cached"] and tracking.latest_tables_run("new").info.run_id == own["run_id"]
