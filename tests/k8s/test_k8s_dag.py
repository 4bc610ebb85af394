"""The DAG's kubernetes mode, offline: the three paper-scale sweeps (executor: kubernetes)
build their DAGs, and the GPU pods they would create are rendered by
KubernetesPodOperator's own code (components/k8s/dryrun.py, in a subprocess) and checked:
a real `rlvr run-stage` line whose params validate against the real stages, the pod
template's volumes / security context / GPU scheduling, the XCom sidecar, env and labels,
all validated against the Kubernetes API schema. Local-mode DAGs keep their exact shape.

No cluster here: nothing is submitted; what happens on a real one is not exercised.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from components import lineage, stage_graph
from components.k8s.settings import DEFAULT_RESOURCES
from components.sweep import load_sweep

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
PAPER = ("vsr_table1", "vigor_table1", "vip_table")
GPU = ("filter_hard", "train", "evaluate")
PARENT = "0123456789abcdef0123456789abcdef"  # the dry run's placeholder start_sweep result
TEMPLATE_VOLUMES = {"artifacts": "rlvr-artifacts", "checkpoints": "rlvr-checkpoints", "model-cache": "rlvr-model-cache"}
MOUNTS = {"artifacts": "/rlvr", "checkpoints": "/rlvr/work", "model-cache": "/models", "dshm": "/dev/shm",
          "tmp": "/tmp", "xcom": "/airflow/xcom"}
K8S_TASKS = {"start_sweep", "prepare_data", "pretrain", "filter_hard_args", "filter_hard", "seed_prefixes",
             "train_args", "train", "eval_plan", "evaluate", "tokens", "tables", "end_sweep"}
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# Local mode's DAG shape (task -> (class, sorted upstream, map_index_template)), which
# kubernetes mode must leave unchanged; start_sweep (the run's sweep snapshot) feeds every
# task, ``grid`` maps train and ``eval_plan`` evaluate.
# The embedded demo and tests/test_pipeline_e2e.py depend on these ids.
_PY, _MAP = "_PythonDecoratedOperator", "DecoratedMappedOperator"
LOCAL_SHAPE = {
    "start_sweep": (_PY, [], None),
    "prepare_data": (_PY, ["start_sweep"], None),
    "pretrain": (_PY, ["prepare_data", "start_sweep"], None),
    "filter_hard": (_PY, ["prepare_data", "pretrain", "start_sweep"], None),
    "seed_prefixes": (_PY, ["filter_hard", "start_sweep"], None),
    "grid": (_PY, ["filter_hard", "pretrain", "seed_prefixes", "start_sweep"], None),   # train's cells
    "train": (_MAP, ["filter_hard", "grid", "pretrain", "seed_prefixes", "start_sweep"], "{{ rlvr_key }}"),
    "eval_plan": (_PY, ["filter_hard", "pretrain", "start_sweep", "train"], None),
    "evaluate": (_MAP, ["eval_plan", "filter_hard", "pretrain", "start_sweep", "train"], "{{ rlvr_key }}"),
    "tokens": (_PY, ["start_sweep", "train"], None),
    "tables": (_PY, ["evaluate", "filter_hard", "pretrain", "start_sweep", "tokens", "train"], None),
    "end_sweep": (_PY, ["start_sweep", "tables"], None),
}

CUSTOM = """\
name: k8s_custom
executor: kubernetes
seeds: [0, 1]
models: [Qwen/Qwen2.5-Math-1.5B]
methods: [grpo]
benchmarks: [aime24]
stages:
  train: {prompt_template: "{{ ds }} {% raw %}"}   # must reach the pod as text, not as a template
kubernetes:
  namespace: rlvr-dev
  image: registry.local/trainer:dev
  pod_template: TEMPLATE
  tracking_uri: http://mlflow.other:5000
  env: {HF_HUB_OFFLINE: "1"}
  resources: {train: {gpus: 4}}
