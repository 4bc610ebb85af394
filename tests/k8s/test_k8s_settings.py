"""The sweep's ``kubernetes:`` block and the pure pod-spec helpers (no Airflow, no cluster)."""
from __future__ import annotations

import json
import re

import jinja2
import pytest

from components.k8s import stage_pods
from components.k8s.settings import DEFAULT_RESOURCES, GPU_STAGES, KubernetesSettings, quantity
from components.sweep import SweepError, parse_sweep

BASE = {"name": "k", "seeds": [0], "models": ["Qwen/Qwen2.5-7B"], "methods": ["grpo"], "executor": "kubernetes"}


def test_defaults_fill_a_kubernetes_sweep_and_stay_out_of_local_ones():
    s = parse_sweep(BASE)
    assert s.kubernetes == KubernetesSettings()
    assert s.kubernetes.namespace == "rlvr" and s.kubernetes.image == "ghcr.io/rlvr-sweeps/trainer:0.1.0"
    assert {st: s.kubernetes.for_stage(st).model_dump() for st in GPU_STAGES} == DEFAULT_RESOURCES
    assert parse_sweep({**BASE, "executor": "local"}).kubernetes is None


def test_partial_resources_merge_over_the_stage_defaults():
    s = parse_sweep({**BASE, "kubernetes": {"resources": {"train": {"gpus": 4, "memory": "300Gi"}}}})
    train = s.kubernetes.for_stage("train")
    assert train.gpus == 4 and train.memory == "300Gi"
    assert train.cpu == DEFAULT_RESOURCES["train"]["cpu"] and train.memory_limit == DEFAULT_RESOURCES["train"]["memory_limit"]
    assert s.kubernetes.for_stage("evaluate").model_dump() == DEFAULT_RESOURCES["evaluate"]
    assert train.limits() == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "4"}
    cpu_only = parse_sweep({**BASE, "kubernetes": {"resources": {"evaluate": {"gpus": 0}}}})
    assert "nvidia.com/gpu" not in cpu_only.kubernetes.for_stage("evaluate").requests()


@pytest.mark.parametrize("block, where, problem", [
    ({"resources": {"trian": {}}}, "kubernetes.resources", "unknown GPU stage 'trian'"),
    ({"resources": {"train": {"cpu": "100"}}}, "kubernetes.resources.train", "cpu: request 100 exceeds cpu_limit 64"),
    ({"resources": {"evaluate": {"memory": "12X"}}}, "kubernetes.resources.evaluate.memory",
     "'12X' is not a Kubernetes quantity"),
    ({"resources": {"train": {"gpus": -1}}}, "kubernetes.resources.train.gpus", "greater than or equal to 0"),
    ({"env": {"RLVR_PARENT_RUN_ID": "x"}}, "kubernetes.env", "RLVR_PARENT_RUN_ID is set by the DAG"),
    ({"env": {"A": "{{ ds }}"}}, "kubernetes.env", "would be rendered by Airflow's templating"),
    ({"tracking_uri": "http://{% x %}"}, "kubernetes.tracking_uri", "would be rendered"),
    ({"namespace": "RLVR_dev"}, "kubernetes.namespace", "not a valid namespace"),
    ({"imge": "x"}, "kubernetes.imge", "unknown key"),
    ({"startup_timeout_s": 5}, "kubernetes.startup_timeout_s", "greater than or equal to 60"),
])
def test_bad_blocks_are_one_line_naming_the_field(block, where, problem):
    with pytest.raises(SweepError) as e:
        parse_sweep({**BASE, "kubernetes": block}, "paper.yaml")
    msg = str(e.value)
    assert msg.startswith(f"paper.yaml: {where}: ") and problem in msg and "\n" not in msg


def test_quantities():
    assert quantity("64Gi") == 64 * 2**30 and quantity("500m") == 0.5 and quantity("8") == 8
    assert quantity("1.5G") == 1.5e9
    with pytest.raises(ValueError):
        quantity("8 cores")


def test_label_values_and_pod_names_are_valid_and_distinct():
    label = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
    cells = ["qwen2.5-7b-instruct-grpo-s0@aime24", "qwen2.5-7b-instruct-grpo-s0@aime25",
             "x" * 80 + "-a", "x" * 80 + "-b", "-odd-", "plain-key_1.0"]
    values = [stage_pods.label_value(c) for c in cells]
    assert all(label.match(v) for v in values) and len(set(values)) == len(cells)
    assert stage_pods.label_value("plain-key_1.0") == "plain-key_1.0"  # valid text is kept as is
    names = [stage_pods.pod_name("filter_hard", c) for c in cells]
    assert all(re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", n) and len(n) <= 54 for n in names)
    assert names[0] == "rlvr-filter-hard-qwen2-5-7b-instruct-grpo-s0-aime24"


def test_template_safe_json_survives_jinja():
    env = jinja2.Environment()
    for obj in ({"t": "{{ ds }} {% raw %} {# c #} {{{"}, {"a": {"b": [{"c": {}}]}}, {"u": "é {x}"}):
        text = stage_pods.template_safe_json(obj)
        assert env.from_string(text).render(ds="RENDERED") == text  # nothing for Jinja to do
        assert json.loads(text) == obj


def test_check_template(tmp_path):
    ok = stage_pods.check_template(KubernetesSettings())
    assert ok == stage_pods.REPO / "manifests/base/pod-templates/gpu-stage.yaml"
    bad = tmp_path / "t.yaml"
    bad.write_text("kind: Pod\nspec: {containers: [{name: main, image: x}]}\n")
    with pytest.raises(stage_pods.PodSpecError, match=r"spec.containers\[0\].name: expected 'base', got 'main'"):
        stage_pods.check_template(KubernetesSettings(pod_template=str(bad)))
    bad.write_text("kind: Job\n")
    with pytest.raises(stage_pods.PodSpecError, match="kind: expected Pod"):
        stage_pods.check_template(KubernetesSettings(pod_template=str(bad)))
    with pytest.raises(stage_pods.PodSpecError, match="kubernetes.pod_template: .*missing.yaml"):
        stage_pods.check_template(KubernetesSettings(pod_template=str(tmp_path / "missing.yaml")))


def test_deployment_template_env_applies_only_when_the_sweep_keeps_the_default(tmp_path, monkeypatch):
    from components.k8s.stage_pods import TEMPLATE_ENV, template_path
    from components.k8s.settings import KubernetesSettings

    monkeypatch.delenv(TEMPLATE_ENV, raising=False)
    default = template_path(KubernetesSettings())
    assert default.is_file() and default.name == "gpu-stage.yaml"        # the repo's file, from any cwd
    mounted = tmp_path / "gpu-stage.yaml"
    monkeypatch.setenv(TEMPLATE_ENV, str(mounted))
    assert template_path(KubernetesSettings()) == mounted                  # the Helm values' mount
    own = tmp_path / "mine.yaml"
    assert template_path(KubernetesSettings(pod_template=str(own))) == own  # a sweep's choice wins
