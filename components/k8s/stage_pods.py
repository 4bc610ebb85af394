"""Pod specs of the GPU stages (filter_hard, train, evaluate) for KubernetesPodOperator.

One pod runs one cached stage for one DAG cell (a model, a grid cell, an eval cell)::

    rlvr run-stage train --params '{...}' --inputs '{...}' --sweep S --parent-run-id R \\
        --extra '{"key": ...}' --xcom-file /airflow/xcom/return.json

in the trainer image, starting from ``manifests/base/pod-templates/gpu-stage.yaml``
(volumes, security context, GPU node selector and toleration, the ConfigMap and the S3
secret all come from there). The operator adds the XCom sidecar that hands the result
JSON back to Airflow.

Two halves, because a mapped operator takes them separately:

- ``partial_kwargs(settings, stage)``: what every pod of a stage shares (image, command,
  template, resources, retry and clean-up policy); built when the DAG is parsed.
- ``pod_kwargs(...)``: one pod's own arguments, name, labels and env; built at run time
  by the DAG's plan tasks once the upstream artifact URIs exist, and passed through
  XCom to ``.expand_kwargs``, so it holds only plain JSON.

Imported only when a kubernetes sweep's DAG is built: the provider pulls in the
kubernetes client (seconds of parse time the local sweeps should not pay).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from components.k8s.settings import GPU_STAGES, KubernetesSettings

REPO = Path(__file__).resolve().parents[2]  # /app inside the images
XCOM_FILE = "/airflow/xcom/return.json"     # where KubernetesPodOperator's sidecar reads the result
BASE_CONTAINER = "base"                     # the container name KubernetesPodOperator expects
# The full cell label can hold characters a label value cannot ('@'); annotations take any text.
CELL_ANNOTATION = "rlvr/cell"
MAP_INDEX_TEMPLATE = "{{ task.annotations['rlvr/cell'] }}"
_MAX_LABEL = 63
_MAX_NAME = 63 - 9  # pod names are cut to 63 with a '-' + 8-character random suffix


class PodSpecError(ValueError):
    """The GPU pod cannot be built as configured; ``str`` is one line naming the file/field."""


TEMPLATE_ENV = "RLVR_GPU_POD_TEMPLATE"


def template_path(settings: KubernetesSettings) -> Path:
    """The sweep's ``kubernetes.pod_template``; when the sweep keeps the default, the
    deployment's ``RLVR_GPU_POD_TEMPLATE`` (the Helm values mount the template ConfigMap
    there), else the file in this repository."""
    default = type(settings).model_fields["pod_template"].default
    chosen = settings.pod_template
    if chosen == default and os.environ.get(TEMPLATE_ENV):
        chosen = os.environ[TEMPLATE_ENV]
    p = Path(chosen).expanduser()
    return p if p.is_absolute() else REPO / p


def check_template(settings: KubernetesSettings) -> Path:
    """The template must exist and be a Pod with a ``base`` container: the provider turns
    a missing file into an empty pod (no volumes, no security context) with a warning."""
    import yaml
    p = template_path(settings)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise PodSpecError(f"kubernetes.pod_template: {p}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise PodSpecError(f"kubernetes.pod_template: {p}: not YAML ({' '.join(str(e).split())})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "Pod":
        raise PodSpecError(f"kubernetes.pod_template: {p}: kind: expected Pod")
    names = [c.get("name") for c in (doc.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    if not names or names[0] != BASE_CONTAINER:
        raise PodSpecError(f"kubernetes.pod_template: {p}: spec.containers[0].name: expected "
                           f"'{BASE_CONTAINER}', got {names[0] if names else 'no containers'!r}")
    return p


def label_value(text: str) -> str:
    """A valid label value (<= 63 of [A-Za-z0-9_.-], alphanumeric at both ends); text that
    had to change gets a short hash so that distinct cells keep distinct labels."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    if safe == text and len(safe) <= _MAX_LABEL:
        return safe
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{safe[:_MAX_LABEL - 9].rstrip('-_.')}-{digest}".lstrip("-")


def pod_name(stage: str, cell: str) -> str:
    """'rlvr-train-qwen2.5-7b-instruct-vsr-s0' style (a DNS label once the operator adds its
    random suffix, which keeps retries and same-prefix cells apart)."""
    base = re.sub(r"[^a-z0-9]+", "-", f"rlvr-{stage}-{cell}".lower()).strip("-")
    return base[:_MAX_NAME].rstrip("-")


