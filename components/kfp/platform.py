"""Where and how big the pipeline's pods are, from the same files the Airflow side uses:

- the GPU stage pod template (``manifests/base/pod-templates/gpu-stage.yaml``, or the sweep's
  ``kubernetes.pod_template``): the claims and their mount paths, the emptyDir volumes, the
  Secret keys in the environment, the ConfigMap, the node selector and tolerations, the user;
- the ConfigMap ``manifests/base/config.yaml`` (its keys: kfp-kubernetes maps ConfigMap keys
  one by one, it has no envFrom);
- the sweep's ``kubernetes:`` block: image, resources per GPU stage, tracking URI, extra env;
- the Airflow Helm values (``manifests/airflow/values.yaml``): the pipeline image and the
  worker pods' size, which the CPU steps get (they do what an Airflow worker pod does).

``pod_plan`` is plain data (no kfp), so it can be read and tested in either environment;
``apply`` (kfp-kubernetes) puts one plan on a pipeline task.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from components.k8s import stage_pods
from components.k8s.settings import KubernetesSettings

REPO = Path(__file__).resolve().parents[2]
CONFIG_MAP = REPO / "manifests" / "base" / "config.yaml"
HELM_VALUES = REPO / "manifests" / "airflow" / "values.yaml"
GPU_RESOURCE = "nvidia.com/gpu"


class PlatformError(ValueError):
    """A manifest the pipeline's pods are built from is missing or not as expected (one line)."""


