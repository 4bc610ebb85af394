"""`rlvr compile SWEEP --target kfp`: every sweep in dags/sweeps compiles to a KFP v2 pipeline that
parses into KFP's PipelineSpec / PlatformSpec protobufs and loads back as a component; its pods
are built from manifests/ and the sweep's kubernetes block; retries come from the sweep and
KFP's cache is off; the demo's pipeline equals the golden file.

Regenerate the golden file after an intended change (the demo sweep, the compiler, kfp):
    RLVR_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/kfp/test_kfp_compile.py -k golden
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kfp_testlib import HERE, REPO, SWEEPS, clean_env, compiled, last_json

from components.k8s.settings import GPU_STAGES, KubernetesSettings
from components.sweep import load_sweep

GOLDEN = HERE / "golden" / "demo.yaml"
TEMPLATE = yaml.safe_load((REPO / "manifests/base/pod-templates/gpu-stage.yaml").read_text())["spec"]
CONFIG_KEYS = sorted(yaml.safe_load((REPO / "manifests/base/config.yaml").read_text())["data"])
HELM = yaml.safe_load((REPO / "manifests/airflow/values.yaml").read_text())
PIPELINE_IMAGE = f"{HELM['images']['airflow']['repository']}:{HELM['images']['airflow']['tag']}"
CLAIMS = {v["persistentVolumeClaim"]["claimName"]: m["mountPath"]
          for v in TEMPLATE["volumes"] if "persistentVolumeClaim" in v
          for m in TEMPLATE["containers"][0]["volumeMounts"] if m["name"] == v["name"]}

CUSTOM = """\
name: kfp_custom
executor: kubernetes
seeds: [0, 1]
models: [Qwen/Qwen2.5-0.5B-Instruct]
methods: [grpo]
stages: {train: {backend: verl}}
retries: 4
retry_delay_s: 30
kubernetes:
  image: registry.example/rlvr/trainer:dev
  tracking_uri: http://mlflow.other:5000
  env: {HF_HUB_OFFLINE: "1"}
  resources: {train: {gpus: 4}, evaluate: {gpus: 2, cpu: "4", memory: 32Gi}}
"""


def docs(path: Path) -> tuple[dict, dict]:
    spec, platform = yaml.safe_load_all(path.read_text())
    return spec, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def stage_of(container: dict) -> str:
    """'train' for `rlvr run-stage train ...`, 'step:plan' for the pipeline's own steps."""
    if container["command"] == ["rlvr"]:
        return container["args"][1]
    return "step:" + container["args"][0]


def all_tasks(spec: dict):
    yield from spec["root"]["dag"]["tasks"].items()
    for comp in spec["components"].values():
        yield from (comp.get("dag") or {}).get("tasks", {}).items()


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.stem)
def test_every_sweep_compiles_and_validates(sweep, kfp_report):
    cfg = load_sweep(sweep)
    r, ir = compiled(kfp_report, sweep)
    v = r["validate"]
    assert v["name"] == f"rlvr-{cfg.name.lower().replace('_', '-')}" and v["sdk"] == "kfp-2.17.3"
    assert v["executors"] == v["platform_executors"]  # every executor has its pod settings
    # seeds and methods are the run's parameters, as in the Airflow trigger form
    assert sorted(v["inputs"]["parameters"]) == ["methods", "seeds"]
    ks = cfg.kubernetes
    trainer = ks.image if ks else KubernetesSettings().image
    assert v["images"] == sorted({PIPELINE_IMAGE, trainer})
    spec, _ = docs(ir)
    gpus = {stage_of(ex["container"]): int(g["count"]) for label, g in v["gpus"].items()
            for lbl, ex in spec["deploymentSpec"]["executors"].items() if lbl == label}
    assert gpus == ({s: ks.for_stage(s).gpus for s in GPU_STAGES if ks.for_stage(s).gpus} if ks else {})
    print(f"\n{sweep.stem}: compiled in {r['compile_s']:.2f}s, {v['executors']} executors, dry run "
          f"{len(r['dry']['steps'])} steps in {r['dry']['seconds']:.1f}s")


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.stem)
def test_pods_come_from_the_manifests(sweep, kfp_report):
    cfg = load_sweep(sweep)
    spec, platform = docs(kfp_report[0] / f"{sweep.stem}.yaml")
    seen = set()
    for label, ex in spec["deploymentSpec"]["executors"].items():
        c, k = ex["container"], platform[label]
        stage = stage_of(c)
        seen.add(stage)
        gpu = stage in GPU_STAGES and cfg.kubernetes is not None and cfg.kubernetes.for_stage(stage).gpus > 0
        assert c["image"] == (PIPELINE_IMAGE if stage not in GPU_STAGES else
                              (cfg.kubernetes or KubernetesSettings()).image), label
        assert {p["constant"]: p["mountPath"] for p in k["pvcMount"]} == CLAIMS
        assert k["secretAsEnv"] == [{"keyToEnv": [{"envVar": n, "secretKey": n} for n in
                                                  ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")],
                                     "optional": False, "secretName": "rlvr-s3",
                                     "secretNameParameter": {"runtimeValue": {"constant": "rlvr-s3"}}}]
        assert sorted(e["configMapKey"] for e in k["configMapAsEnv"][0]["keyToEnv"]) == CONFIG_KEYS
        assert k["securityContext"] == {"runAsUser": "1000", "runAsGroup": "1000", "runAsNonRoot": True}
        assert ("nodeSelector" in k) == gpu and ("tolerations" in k) == gpu, label
        mounts = {d["mountPath"] for d in k["emptyDirMounts"]}
        assert mounts == ({"/dev/shm", "/tmp"} if gpu else {"/tmp"}), label
        env = {e["name"]: e["value"] for e in c.get("env", [])}
        assert env["RLVR_SWEEP"] == cfg.name and env.get("RLVR_STAGE", stage) == stage
    assert seen == set(GPU_STAGES) | {"prepare_data", "pretrain", "seed_prefixes", "tokens", "tables",
                                      "step:start-sweep", "step:plan", "step:end-sweep"}


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.stem)
def test_retries_from_the_sweep_and_no_kfp_cache(sweep, kfp_report):
    cfg = load_sweep(sweep)
    spec, _ = docs(kfp_report[0] / f"{sweep.stem}.yaml")
    n = 0
    for name, t in all_tasks(spec):
        if "executorLabel" not in spec["components"][t["componentRef"]["name"]]:
            continue  # a group (loop, exit handler)
        n += 1
        assert not t.get("cachingOptions", {}).get("enableCache", False), name
        if cfg.retries:
            assert t["retryPolicy"]["maxRetryCount"] == cfg.retries, name
            assert t["retryPolicy"]["backoffDuration"] == f"{cfg.retry_delay_s:g}s"
            assert t["retryPolicy"]["backoffFactor"] == 1.0
    assert n == 2 + 2 * 8  # start, end; a plan and a stage step per stage


