"""The cache key covers the code a stage runs (components/code_fingerprint.py): changing a
stage's run(), or a project module it imports, without bumping VERSION never serves a stale
artifact, neither through run_stage nor through the receipts fast path."""
from __future__ import annotations

import json
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest

import toy_stages
from components import code_fingerprint as cf
from components import lineage, receipts

SUPPORT = Path(__file__).resolve().parent / "support"


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    """The fingerprint's disk cache lives under RLVR_HOME: one per test."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))


def _forget_process_caches() -> None:
    """What a new process starts with: only the disk cache."""
    cf._FILES.clear()
    cf._DISKS.clear()
    cf._FOUND.clear()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A plug-in stage package outside the project: fpkg.stage imports helpers lazily, one
    relatively, one through a registry string; it also imports bookkeeping and a third-party
    module, and cannot even be imported (torch-like heavy import at the top)."""
    root = tmp_path / "src"
    _write(root / "fpkg" / "__init__.py", "")
    _write(root / "fpkg" / "stage.py", '''
        import definitely_not_installed_heavy_lib  # noqa: F401  (never imported by the fingerprint)
        from components import lineage  # bookkeeping: left out
        VERSION = 1
        PLUGINS = {"x": "fpkg.plugin:Thing"}

        def run(params, ctx):
            from fpkg import helper
            from .sub import rel
            return helper.f() + rel.g()
        ''')
    _write(root / "fpkg" / "helper.py", "def f():\n    return 1\n")
    _write(root / "fpkg" / "plugin.py", "class Thing:\n    pass\n")
    _write(root / "fpkg" / "unused.py", "X = 1\n")
    _write(root / "fpkg" / "sub" / "__init__.py", "")
    _write(root / "fpkg" / "sub" / "rel.py", "def g():\n    return 2\n")
    monkeypatch.syspath_prepend(str(root))
    return root / "fpkg"


def _touch_edit(path: Path, old: str, new: str) -> None:
    time.sleep(0.01)  # a distinct mtime even on coarse file systems
    path.write_text(path.read_text().replace(old, new))


def test_module_files_follow_lazy_relative_and_registry_imports(pkg):
    files = cf.module_files("fpkg.stage")
    assert set(files) == {"fpkg", "fpkg.stage", "fpkg.helper", "fpkg.plugin", "fpkg.sub", "fpkg.sub.rel",
                          "components"}  # the package whose lineage module (bookkeeping) it imports
    assert "fpkg.stage" not in sys.modules  # parsed, never imported


def test_real_stages_cover_what_they_run_and_skip_bookkeeping():
    train = cf.module_files("components.stages.train")
    for mod in ("components.stages.train", "components.stages.common", "components.trainer.embedded",
                "components.reward.grader", "components.reward.worker", "components.reward.zygote",
                "components.methods.grpo", "components.methods.vsr"):   # methods: registry strings
        assert mod in train, mod
    assert not set(train) & cf.BOOKKEEPING
    assert "components.stages.tables" not in train  # another stage's change does not touch train


@pytest.mark.parametrize("stage", ["prepare_data", "train", "evaluate", "filter_hard", "pretrain"])
def test_agentic_stages_cover_the_environments_they_make(stage):
    # environments are made by name (make_env("sokoban")): the registry's module-path table
    # is what puts their files into the fingerprint
    files = cf.module_files(f"components.stages.{stage}")
    for mod in ("components.envs.sokoban", "components.envs.sokoban_gen", "components.envs.babyai"):
        assert mod in files, (stage, mod)


@pytest.mark.parametrize("stage", ["prepare_data", "pretrain", "filter_hard", "seed_prefixes", "evaluate"])
def test_data_stages_cover_both_tasks_parts_and_no_trainer(stage):
    files = cf.module_files(f"components.stages.{stage}")
    assert {"components.data.task_stages", "components.agentic.data_stages"} <= set(files)
    assert not [m for m in files if m.startswith(("components.trainer", "components.methods"))]


@pytest.mark.parametrize("stage", ["prepare_data", "pretrain", "filter_hard", "seed_prefixes", "train", "evaluate"])
def test_stages_before_the_analysis_do_not_cover_it(stage):
    """Editing a paper's number or a table's layout (analysis/) must not recompute pretraining,
    filtering, training or evaluation: only the tokens and tables stages read analysis/."""
    assert not [m for m in cf.module_files(f"components.stages.{stage}") if m.split(".")[0] == "analysis"]


@pytest.mark.parametrize("edited, flips", [
    ("stage.py", True), ("helper.py", True), ("sub/rel.py", True), ("plugin.py", True),
    ("unused.py", False)])
def test_editing_code_flips_the_fingerprint(pkg, edited, flips):
    before = cf.code_fingerprint("fpkg.stage")
    path = pkg / edited
    path.write_text(path.read_text() + "\nEXTRA = 'changed'\n")
    assert (cf.code_fingerprint("fpkg.stage") != before) is flips


def test_comments_and_layout_do_not_flip_it(pkg):
    before = cf.code_fingerprint("fpkg.stage")
    _touch_edit(pkg / "helper.py", "return 1", "return   1  # the answer, explained")
    assert cf.code_fingerprint("fpkg.stage") == before
    _touch_edit(pkg / "helper.py", "return   1", "return 3")
    assert cf.code_fingerprint("fpkg.stage") != before


