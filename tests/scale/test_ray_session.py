"""The verl runs' Ray session (``components.trainer.verl.run.ray_session``) on a machine where
an earlier ``ray start`` left its cluster address behind."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

# TEST-NET-1 (RFC 5737): nothing answers there
STALE = "192.0.2.1:6379"


@pytest.fixture
def stale_cluster_file(monkeypatch):
    """A Ray temp dir (``$RAY_TMPDIR/ray``) holding ``ray_current_cluster`` with an address nobody
    serves. Short, under /tmp: Ray's session sockets go below it and a Unix socket path has a
    length limit."""
    base = Path(tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp"))
    (base / "ray").mkdir()
    (base / "ray" / "ray_current_cluster").write_text(STALE)
    monkeypatch.setenv("RAY_TMPDIR", str(base))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield base / "ray" / "ray_current_cluster"
    shutil.rmtree(base, ignore_errors=True)


def test_a_run_starts_its_own_ray_despite_a_stale_cluster_address(stale_cluster_file):
    import ray
    from omegaconf import OmegaConf

    from components.trainer.verl.run import ray_session

    if ray.is_initialized():
        pytest.skip("this process already holds a Ray session (a shared head): ray_session would reuse it")
    # the premise: a bare ray.init reads the stale address and refuses a run's own resources
    with pytest.raises(ValueError, match="existing cluster"):
        ray.init(num_cpus=1)
    ray.shutdown()
    params = SimpleNamespace(n_gpus_per_node=1, nnodes=1)
    with ray_session(params, OmegaConf.create({}), on_cpu={"RLVR_RAY_SESSION_TEST": "1"}, cpu_units=2):
        assert ray.is_initialized()
        have = ray.cluster_resources()
        assert have.get("GPU") == 1 and have.get("CPU") == 2
    assert not ray.is_initialized()
