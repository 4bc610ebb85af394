import os

import pytest

# session fixtures (tests/support/live_services.py) on a real `rlvr services up` deployment (tests/browser, tests/services)
from live_services import live_services, services_sweep  # noqa: F401,E402

# The machine has 2 cores; tests never need more than one torch thread each.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# Under pytest-xdist (`make test` runs `-n 2`) a group of tests runs whole on one worker: each
# test file is a group, so its module fixtures are built once, and the files that share a
# session fixture (a deployment, the KFP compile report, SmolLM2, the scale environment) are one
# group, so that fixture is built once per run, not once per worker. (xdist's `--dist loadgroup`
# marks do not reach its scheduler under pytest 9's node ids.) Path prefix -> group:
_SESSION_GROUPS = {"tests/browser/": "live_services", "tests/test_tracking_runs.py": "live_services",
                   "tests/kfp/test_kfp_compile.py": "kfp_report", "tests/kfp/test_kfp_graph.py": "kfp_report",
                   "tests/engine/test_cuda.py": "smollm2", "tests/engine/test_parity.py": "smollm2",
                   "tests/scale/": "scale"}


def _group_of(nodeid: str) -> str:
    """The group of a test: its file, or the shared session fixture's group (_SESSION_GROUPS)."""
    path = nodeid.split("::", 1)[0]
    return next((g for prefix, g in _SESSION_GROUPS.items() if path.startswith(prefix)), path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

    return Groups(config, log)


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