def _load(path: Path) -> dict:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise PlatformError(f"{path}: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise PlatformError(f"{path}: expected a mapping")
    return doc


def pipeline_image() -> str:
    img = (_load(HELM_VALUES).get("images") or {}).get("airflow") or {}
    if not img.get("repository") or not img.get("tag"):
        raise PlatformError(f"{HELM_VALUES}: images.airflow.repository / tag: missing")
    return f"{img['repository']}:{img['tag']}"


def cpu_resources() -> dict[str, str]:
    res = ((_load(HELM_VALUES).get("workers") or {}).get("resources")) or {}
    try:
        return {"cpu": str(res["requests"]["cpu"]), "memory": str(res["requests"]["memory"]),
                "cpu_limit": str(res["limits"]["cpu"]), "memory_limit": str(res["limits"]["memory"])}
    except (KeyError, TypeError):
        raise PlatformError(f"{HELM_VALUES}: workers.resources: requests/limits of cpu and memory expected") from None


def config_map() -> tuple[str, list[str]]:
    doc = _load(CONFIG_MAP)
    name, data = (doc.get("metadata") or {}).get("name"), doc.get("data") or {}
    if doc.get("kind") != "ConfigMap" or not name or not data:
        raise PlatformError(f"{CONFIG_MAP}: expected a ConfigMap with a name and data")
    return name, sorted(data)


def template(settings: KubernetesSettings) -> dict:
    """The GPU stage pod template's pod-level and ``base``-container parts that KFP can express."""
    path = stage_pods.check_template(settings)  # raises PodSpecError for a missing / wrong file
    spec = _load(path)["spec"]
    base = spec["containers"][0]
    vols = {v["name"]: v for v in spec.get("volumes") or []}
    claims, empty_dirs = [], []
    for m in base.get("volumeMounts") or []:
        v = vols.get(m["name"])
        if v is None:
            raise PlatformError(f"{path}: volumeMounts: {m['name']!r} has no volume")
        if "persistentVolumeClaim" in v:
            claims.append({"claim": v["persistentVolumeClaim"]["claimName"], "path": m["mountPath"]})
        elif "emptyDir" in v:
            ed = v["emptyDir"] or {}
            empty_dirs.append({"name": m["name"], "path": m["mountPath"], "medium": ed.get("medium"),
                               "size_limit": ed.get("sizeLimit")})
        else:
            raise PlatformError(f"{path}: volume {m['name']!r}: only persistentVolumeClaim and emptyDir are mapped")
    secrets: dict[str, dict[str, str]] = {}
    for e in base.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            secrets.setdefault(ref["name"], {})[ref["key"]] = e["name"]
    config_maps = [f["configMapRef"]["name"] for f in base.get("envFrom") or [] if "configMapRef" in f]
    sc = spec.get("securityContext") or {}
    return {"claims": claims, "empty_dirs": empty_dirs, "secrets": secrets, "config_maps": config_maps,
            "node_selector": dict(spec.get("nodeSelector") or {}), "tolerations": list(spec.get("tolerations") or []),
            "pull_policy": base.get("imagePullPolicy"),
            "user": {k: sc[c] for k, c in (("run_as_user", "runAsUser"), ("run_as_group", "runAsGroup"),
                                            ("run_as_non_root", "runAsNonRoot")) if c in sc}}


def pod_plan(settings: KubernetesSettings | None, sweep: str, stage: str | None, gpu_stage: bool) -> dict[str, Any]:
    """What one step's pod gets. ``settings`` is the sweep's ``kubernetes:`` block (None for an
    ``executor: local`` sweep: its GPU stages run on CPU in the trainer image, as they do here);
    ``stage`` is None for the pipeline's own steps (start, plan, end)."""
    ks = settings or KubernetesSettings()
    t = template(ks)
    cm_name, cm_keys = config_map()
    if cm_name not in t["config_maps"]:
        raise PlatformError(f"{stage_pods.template_path(ks)}: envFrom: ConfigMap {cm_name!r} of {CONFIG_MAP} is not used")
    env: dict[str, str] = {"RLVR_SWEEP": sweep}   # as on the Airflow GPU pods (the parent run id is an arg)
    if stage:
        env["RLVR_STAGE"] = stage
    if gpu_stage and settings is not None:
        env.update(settings.env)
    if settings is not None and settings.tracking_uri:  # explicit env wins over the ConfigMap's value
        env["MLFLOW_TRACKING_URI"] = settings.tracking_uri
    cm_env = {k: k for k in cm_keys if k not in env}
    gpus = settings.for_stage(stage).gpus if (gpu_stage and settings is not None) else 0
    if gpu_stage and settings is not None:
        r = settings.for_stage(stage)
        res = {"cpu": r.cpu, "memory": r.memory, "cpu_limit": r.cpu_limit, "memory_limit": r.memory_limit}
        image = settings.image
    else:
        res = cpu_resources()
        image = ks.image if gpu_stage else pipeline_image()
    # emptyDirs: the GPU template's (/dev/shm for NCCL and vLLM, /tmp); CPU steps only need /tmp
    empty_dirs = t["empty_dirs"] if gpus else [d for d in t["empty_dirs"] if d["path"] == "/tmp"]
    return {"image": image, "resources": res, "gpus": gpus, "env": env,
            "config_map": {"name": cm_name, "keys": cm_env}, "secrets": t["secrets"], "claims": t["claims"],
            "empty_dirs": empty_dirs, "node_selector": t["node_selector"] if gpus else {},
            "tolerations": t["tolerations"] if gpus else [], "pull_policy": t["pull_policy"], "user": t["user"],
            "labels": {"app.kubernetes.io/part-of": "rlvr-sweeps", "rlvr/sweep": stage_pods.label_value(sweep),
                       **({"rlvr/stage": stage} if stage else {})}}


def apply(task, plan: dict[str, Any]):
    """Put one ``pod_plan`` on a kfp PipelineTask (kfp + kfp-kubernetes: the kfp venv only)."""
    from kfp import kubernetes

    r = plan["resources"]
    task.set_cpu_request(r["cpu"]).set_cpu_limit(r["cpu_limit"])
    task.set_memory_request(r["memory"]).set_memory_limit(r["memory_limit"])
    if plan["gpus"]:
        task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(plan["gpus"])
    for k, v in sorted(plan["env"].items()):
        task.set_env_variable(k, v)
    kubernetes.use_config_map_as_env(task, plan["config_map"]["name"], plan["config_map"]["keys"])
    for name, keys in sorted(plan["secrets"].items()):
        kubernetes.use_secret_as_env(task, secret_name=name, secret_key_to_env=keys)
    for c in plan["claims"]:
        kubernetes.mount_pvc(task, pvc_name=c["claim"], mount_path=c["path"])
    for d in plan["empty_dirs"]:
        kubernetes.empty_dir_mount(task, volume_name=d["name"], mount_path=d["path"], medium=d["medium"],
                                   size_limit=d["size_limit"])
    for k, v in sorted(plan["node_selector"].items()):
        kubernetes.add_node_selector(task, label_key=k, label_value=v)
    for t in plan["tolerations"]:
        kubernetes.add_toleration(task, key=t.get("key"), operator=t.get("operator", "Equal"), value=t.get("value"),
                                  effect=t.get("effect"), toleration_seconds=t.get("tolerationSeconds"))
    if plan["pull_policy"]:
        kubernetes.set_image_pull_policy(task, plan["pull_policy"])
    if plan["user"]:
        kubernetes.set_security_context(task, **plan["user"])
    for k, v in sorted(plan["labels"].items()):
        kubernetes.add_pod_label(task, k, v)
    return task
