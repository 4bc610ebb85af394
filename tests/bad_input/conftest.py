"""Shared helpers of the bad-input corpus: loading the case files (JSON lines / YAML
documents). Every case carries its expected outcome; a case file that is itself
malformed fails loudly here rather than silently testing less."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

CORPUS = Path(__file__).resolve().parent / "corpus"


def jsonl_cases(name: str) -> list[dict]:
    rows = [json.loads(ln) for ln in (CORPUS / name).read_text().splitlines() if ln.strip()]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"{name}: duplicate case ids"
    return rows


def yaml_cases(name: str) -> list[dict]:
    rows = [d for d in yaml.safe_load_all((CORPUS / name).read_text()) if d]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"{name}: duplicate case ids"
    return rows


def model_output(case: dict, marker: Path):
    """The model output a grader case describes: text (``{MARKER}`` -> a path that must
    never come to exist), raw bytes (``output_b64``), a repeated pattern (``output_parts``:
    [[text, times], ...]) or a non-string JSON value (``output_json``)."""
    if "output_b64" in case:
        return base64.b64decode(case["output_b64"])
    if "output_json" in case:
        return case["output_json"]
    text = case["output"] if "output" in case else "".join(t * n for t, n in case["output_parts"])
    return text.replace("{MARKER}", str(marker))
