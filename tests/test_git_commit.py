"""run_card.git_commit, the commit every stage run records (``mlflow.source.git.commit``) and
the results blocks print: a ``git archive`` snapshot names its commit (export-subst of
components/GIT_COMMIT), and a tree that is neither a checkout nor a snapshot names none, even
inside another repository."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASK = "from components.run_card import git_commit; print(git_commit())"


def _commit_of(tree: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RLVR_GIT_COMMIT"}
    r = subprocess.run([sys.executable, "-c", ASK], cwd=tree, env={**env, "PYTHONPATH": str(tree)},
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_a_git_archive_snapshot_names_its_commit(tmp_path):
    head = _git("rev-parse", "HEAD", cwd=ROOT)
    archive = subprocess.run(["git", "archive", "HEAD", "components"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    assert (tmp_path / "components" / "GIT_COMMIT").read_text().strip() == head
    assert _commit_of(tmp_path) == head


def test_a_copy_inside_another_repository_names_no_commit(tmp_path):
    _git("init", "-q", cwd=tmp_path)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "other", cwd=tmp_path)
    tree = tmp_path / "copy"
    shutil.copytree(ROOT / "components", tree / "components", ignore=shutil.ignore_patterns("__pycache__"))
    assert (tree / "components" / "GIT_COMMIT").read_text().strip() == "$Format:%H$"
    assert _commit_of(tree) == "None"
