import os

import pytest

# session fixtures (tests/support/live_services.py) on a real `rlvr services up` deployment (tests/browser, tests/services)
from live_services import live_services, services_sweep  # noqa: F401,E402

# The machine has 2 cores; tests never need more than one torch thread each.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass


@pytest.fixture(scope="module")
def tok():
    from components.policy.tokenizer import build_tokenizer
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    """tests/support/tiny.py's policy, fresh per test module (modules may train it in place)."""
    from tiny import tiny_test_policy
    return tiny_test_policy(tok)
