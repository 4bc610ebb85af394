"""Render a kustomization with the subset of kustomize that manifests/ uses.

The tests must run where `kubectl` is not installed, so this renders the overlays in
pure Python. Supported, with kustomize's semantics for what is used here:

- ``resources``: YAML files (multi-document) and directories holding a kustomization;
- ``namespace``: set on every namespaced object;
- ``labels``: ``pairs`` added to ``metadata.labels`` (``includeSelectors`` /
  ``includeTemplates`` are refused: they would need kustomize's field specs);
- ``patches``: ``path`` or inline ``patch``, optional ``target`` (group, version, kind,
  name, namespace); a list is a JSON patch (RFC 6902: add, replace, remove), a mapping a
  strategic merge patch (lists of built-in kinds merged by ``name`` for containers,
  initContainers, volumes and env, every other list replaced, ``null`` deletes);
- ``configMapGenerator`` / ``secretGenerator``: ``files``, ``envs``, ``literals``, with
  the name suffix hash disabled (``options`` or ``generatorOptions``);
- ``images``: ``newName``, ``newTag``, ``digest`` on every container and initContainer.

Anything else in a kustomization is an error naming the file and the field, so the
renderer cannot silently drift from what `kubectl kustomize` produces; check.sh compares
the two on every overlay where kubectl exists.

    python manifests/render.py manifests/overlays/dev   # prints the YAML stream
"""
from __future__ import annotations

import base64
import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "labels", "patches",
             "configMapGenerator", "secretGenerator", "generatorOptions", "images"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass", "IngressClass",
                  "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "RuntimeClass"}
# Strategic-merge keys of the built-in kinds used here. Custom resources (RayJob) have no
# schema for kustomize, so their lists are replaced, as kustomize does.
MERGE_BY_NAME = {"containers", "initContainers", "volumes", "env"}


class RenderError(ValueError):
    pass


def _load_yaml_docs(path: Path) -> list[dict]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        raise RenderError(f"{path}: not valid YAML ({e})") from None
    for i, d in enumerate(docs):
        if not isinstance(d, dict) or "kind" not in d or "metadata" not in d:
            raise RenderError(f"{path}: document {i} is not a Kubernetes object (kind/metadata)")
    return docs


def _kustomization_file(directory: Path) -> Path:
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        if (directory / name).is_file():
            return directory / name
    raise RenderError(f"{directory}: no kustomization.yaml")


def _ident(obj: dict) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


# --- generators ---------------------------------------------------------------------------

def _env_file(path: Path) -> dict[str, str]:
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise RenderError(f"{path}:{n}: expected KEY=VALUE")
        k, v = line.split("=", 1)
        out[k] = v
    return out


def _b64(value: str) -> str:
    """kustomize's encoding: base64 cut into 70-column lines, each ending in a newline,
    once it is longer than one line (the API server's decoder skips the newlines)."""
    enc = base64.b64encode(value.encode()).decode()
    if len(enc) < 70:
        return enc
    return "".join(enc[i:i + 70] + "\n" for i in range(0, len(enc), 70))


def _generate(kfile: Path, spec: dict, kind: str, global_opts: dict) -> dict:
    root, name = kfile.parent, spec.get("name")
    if not name:
        raise RenderError(f"{kfile}: {kind} generator without a name")
    opts = {**global_opts, **spec.get("options", {})}
    if not opts.get("disableNameSuffixHash"):
        raise RenderError(f"{kfile}: {name}: only generators with disableNameSuffixHash: true are supported")
    unknown = set(spec) - {"name", "files", "envs", "literals", "options", "type"}
    if unknown:
        raise RenderError(f"{kfile}: {name}: unsupported generator fields {sorted(unknown)}")
    data: dict[str, str] = {}
    for entry in spec.get("files", []):
        key, _, rel = entry.rpartition("=") if "=" in entry else ("", "", entry)
        path = root / rel
        if not path.is_file():
            raise RenderError(f"{kfile}: {name}: file {rel} does not exist")
        data[key or path.name] = path.read_text()
    for rel in spec.get("envs", []):
        path = root / rel
        if not path.is_file():
            raise RenderError(f"{kfile}: {name}: env file {rel} does not exist")
        data.update(_env_file(path))
    for lit in spec.get("literals", []):
        k, sep, v = lit.partition("=")
        if not sep:
            raise RenderError(f"{kfile}: {name}: literal {lit!r} is not KEY=VALUE")
        data[k] = v
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}
    if kind == "Secret":
        obj["type"] = spec.get("type", "Opaque")
        obj["data"] = {k: _b64(v) for k, v in data.items()}
    else:
        obj["data"] = data
    return obj


# --- patches ------------------------------------------------------------------------------

