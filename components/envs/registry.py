"""Name -> environment factory. A new environment is one module that calls ``register``.

``make_env("sokoban", num_boxes=2)`` builds one. An unregistered name ``x`` imports
``components.envs.x`` first, so the module ``components/envs/x.py`` with ``@register("x")`` is
all a third environment needs (and an environment's optional dependency is imported only when
that environment is asked for).
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Callable

__all__ = ["register", "make_env", "env_names"]

_FACTORIES: dict[str, Callable] = {}
# Written out as module paths (not built from the name) so that the code fingerprint of a cached
# stage that makes environments covers their modules (components/code_fingerprint.py follows
# module-path strings): editing sokoban.py invalidates the agentic artifacts built with it.
BUILTIN = {"babyai": "components.envs.babyai", "sokoban": "components.envs.sokoban"}


def register(name: str):
    def deco(factory: Callable) -> Callable:
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise ValueError(f"environment {name!r} registered twice")
        _FACTORIES[name] = factory
        return factory
    return deco


def env_names() -> list[str]:
    return sorted(set(BUILTIN) | set(_FACTORIES))


def make_env(name: str, **kwargs):
    if name not in _FACTORIES and re.fullmatch(r"[a-z_][a-z0-9_]*", name or ""):
        module = BUILTIN.get(name, f"components.envs.{name}")
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
    if name not in _FACTORIES:
        raise KeyError(f"unknown environment {name!r}; known: {', '.join(env_names())} "
                       f"(a new one is a module components/envs/<name>.py calling register)")
    return _FACTORIES[name](**kwargs)
