"""One Grader per test module (worker start-up is paid once per module)."""
from __future__ import annotations

import pytest

from components.reward import Grader


@pytest.fixture(scope="module")
def grader():
    with Grader(workers=2, timeout_s=5.0) as g:
        yield g