def test_a_fresh_process_reuses_the_disk_cache_without_parsing(pkg, monkeypatch):
    before = cf.code_fingerprint("fpkg.stage")
    assert list((Path(lineage.rlvr_home()) / "cache").glob("code-fingerprint-py*.json"))
    _forget_process_caches()
    import ast

    class NoParse:
        def __getattr__(self, name):
            return getattr(ast, name)

        @staticmethod
        def parse(*a, **k):
            raise AssertionError("parsed although nothing changed")
    monkeypatch.setattr(cf, "ast", NoParse())
    assert cf.code_fingerprint("fpkg.stage") == before


@pytest.mark.parametrize("fresh_process", [False, True])
def test_same_size_same_mtime_edit_still_flips_it(pkg, fresh_process):
    """tar, rsync -t or touch -d can put an old mtime on new content of the same size."""
    import os

    path = pkg / "helper.py"
    before = cf.code_fingerprint("fpkg.stage")
    st = os.stat(path)
    path.write_text(path.read_text().replace("return 1", "return 7"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    if fresh_process:
        _forget_process_caches()
    assert cf.code_fingerprint("fpkg.stage") != before


def test_fingerprint_is_cheap_when_warm():
    cf.code_fingerprint("components.stages.train")
    t0 = time.perf_counter()
    for _ in range(10):
        cf.code_fingerprint("components.stages.train")
    per_call_ms = (time.perf_counter() - t0) * 100
    print(f"warm code_fingerprint(train): {per_call_ms:.2f} ms")
    assert per_call_ms < 100  # a few ms unloaded; generous for a busy CI box


def test_missing_stage_module_is_an_error():
    with pytest.raises(FileNotFoundError, match="no_such_stage_module"):
        cf.code_fingerprint("no_such_stage_module")


# ---------------------------------------------------------------- through run_stage and receipts

@pytest.fixture
def toy_copy(tmp_path, monkeypatch):
    """tests/support/toy_stages.py copied into a fresh package, registered as the stages, with a store."""
    root = tmp_path / "src"
    (root / "toycopy").mkdir(parents=True)
    (root / "toycopy" / "__init__.py").write_text("")
    shutil.copy(SUPPORT / "toy_stages.py", root / "toycopy" / "stages.py")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "rlvr"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(lineage.OVERRIDES_ENV, raising=False)
    monkeypatch.delenv(receipts.RECEIPT_ENV, raising=False)
    for v in ("TOY_FAIL", "TOY_SLEEP"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("TOY_CALLS", str(tmp_path / "calls.txt"))
    toy_stages.premigrated_mlflow_db(tmp_path / "rlvr")
    saved = dict(lineage.STAGES)
    for n in toy_stages.ALL:
        lineage.register_stage(n, f"toycopy.stages:{n}")
    yield root / "toycopy" / "stages.py"
    lineage.STAGES.clear()
    lineage.STAGES.update(saved)
    for m in [m for m in sys.modules if m.startswith("toycopy")]:
        del sys.modules[m]


def _fresh_process_view() -> None:
    """A new Airflow task imports the stage module afresh; so does this test."""
    for m in [m for m in sys.modules if m.startswith("toycopy")]:
        del sys.modules[m]


def _edit_prepare_data(path: Path) -> None:
    """prepare_data.run() now also writes edited.txt; VERSION stays 1."""
    src = path.read_text()
    a = src.index("class prepare_data")
    b = src.index("\nclass ", a + 1)
    old = 'return _toy_run("prepare_data", params, ctx)'
    assert src[a:b].count(old) == 1
    new = '(ctx.out_dir / "edited.txt").write_text("run() changed, VERSION not"); ' + old
    time.sleep(0.01)
    path.write_text(src[:a] + src[a:b].replace(old, new) + src[b:])


def test_changing_run_without_a_version_bump_recomputes(toy_copy):
    first = lineage.run_stage("prepare_data", {"n": 3}, {}, sweep="s")
    assert lineage.run_stage("prepare_data", {"n": 3}, {}, sweep="s")["cached"] is True
    manifest = json.loads((Path(first["uri"]) / "manifest.json").read_text())
    assert manifest["code"] == cf.code_fingerprint("toycopy.stages")
    tag = lineage.client().get_run(first["run_id"]).data.tags["rlvr.code"]
    assert tag == manifest["code"]

    _edit_prepare_data(toy_copy)
    _fresh_process_view()
    second = lineage.run_stage("prepare_data", {"n": 3}, {}, sweep="s")
    assert second["cache_key"] != first["cache_key"] and second["cached"] is False
    assert (Path(second["uri"]) / "edited.txt").is_file()      # the new code ran
    assert not (Path(first["uri"]) / "edited.txt").exists()


def test_receipts_fast_path_sees_a_code_change(toy_copy, monkeypatch):
    home = lineage.rlvr_home()
    tmp = receipts.begin(home, "s")
    monkeypatch.setenv(receipts.RECEIPT_ENV, str(tmp))
    data = lineage.run_stage("prepare_data", {"n": 3}, {}, sweep="s")
    receipts.record("prepare_data", {"n": 3}, {}, data)          # what a stage task records
    model = lineage.run_stage("pretrain", {}, {"data": data["uri"]}, sweep="s")
    receipts.record("pretrain", {}, {"data": data["uri"]}, model)
    monkeypatch.delenv(receipts.RECEIPT_ENV)
    receipts.commit(home, "s", "fp", tmp)
    assert receipts.all_cached(home, "s", "fp") == (True, "", 2)

    _edit_prepare_data(toy_copy)
    _fresh_process_view()
    ok, why, _ = receipts.all_cached(home, "s", "fp")
    assert not ok and why == "prepare_data: its cache key changed (stage code or defaults)"
