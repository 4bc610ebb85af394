"""The sweep file's ``kubernetes:`` block: where and how big the GPU stage pods are.

Parsed at DAG-parse time with the rest of the sweep, so pydantic only (no kubernetes
client, no airflow). Every field has a default that matches the naming contract of
``manifests/`` (namespace ``rlvr``, the trainer image, the GPU pod template), so a
sweep with ``executor: kubernetes`` and no block renders as is::

    kubernetes:
      image: ghcr.io/rlvr-sweeps/trainer:0.1.0
      resources:
        train: {gpus: 4}               # merged over the train defaults below
      tracking_uri: http://mlflow.other:5000   # else the ConfigMap's MLFLOW_TRACKING_URI

Default resources are sized for the papers' largest models, 7B in bf16 on 80 GB GPUs
(Qwen2.5-7B-Instruct, Qwen2.5-7B); smaller models (1.5B, 3B) fit the same pods:

- ``filter_hard``  1 GPU, 8-16 CPUs, 64-128 GiB: pass@k sampling of one model with vLLM;
  one pod per model, so models run side by side.
- ``train``        8 GPUs, 32-64 CPUs, 256-512 GiB: one full node, verl's FSDP actor with
  a colocated vLLM rollout (verl's own 7B GRPO examples use one 8 x 80 GB node).
- ``evaluate``     1 GPU, 8-16 CPUs, 64-128 GiB: one pod per (model, benchmark) cell.

GPUs are requested and limited alike (Kubernetes requires it for extended resources).
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

GPU_STAGES = ("filter_hard", "train", "evaluate")

DEFAULT_RESOURCES: dict[str, dict[str, Any]] = {
    "filter_hard": {"gpus": 1, "cpu": "8", "memory": "64Gi", "cpu_limit": "16", "memory_limit": "128Gi"},
    "train": {"gpus": 8, "cpu": "32", "memory": "256Gi", "cpu_limit": "64", "memory_limit": "512Gi"},
    "evaluate": {"gpus": 1, "cpu": "8", "memory": "64Gi", "cpu_limit": "16", "memory_limit": "128Gi"},
}

# Kubernetes resource quantities (a subset: decimal numbers with an optional suffix).
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# DNS-1123 label: namespaces and image-free names the API server checks.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# Set by the DAG on every pod; a user value would be silently shadowed, so refuse it.
RESERVED_ENV = ("RLVR_PARENT_RUN_ID", "RLVR_SWEEP", "RLVR_STAGE", "MLFLOW_TRACKING_URI")


def _no_jinja(text: str) -> str:
    # Pod env values reach KubernetesPodOperator as mapped kwargs, which Airflow renders
    # as Jinja templates: '{{ ... }}' would be evaluated, not passed on.
    if re.search(r"\{[{%#]", text):
        raise ValueError(f"{text!r}: '{{{{', '{{%' and '{{#' would be rendered by Airflow's templating")
    return text


def quantity(text: str) -> float:
    """'64Gi' -> 68719476736.0, '500m' -> 0.5; ValueError for anything else."""
    m = _QUANTITY.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. '8', '500m', '64Gi')")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


class Strict(BaseModel):
    """A block of the sweep file: an unknown key is an error, not ignored."""
    model_config = ConfigDict(extra="forbid")


class PodResources(Strict):
    gpus: int = Field(ge=0, le=64)          # nvidia.com/gpu, request = limit
    cpu: str                                # request
    memory: str                             # request
    cpu_limit: str
    memory_limit: str

    @field_validator("cpu", "memory", "cpu_limit", "memory_limit", mode="before")
    @classmethod
    def _quantity(cls, v: Any) -> str:
        v = str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        if not isinstance(v, str):
            raise ValueError(f"expected a quantity string, got {type(v).__name__}")
        quantity(v)
        return v

    @model_validator(mode="after")
    def _requests_within_limits(self) -> "PodResources":
        # The API server rejects request > limit only when the pod is created, hours into
        # a sweep; say it when the file is read.
        for req, lim in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
            if quantity(getattr(self, req)) > quantity(getattr(self, lim)):
                raise ValueError(f"{req}: request {getattr(self, req)} exceeds {lim} {getattr(self, lim)}")
        return self

    def requests(self) -> dict[str, str]:
        out = {"cpu": self.cpu, "memory": self.memory}
        return {**out, "nvidia.com/gpu": str(self.gpus)} if self.gpus else out

    def limits(self) -> dict[str, str]:
        out = {"cpu": self.cpu_limit, "memory": self.memory_limit}
        return {**out, "nvidia.com/gpu": str(self.gpus)} if self.gpus else out


class KubernetesSettings(Strict):
    namespace: str = "rlvr"
    image: str = "ghcr.io/rlvr-sweeps/trainer:0.1.0"
    # Relative paths are taken from the repository root: /app inside the pipeline image,
    # which is where the Airflow worker running KubernetesPodOperator reads it.
    pod_template: str = "manifests/base/pod-templates/gpu-stage.yaml"
    tracking_uri: str | None = None         # None: MLFLOW_TRACKING_URI from the rlvr-config ConfigMap
    env: dict[str, str] = Field(default_factory=dict)   # extra env on every GPU stage pod
    resources: dict[str, PodResources] = Field(default_factory=dict, validate_default=True)
    # GPU pods wait for a node (autoscaling) and pull a large CUDA image: minutes, not seconds.
    startup_timeout_s: int = Field(default=1800, ge=60)
    deferrable: bool = False                # True frees the worker slot while a pod runs (needs a triggerer)
    kubernetes_conn_id: str = "kubernetes_default"   # missing = in-cluster credentials

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not _DNS_LABEL.match(v):
            raise ValueError(f"{v!r} is not a valid namespace (lowercase letters, digits, '-')")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not _ENV_NAME.match(k):
                raise ValueError(f"{k!r} is not a valid environment variable name")
            if k in RESERVED_ENV:
                raise ValueError(f"{k} is set by the DAG (use tracking_uri for MLFLOW_TRACKING_URI)")
            _no_jinja(v[k])
        return v

    @field_validator("tracking_uri")
    @classmethod
    def _tracking_uri(cls, v: str | None) -> str | None:
        return None if v is None else _no_jinja(v)

    @field_validator("resources", mode="before")
    @classmethod
    def _merge_defaults(cls, v: Any) -> Any:
        # A sweep names only what it changes ({train: {gpus: 4}}); every GPU stage ends
        # up with a full PodResources so the DAG never has to know the defaults.
        v = {} if v is None else v
        if not isinstance(v, dict):
            return v  # pydantic reports the type error
        unknown = [k for k in v if k not in GPU_STAGES]
        if unknown:
            raise ValueError(f"unknown GPU stage {unknown[0]!r} (GPU stages: {', '.join(GPU_STAGES)})")
        out = {}
        for stage in GPU_STAGES:
            given = v.get(stage) or {}
            out[stage] = {**DEFAULT_RESOURCES[stage], **given} if isinstance(given, dict) else given
        return out

    def for_stage(self, stage: str) -> PodResources:
        return self.resources[stage]