def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise RenderError(f"JSON patch path {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _json6902(obj: dict, ops: list[dict], where: str) -> None:
    for op in ops:
        parts = _pointer(op["path"])
        parent: Any = obj
        for p in parts[:-1]:
            try:
                parent = parent[int(p)] if isinstance(parent, list) else parent[p]
            except (KeyError, IndexError, ValueError):
                raise RenderError(f"{where}: path {op['path']} does not exist") from None
        last, kind = parts[-1], op["op"]
        if isinstance(parent, list):
            idx = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(idx, copy.deepcopy(op["value"]))
            elif idx >= len(parent):
                raise RenderError(f"{where}: path {op['path']} does not exist")
            elif kind == "replace":
                parent[idx] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del parent[idx]
            else:
                raise RenderError(f"{where}: JSON patch op {kind!r} not supported")
        else:
            if kind in ("replace", "remove") and last not in parent:
                raise RenderError(f"{where}: path {op['path']} does not exist")
            if kind in ("add", "replace"):
                parent[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del parent[last]
            else:
                raise RenderError(f"{where}: JSON patch op {kind!r} not supported")


def _smp(base: Any, patch: Any, builtin: bool, key: str = "") -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if isinstance(k, str) and k.startswith("$"):
                raise RenderError(f"strategic merge directive {k} not supported")
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = _smp(out[k], v, builtin, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if (builtin and key in MERGE_BY_NAME and isinstance(base, list) and isinstance(patch, list)
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        # kustomize's order: the patch's items first (merged with the base item of the
        # same name), then the base items the patch does not name, in their order.
        by_name = {x["name"]: x for x in base}
        named = {x["name"] for x in patch}
        out = [_smp(by_name[x["name"]], x, builtin) if x["name"] in by_name else copy.deepcopy(x)
               for x in patch]
        return out + [copy.deepcopy(x) for x in base if x["name"] not in named]
    return copy.deepcopy(patch)


def _matches(obj: dict, target: dict) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    checks = {"group": group, "version": version, "kind": obj["kind"],
              "name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace", "")}
    for field, want in target.items():
        if field not in checks:
            raise RenderError(f"patch target field {field!r} not supported")
        if not re.fullmatch(str(want), checks[field]):
            return False
    return True


def _apply_patch(objs: list[dict], kfile: Path, entry: dict) -> None:
    unknown = set(entry) - {"path", "patch", "target"}
    if unknown:
        raise RenderError(f"{kfile}: patches: unsupported fields {sorted(unknown)}")
    where = f"{kfile}: patch {entry.get('path', '<inline>')}"
    text = (kfile.parent / entry["path"]).read_text() if "path" in entry else entry["patch"]
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if len(docs) == 1 and isinstance(docs[0], list):  # RFC 6902
        if "target" not in entry:
            raise RenderError(f"{where}: a JSON patch needs a target")
        hits = [o for o in objs if _matches(o, entry["target"])]
        if not hits:
            raise RenderError(f"{where}: target {entry['target']} matches nothing")
        for o in hits:
            _json6902(o, docs[0], where)
        return
    for doc in docs:  # strategic merge patches, one object each
        target = entry.get("target") or {"kind": doc["kind"], "name": doc["metadata"]["name"]}
        hits = [i for i, o in enumerate(objs) if _matches(o, target)]
        if not hits:
            raise RenderError(f"{where}: {doc['kind']}/{doc['metadata']['name']} matches nothing")
        for i in hits:
            builtin = "." not in objs[i]["apiVersion"].split("/")[0] or objs[i]["apiVersion"].startswith(
                ("apps/", "batch/", "rbac.authorization.k8s.io/", "networking.k8s.io/", "policy/"))
            patch = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
            patch["metadata"] = {k: v for k, v in doc["metadata"].items() if k != "name"}
            objs[i] = _smp(objs[i], patch, builtin)


# --- images -------------------------------------------------------------------------------

def _image_name(image: str) -> str:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def _set_images(node: Any, rules: list[dict]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("containers", "initContainers") and isinstance(v, list):
                for c in v:
                    if isinstance(c, dict) and isinstance(c.get("image"), str):
                        c["image"] = _new_image(c["image"], rules)
            _set_images(v, rules)
    elif isinstance(node, list):
        for v in node:
            _set_images(v, rules)


def _new_image(image: str, rules: list[dict]) -> str:
    name = _image_name(image)
    for r in rules:
        if r["name"] != name:
            continue
        ref = image[len(name):]
        tag = ref.split("@", 1)[0][1:] if ref.startswith(":") else ""
        out = r.get("newName", name)
        tag = r.get("newTag", tag)
        if tag:
            out += f":{tag}"
        if "digest" in r:
            out += f"@{r['digest']}"
        elif "@" in ref and "newTag" not in r:
            out += "@" + ref.split("@", 1)[1]
        return out
    return image


# --- the kustomization --------------------------------------------------------------------

def render(directory: str | Path) -> list[dict]:
    """Every object the kustomization in ``directory`` produces, fully transformed."""
    kfile = _kustomization_file(Path(directory))
    k = yaml.safe_load(kfile.read_text()) or {}
    unknown = set(k) - SUPPORTED
    if unknown:
        raise RenderError(f"{kfile}: unsupported kustomization fields {sorted(unknown)}")
    objs: list[dict] = []
    for res in k.get("resources", []):
        path = kfile.parent / res
        if path.is_dir():
            objs += render(path)
        elif path.is_file():
            objs += _load_yaml_docs(path)
        else:
            raise RenderError(f"{kfile}: resources: {res} does not exist")
    gopts = k.get("generatorOptions", {})
    for spec in k.get("configMapGenerator", []):
        objs.append(_generate(kfile, spec, "ConfigMap", gopts))
    for spec in k.get("secretGenerator", []):
        objs.append(_generate(kfile, spec, "Secret", gopts))
    for entry in k.get("patches", []):
        _apply_patch(objs, kfile, entry)
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    for entry in k.get("labels", []):
        if set(entry) - {"pairs"}:
            raise RenderError(f"{kfile}: labels: only 'pairs' is supported")
        for o in objs:
            o["metadata"].setdefault("labels", {}).update(entry["pairs"])
    if k.get("images"):
        for o in objs:
            _set_images(o, k["images"])
    seen: set = set()
    for o in objs:
        if _ident(o) in seen:
            raise RenderError(f"{kfile}: {'/'.join(_ident(o))} is defined twice")
        seen.add(_ident(o))
    return objs


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: render.py KUSTOMIZATION_DIR", file=sys.stderr)
        return 2
    try:
        objs = render(argv[0])
    except RenderError as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.safe_dump_all(objs, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
