#!/usr/bin/env bash
# Cross-checks manifests/render.py (the renderer the tests use, which needs no kubectl)
# against `kubectl kustomize` on base, every overlay and secrets/ (rendered from the
# *.env.example files in a temporary copy). Objects are compared after parsing, keyed by
# kind/namespace/name, so only content counts, not key or document order.
#   manifests/check.sh            (PYTHON=... to choose the interpreter; needs PyYAML)
set -euo pipefail
cd "$(dirname "$0")"
command -v kubectl >/dev/null || { echo "check.sh: kubectl not on PATH, nothing to compare with" >&2; exit 2; }
PY=${PYTHON:-../.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/secrets"
cp secrets/kustomization.yaml "$tmp/secrets/"
for f in secrets/*.env.example; do cp "$f" "$tmp/secrets/$(basename "${f%.example}")"; done

status=0
for dir in base overlays/dev overlays/prod "$tmp/secrets"; do
    kubectl kustomize "$dir" > "$tmp/kubectl.yaml"
    "$PY" render.py "$dir" > "$tmp/python.yaml"
    if "$PY" - "$tmp/kubectl.yaml" "$tmp/python.yaml" <<'PYEOF'
import sys, yaml
def load(p):
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in yaml.safe_load_all(open(p)) if o}
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = sorted(set(a) ^ set(b)) + sorted(k for k in set(a) & set(b) if a[k] != b[k])
for k in bad:
    print("  differs:", "/".join(k))
print(f"  {len(a)} objects from kubectl, {len(b)} from render.py, {len(bad)} differ")
sys.exit(1 if bad else 0)
PYEOF
    then echo "OK   $dir"; else echo "DIFF $dir"; status=1; fi
done
exit $status
