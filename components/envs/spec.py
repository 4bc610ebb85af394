"""The environment spec that travels with an episodic task's artifacts (``env.json``): the
environment's name and config, written by prepare_data and read by every later stage."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

ENV_FILE = "env.json"


def env_spec(name: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"env": name, "config": dict(config)}


def read_env(artifact: Path) -> dict[str, Any]:
    path = artifact / ENV_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (not an agentic prepare_data / filter_hard output)")
    spec = json.loads(path.read_text())
    if not isinstance(spec, dict) or "env" not in spec or not isinstance(spec.get("config"), dict):
        raise ValueError(f"{path}: expected {{'env': name, 'config': {{...}}}}")
    return spec


def env_factory(spec: dict[str, Any]) -> Callable:
    from components.envs import make_env

    name, cfg = spec["env"], spec["config"]
    make_env(name, **cfg)      # fail here, once, on a bad spec
    return lambda: make_env(name, **cfg)


def write_env(out_dir: Path, spec: dict[str, Any]) -> None:
    (out_dir / ENV_FILE).write_text(json.dumps(spec, indent=2, sort_keys=True))