retries: 1
"""
NO_TEMPLATE = """\
name: k8s_notemplate
executor: kubernetes
seeds: [0]
models: [Qwen/Qwen2.5-Math-1.5B]
methods: [grpo]
kubernetes: {pod_template: /nonexistent/gpu-stage.yaml}
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("k8s")
    # A template that differs from the repo's in one field, to see which one the pods use.
    tpl = root / "gpu-stage-dev.yaml"
    tpl.write_text((REPO / "manifests/base/pod-templates/gpu-stage.yaml").read_text()
                   .replace("serviceAccountName: rlvr-stage", "serviceAccountName: rlvr-stage-dev"))
    (root / "k8s_custom.yaml").write_text(CUSTOM.replace("TEMPLATE", str(tpl)))
    (root / "k8s_notemplate.yaml").write_text(NO_TEMPLATE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RLVR_", "MLFLOW_"))}
    env.update({"AIRFLOW_HOME": str(root / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR", "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
                "RLVR_EXTRA_SWEEPS": os.pathsep.join(str(root / f) for f in ("k8s_custom.yaml", "k8s_notemplate.yaml")),
                "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
    out = subprocess.run([sys.executable, "-m", "components.k8s.dryrun", str(DAGS)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-4000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\nDagBag parse {r['parse_s']:.1f}s, parse + pod rendering {r['total_s']:.1f}s")
    return r


def _arg(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, (flag, args)
    return args[args.index(flag) + 1]


def _sweep(name: str):
    return load_sweep(DAGS / "sweeps" / f"{name}.yaml")


def test_dags_build_light_and_tagged(report):
    assert report["import_errors"] == {}
    assert report["heavy"] == [], "the DAG file imported heavy modules at parse time"
    for name in PAPER:
        assert "kubernetes" in report["dags"][f"rlvr_{name}"]["tags"]
        assert "error" not in report["dags"][f"rlvr_{name}"], report["dags"][f"rlvr_{name}"].get("error")


def test_kubernetes_task_graph(report):
    for name in PAPER:
        cfg, tasks = _sweep(name), report["dags"][f"rlvr_{name}"]["tasks"]
        assert set(tasks) == K8S_TASKS
        for stage in GPU:  # one KubernetesPodOperator per GPU stage, mapped over cells
            assert tasks[stage]["mapped"] and tasks[stage]["operator"] == "KubernetesPodOperator", stage
            assert tasks[stage]["map_index_template"] == "{{ task.annotations['rlvr/cell'] }}"
        cpu = K8S_TASKS - set(GPU)
        assert all(tasks[t]["class"] == "_PythonDecoratedOperator" and not tasks[t]["mapped"] for t in cpu)
        assert all(t["retries"] == cfg.retries for t in tasks.values())
        up = {t: v["upstream"] for t, v in tasks.items()}
        assert up["filter_hard_args"] == ["prepare_data", "pretrain", "start_sweep"]
        assert up["filter_hard"] == ["filter_hard_args"] and up["train"] == ["train_args"]
        assert up["evaluate"] == ["eval_plan"]
        assert up["seed_prefixes"] == ["filter_hard", "start_sweep"]
        assert up["train_args"] == ["filter_hard", "pretrain", "seed_prefixes", "start_sweep"]
        assert up["eval_plan"] == ["filter_hard", "pretrain", "start_sweep", "train"]
        assert up["tables"] == ["evaluate", "filter_hard", "pretrain", "start_sweep", "tokens", "train"]
        assert tasks["end_sweep"]["teardown"] and "tables" in up["end_sweep"]


def test_every_pod_runs_a_valid_rlvr_run_stage_line(report, monkeypatch):
    monkeypatch.delenv(lineage.OVERRIDES_ENV, raising=False)  # the real stages' Params
    n_pods = 0
    for name in PAPER:
        cfg, d = _sweep(name), report["dags"][f"rlvr_{name}"]
        for stage in GPU:
            declared = lineage.load_stage(stage).INPUTS
            required = {i for i in declared if not i.endswith("*")}   # "name*": optional input
            known = {i.rstrip("*") for i in declared}
            # the graph's calls (tests/dag_files/test_dag_graph.py: the DAG makes exactly these)
            expected, pods = stage_graph.calls(cfg, stage, d["upstream"][stage]), d["args"][stage]
            assert len(pods) == len(expected) > 0, (name, stage)
            for c, kw in zip(expected, pods):
                cell, params, inputs, extra = c["cell"], c["params"], c["inputs"], c["extra"]
                args = kw["arguments"]
                assert args[:2] == ["run-stage", stage] and args[-2:] == ["--xcom-file", "/airflow/xcom/return.json"]
                assert _arg(args, "--sweep") == cfg.name and _arg(args, "--parent-run-id") == PARENT
                got = json.loads(_arg(args, "--params"))
                assert got == params, (name, cell)
                lineage.check_params(stage, got)  # raises StageError naming the field
                got_inputs = json.loads(_arg(args, "--inputs"))
                assert got_inputs == inputs and required <= set(got_inputs) <= known, (name, cell)
                assert json.loads(_arg(args, "--extra")) == extra
                assert kw["annotations"]["rlvr/cell"] == cell
                assert kw["labels"]["rlvr/stage"] == stage and kw["labels"]["rlvr/sweep"] == cfg.name
                assert all(LABEL_VALUE.match(v) for v in kw["labels"].values()), kw["labels"]
                assert DNS_LABEL.match(kw["name"]) and len(kw["name"]) <= 54
                assert kw["env_vars"] == {"RLVR_STAGE": stage, "RLVR_SWEEP": cfg.name, "RLVR_PARENT_RUN_ID": PARENT}
                n_pods += 1
            # distinct cells keep distinct labels even where a label had to be shortened
            assert len({kw["labels"]["rlvr/cell"] for kw in pods}) == len(pods)
    print(f"{n_pods} pod argument lists checked")


def _container(pod: dict, name: str) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def test_rendered_pods_follow_the_template_and_contract(report):
    schema = kubernetes_validate.latest_version()
    for name in PAPER:
        cfg, d = _sweep(name), report["dags"][f"rlvr_{name}"]
        for stage in GPU:
            res = cfg.kubernetes.resources[stage].model_dump()   # the sweep's own (DEFAULT_RESOURCES merged under it)
            for r in d["pods"][stage]:
                kw, pod = d["args"][stage][r["index"]], r["pod"]
                kubernetes_validate.validate(pod, schema, strict=True)  # raises on any schema violation
                assert r["map_index"] == kw["annotations"]["rlvr/cell"]
                assert r["operator"] == {
                    "class": "KubernetesPodOperator", "do_xcom_push": True, "durable": True,
                    "on_finish_action": "delete_succeeded_pod", "retries": cfg.retries,
                    "retry_delay_s": cfg.retry_delay_s, "get_logs": True, "startup_timeout_s": 1800}
                meta, spec = pod["metadata"], pod["spec"]
                assert meta["namespace"] == "rlvr" and meta["name"].startswith(kw["name"] + "-")
                assert DNS_LABEL.match(meta["name"])
                assert meta["labels"]["app.kubernetes.io/component"] == "gpu-stage"  # from the template
                assert {k: meta["labels"][k] for k in kw["labels"]} == kw["labels"]
                assert meta["labels"]["map_index"] == str(r["index"])  # the operator's reattach labels
                assert meta["annotations"]["rlvr/parent-run-id"] == PARENT
                base = _container(pod, "base")
                assert base["image"] == "ghcr.io/rlvr-sweeps/trainer:0.1.0"
                assert base["command"] == ["rlvr"] and base["args"] == kw["arguments"]  # not altered by rendering
                gpu = str(res["gpus"])
                assert base["resources"]["limits"] == {"cpu": res["cpu_limit"], "memory": res["memory_limit"],
                                                      "nvidia.com/gpu": gpu}
                assert base["resources"]["requests"] == {"cpu": res["cpu"], "memory": res["memory"],
                                                        "nvidia.com/gpu": gpu}
                env = {e["name"]: e for e in base["env"]}
                assert env["RLVR_PARENT_RUN_ID"]["value"] == PARENT and env["RLVR_SWEEP"]["value"] == cfg.name
                assert env["RLVR_STAGE"]["value"] == stage
                assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "rlvr-s3"
                # MLFLOW_TRACKING_URI comes from the ConfigMap unless the sweep overrides it
                assert "MLFLOW_TRACKING_URI" not in env
                assert base["envFrom"] == [{"configMapRef": {"name": "rlvr-config"}}]
                assert {m["name"]: m["mountPath"] for m in base["volumeMounts"]} == MOUNTS
                vols = {v["name"]: v for v in spec["volumes"]}
                assert set(vols) == set(MOUNTS)
                assert {n: vols[n]["persistentVolumeClaim"]["claimName"] for n in TEMPLATE_VOLUMES} == TEMPLATE_VOLUMES
                assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
                sc = spec["securityContext"]
                assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000 and sc["runAsGroup"] == 1000
                assert base["securityContext"]["allowPrivilegeEscalation"] is False
                assert spec["serviceAccountName"] == "rlvr-stage" and spec["restartPolicy"] == "Never"
                assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
                assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
                side = _container(pod, "airflow-xcom-sidecar")  # the XCom sidecar is on
                assert side["volumeMounts"] == [{"mountPath": "/airflow/xcom", "name": "xcom"}]
                assert side["securityContext"]["runAsNonRoot"] is True
                assert side["securityContext"]["allowPrivilegeEscalation"] is False
                assert "nvidia.com/gpu" not in (side.get("resources") or {}).get("limits", {})


def test_sweep_kubernetes_settings_reach_the_pods(report):
    d = report["dags"]["rlvr_k8s_custom"]
    assert "error" not in d, d.get("error")
    [first, last] = d["pods"]["train"]  # seeds 0 and 1
    for r in (first, last):
        pod, base = r["pod"], _container(r["pod"], "base")
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
        assert pod["metadata"]["namespace"] == "rlvr-dev" and base["image"] == "registry.local/trainer:dev"
        assert pod["spec"]["serviceAccountName"] == "rlvr-stage-dev"  # the sweep's template, not the repo's
        env = {e["name"]: e.get("value") for e in base["env"]}
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.other:5000" and env["HF_HUB_OFFLINE"] == "1"
        # train overridden to 4 GPUs; its CPU / memory stay the train defaults
        want = {"cpu": DEFAULT_RESOURCES["train"]["cpu_limit"], "memory": DEFAULT_RESOURCES["train"]["memory_limit"],
                "nvidia.com/gpu": "4"}
        assert base["resources"]["limits"] == want
        # Jinja-looking text in a param arrives as text after Airflow rendered the operator
        assert json.loads(_arg(base["args"], "--params"))["prompt_template"] == "{{ ds }} {% raw %}"
    assert [json.loads(_arg(r["pod"]["spec"]["containers"][0]["args"], "--params"))["seed"]
            for r in (first, last)] == [0, 1]
    fh = _container(d["pods"]["filter_hard"][0]["pod"], "base")
    assert fh["resources"]["limits"]["nvidia.com/gpu"] == str(DEFAULT_RESOURCES["filter_hard"]["gpus"])


def test_missing_pod_template_fails_before_any_pod(report):
    err = report["dags"]["rlvr_k8s_notemplate"]["error"]
    assert err.startswith("AirflowFailException: k8s_notemplate: kubernetes.pod_template: "
                          "/nonexistent/gpu-stage.yaml: "), err
    assert "\n" not in err


def test_local_mode_dags_unchanged(report):
    for name in ("demo", "methods"):
        d = report["dags"][f"rlvr_{name}"]
        assert "kubernetes" not in d["tags"]
        shape = {t: (v["class"], v["upstream"], v["map_index_template"]) for t, v in d["tasks"].items()}
        assert shape == LOCAL_SHAPE, name
        assert d["tasks"]["end_sweep"]["teardown"] and not d["tasks"]["start_sweep"]["setup"]


def test_dry_run_reports_each_verl_cells_memory(report):
    from components.trainer.verl.cells import verl_cells

    for name in PAPER:
        cfg, mem = _sweep(name), report["dags"][f"rlvr_{name}"]["memory"]
        assert set(mem) == {c["key"] for c in verl_cells(cfg)}
        for key, est in mem.items():
            assert est is not None and est["refusal"] is None, key
            assert max(est["gib"]["update_peak"], est["gib"]["rollout_peak"]) <= est["gpu_gib"], key
