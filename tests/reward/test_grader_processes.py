"""The grader's worker processes never re-run the parent's ``__main__``, and the grader raises
(GraderError) when it cannot grade instead of scoring zeros."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from components.reward.grader import Grader, GraderError

ROOT = Path(__file__).resolve().parents[2]

# An Airflow task's __main__ in miniature: Airflow is imported with a working configuration,
# then the task sandbox replaces the metadata DB URL, so re-importing this module in a child
# process (what multiprocessing's spawn/forkserver children do) fails inside `import airflow`.
AIRFLOW_TASK_MAIN = '''
import os
import airflow  # noqa: F401  (works here: the configuration is still intact)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = "airflow-db-not-allowed:///"
from components.reward.grader import Grader

if __name__ == "__main__":
    with Grader(workers=1, startup_timeout_s=60) as g:
        r = g.grade("so \\\\boxed{4}", "4")
    print("GRADE", r.score, r.reason)
'''

# The same without Airflow: a main module that raises whenever it is imported again.
FRAGILE_MAIN = '''
import os
if os.environ.get("FRAGILE_MAIN_LOADED"):
    raise RuntimeError("this __main__ must not be re-run in a child process")
os.environ["FRAGILE_MAIN_LOADED"] = "1"
from components.reward.grader import Grader

if __name__ == "__main__":
    with Grader(workers=2, startup_timeout_s=60) as g:
        rs = g.grade_batch(["\\\\boxed{4}", "\\\\boxed{5}"], ["4", "4"])
    print("GRADE", rs[0].score, rs[0].reason, rs[1].reason)
'''


def _run_script(tmp_path: Path, source: str) -> str:
    script = tmp_path / "task_main.py"
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=str(ROOT), AIRFLOW_HOME=str(tmp_path / "airflow"))
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    return next(line for line in p.stdout.splitlines() if line.startswith("GRADE"))


def test_grading_under_an_airflow_task_main_is_correct(tmp_path):
    pytest.importorskip("airflow", reason="apache-airflow is not installed")
    assert _run_script(tmp_path, AIRFLOW_TASK_MAIN) == "GRADE 1.0 correct"


def test_grading_under_a_main_that_cannot_be_reimported(tmp_path):
    assert _run_script(tmp_path, FRAGILE_MAIN) == "GRADE 1.0 correct wrong"


def test_no_startable_worker_raises_with_the_reason(tmp_path, monkeypatch):
    # a broken environment: math-verify cannot be imported by the worker processes
    (tmp_path / "math_verify.py").write_text("raise ImportError('math_verify is broken here')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    g = Grader(workers=2, startup_timeout_s=60)
    try:
        with pytest.raises(GraderError, match="math_verify is broken here"):
            g.grade("\\boxed{4}", "4")
    finally:
        g.close()


def test_no_python_to_start_workers_raises(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with pytest.raises(GraderError, match="cannot start"):
        Grader(workers=1).grade("\\boxed{4}", "4")


def test_answers_without_workers_need_none():
    # no_answer is decided in the parent: a grader whose workers could not start is not asked
    g = Grader(workers=1)
    assert g.grade("no box here", "4").reason == "no_answer"
    assert g.stats["worker_starts"] == 0


@contextlib.contextmanager
def killing_busy_workers(g: Grader, once: bool, pause: float):
    """SIGKILL grader ``g``'s busy workers while the block runs (``once``: the first one only)."""
    stop = threading.Event()

    def killer():
        while not stop.is_set():
            for w in list(g._pool):
                if w.state == "busy":
                    try:
                        os.kill(w.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    if once:
                        return
            time.sleep(pause)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def test_workers_that_keep_dying_make_the_batch_raise():
    """A machine that kills workers (OOM killer, a broken sandbox) under the grader: the batch
    raises rather than scoring the killed items 0."""
    with Grader(workers=2, timeout_s=5.0, cache_size=0) as g:
        g.grade("\\boxed{0}", "0")
        with pytest.raises(GraderError, match="worker"), killing_busy_workers(g, once=False, pause=0.005):
            g.grade_batch([f"\\boxed{{\\frac{{{i}}}{{7}} + {i}^2}}" for i in range(400)],
                          [str(i) for i in range(400)])
        # the grader is usable again once the killing stops
        assert g.grade("\\boxed{4}", "4").reason == "correct"


def test_one_crash_in_a_big_batch_is_tolerated_and_regraded():
    """One worker crash is the answer's own business (e.g. a parse exhausting the worker's memory
    limit): that answer is "error", the rest of the worker's chunk is regraded, nothing raises."""
    n = 300
    with Grader(workers=2, timeout_s=5.0, cache_size=0) as g:
        g.grade("\\boxed{0}", "0")
        killed = []

        def kill_once():
            deadline = time.monotonic() + 30
            while not killed and time.monotonic() < deadline:
                for w in list(g._pool):
                    if w.state == "busy" and w.pos >= 1:
                        os.kill(w.pid, signal.SIGKILL)
                        killed.append(w.pid)
                        return
                time.sleep(0.001)

        t = threading.Thread(target=kill_once, daemon=True)
        t.start()
        out = g.grade_batch([f"\\boxed{{{i}}}" for i in range(n)], [str(i % 2) for i in range(n)])
        t.join()
        assert killed, "the batch finished before a worker could be killed"
        reasons = [x.reason for x in out]
        assert reasons.count("error") <= 1 and g.stats["worker_crashes"] == 1
        assert [r for i, r in enumerate(reasons) if r != "error"] == \
            [("correct" if i < 2 else "wrong") for i, r in enumerate(reasons) if r != "error"]


def test_crashes_spread_over_single_item_calls_raise_too():
    """Grading one answer at a time, a worker that dies on every answer is still noticed."""
    with Grader(workers=1, timeout_s=5.0, cache_size=0) as g:
        g.grade("\\boxed{0}", "0")
        outcomes = []
        for i in range(6):
            with killing_busy_workers(g, once=True, pause=0.0005):
                try:
                    outcomes.append(g.grade(f"\\boxed{{x^{i} + \\frac{{1}}{{3}}}}", "1").reason)
                except GraderError:
                    outcomes.append("raised")
            if outcomes[-1] == "raised":
                break
        assert outcomes[-1] == "raised", outcomes
        assert outcomes.count("error") <= 2 and set(outcomes[:-1]) <= {"error", "wrong"}