_JINJA_OPEN = re.compile(r"\{(?=[{%#])")


def template_safe_json(obj: Any) -> str:
    """JSON that Jinja leaves alone. Airflow renders a mapped operator's list and dict
    kwargs as templates even when they come from XCom, so a param string holding '{{' or
    '{%' would be evaluated (or fail to parse). Such a '{' can only sit inside a JSON
    string (a structural one is always followed by '"' or '}'), where the escape
    \\u007b reads back as the same '{'."""
    return _JINJA_OPEN.sub(r"\\u007b", json.dumps(obj, sort_keys=True))


def run_stage_args(stage: str, params: dict, inputs: dict, *, sweep: str, parent: str | None,
                   extra: dict | None = None) -> list[str]:
    """Arguments of the ``rlvr`` entry point (the container command) for one stage."""
    args = ["run-stage", stage, "--params", template_safe_json(params),
            "--inputs", template_safe_json(inputs), "--sweep", sweep]
    if parent:
        args += ["--parent-run-id", parent]
    if extra:
        args += ["--extra", template_safe_json(extra)]
    return args + ["--xcom-file", XCOM_FILE]


def pod_kwargs(settings: KubernetesSettings, stage: str, params: dict, inputs: dict, *, sweep: str,
               parent: str | None, cell: str, extra: dict | None = None) -> dict[str, Any]:
    """One pod's mapped kwargs (plain JSON: they travel through XCom)."""
    if stage not in GPU_STAGES:
        raise PodSpecError(f"stage '{stage}' is not a GPU stage ({', '.join(GPU_STAGES)})")
    env = {**settings.env, "RLVR_STAGE": stage, "RLVR_SWEEP": sweep, "RLVR_PARENT_RUN_ID": parent or ""}
    if settings.tracking_uri:  # explicit env wins over the ConfigMap's envFrom value
        env["MLFLOW_TRACKING_URI"] = settings.tracking_uri
    return {
        "arguments": run_stage_args(stage, params, inputs, sweep=sweep, parent=parent, extra=extra),
        "name": pod_name(stage, cell),
        "labels": {"app.kubernetes.io/part-of": "rlvr-sweeps", "rlvr/stage": label_value(stage),
                   "rlvr/sweep": label_value(sweep), "rlvr/cell": label_value(cell)},
        "annotations": {CELL_ANNOTATION: cell, "rlvr/parent-run-id": parent or ""},
        "env_vars": env,
    }


def partial_kwargs(settings: KubernetesSettings, stage: str) -> dict[str, Any]:
    """What every pod of ``stage`` shares; for ``KubernetesPodOperator.partial``."""
    from kubernetes.client import models as k8s

    res = settings.for_stage(stage)
    return {
        "task_id": stage,
        "kubernetes_conn_id": settings.kubernetes_conn_id,
        "namespace": settings.namespace,
        "image": settings.image,
        "cmds": ["rlvr"],
        "pod_template_file": str(template_path(settings)),
        "base_container_name": BASE_CONTAINER,
        "container_resources": k8s.V1ResourceRequirements(requests=res.requests(), limits=res.limits()),
        # The result JSON comes back through the sidecar; it runs as the pod's uid 1000
        # with nothing else, like the stage container.
        "do_xcom_push": True,
        "xcom_sidecar_container_security_context": k8s.V1SecurityContext(
            allow_privilege_escalation=False, read_only_root_filesystem=True, run_as_non_root=True,
            capabilities=k8s.V1Capabilities(drop=["ALL"])),
        # A worker that dies reattaches to its running pod instead of starting a second one
        # (durable: Airflow 3.3's successor of reattach_on_restart). A real retry starts a
        # new pod, and the stage cache plus /rlvr/work checkpoints make it resume, not redo.
        "durable": True,
        # Succeeded pods go; failed ones stay (stopped, GPUs released) for `kubectl logs`
        # and `describe`: delete them by label (rlvr/sweep=...) once read.
        "on_finish_action": "delete_succeeded_pod",
        "get_logs": True,
        "log_events_on_failure": True,
        "startup_timeout_seconds": settings.startup_timeout_s,
        "schedule_timeout_seconds": settings.startup_timeout_s,
        "deferrable": settings.deferrable,
        "map_index_template": MAP_INDEX_TEMPLATE,
    }


def operator_class():
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    return KubernetesPodOperator