def test_kubernetes_block_sizes_the_pods(kfp_python, tmp_path):
    sweep = tmp_path / "kfp_custom.yaml"
    sweep.write_text(CUSTOM)
    out = tmp_path / "custom.yaml"
    r = subprocess.run([str(kfp_python), "-m", "components.kfp", "compile", str(sweep), "-o", str(out)], cwd=REPO,
                       env=clean_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    spec, platform = docs(out)
    for label, ex in spec["deploymentSpec"]["executors"].items():
        c, stage = ex["container"], stage_of(ex["container"])
        env = {e["name"]: e["value"] for e in c.get("env", [])}
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.other:5000"  # tracking_uri wins over the ConfigMap
        assert "MLFLOW_TRACKING_URI" not in {e["envVar"] for e in platform[label]["configMapAsEnv"][0]["keyToEnv"]}
        assert ("HF_HUB_OFFLINE" in env) == (stage in GPU_STAGES)  # kubernetes.env: the GPU stage pods'
        res = c["resources"]
        if stage == "train":
            assert c["image"] == "registry.example/rlvr/trainer:dev"
            assert res["accelerator"]["resourceCount"] == "4" and res["resourceCpuRequest"] == "32"
        elif stage == "evaluate":
            assert res["accelerator"]["resourceCount"] == "2"
            assert (res["resourceCpuRequest"], res["resourceMemoryRequest"]) == ("4", "32Gi")
        elif stage not in GPU_STAGES:
            assert "accelerator" not in res
            w = HELM["workers"]["resources"]
            assert (res["resourceCpuRequest"], res["resourceMemoryLimit"]) == (w["requests"]["cpu"],
                                                                            w["limits"]["memory"])
    retries = {t["retryPolicy"]["maxRetryCount"] for _, t in all_tasks(spec) if "retryPolicy" in t}
    assert retries == {4}


def test_validation_rejects_a_broken_file(kfp_python, kfp_report, tmp_path):
    spec, platform = yaml.safe_load_all((kfp_report[0] / "demo.yaml").read_text())
    spec["root"]["dag"]["tasks"]["exit-handler-1"]["retryPolicyTypo"] = {}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([spec, platform]))
    r = subprocess.run([str(kfp_python), "-m", "components.kfp", "validate", str(bad)], cwd=REPO, env=clean_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "PipelineSpec" in r.stderr and "retryPolicyTypo" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_rlvr_compile_writes_the_golden_demo_pipeline(kfp_python, tmp_path):
    out = tmp_path / "demo.yaml"
    r = subprocess.run([sys.executable, "-m", "components.cli", "compile", str(REPO / "dags/sweeps/demo.yaml"),
                        "--target", "kfp", "-o", str(out)], cwd=REPO, env=clean_env(RLVR_KFP_PYTHON=str(kfp_python)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert last_json(r.stdout)["pipeline"] == "rlvr-demo"
    if os.environ.get("RLVR_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(out.read_text())
    assert out.read_text() == GOLDEN.read_text(), \
        "compiled demo pipeline differs from tests/kfp/golden/demo.yaml (RLVR_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize("args, code, message", [
    (["--target", "argo"], 2, "--target: unknown target 'argo' (targets: kfp)"),
    (["--target", "kfp"], 1, "the kfp environment is missing; run `make kfp-env`"),
])
def test_rlvr_compile_errors(tmp_path, args, code, message):
    r = subprocess.run([sys.executable, "-m", "components.cli", "compile", str(REPO / "dags/sweeps/demo.yaml"), *args,
                        "-o", str(tmp_path / "x.yaml")], cwd=REPO,
                       env=clean_env(RLVR_KFP_PYTHON=str(tmp_path / "no-venv" / "python")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == code and message in r.stderr, r.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_rlvr_compile_checks_stage_params(tmp_path):
    sweep = tmp_path / "bad.yaml"
    sweep.write_text(CUSTOM.replace("stages: {train: {backend: verl}}", "stages: {tokens: {no_such_knob: 1}}"))
    r = subprocess.run([sys.executable, "-m", "components.cli", "compile", str(sweep), "-o", str(tmp_path / "x.yaml")],
                       cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "stages.tokens" in r.stderr and "no_such_knob" in r.stderr, r.stderr
    assert not (tmp_path / "x.yaml").exists()
