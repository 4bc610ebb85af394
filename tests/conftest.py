import os

import pytest

# The machine has 2 cores; tests never need more than one torch thread each.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
