"""The two Dockerfiles (images/) and their locks, checked without docker.

What a build would fail on, or silently get wrong, that can be read from the files:
unpinned bases, COPY sources missing from the repository or from the build context,
installs from files that do not exist, a root user, the CPU and GPU locks mixed, the
GPU lock missing verl/vllm or disagreeing with the manifests' Ray version.
"""
from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "images" / "pipeline" / "Dockerfile"
TRAINER = REPO / "images" / "trainer" / "Dockerfile"
DOCKERFILES = [PIPELINE, TRAINER]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\],]+)==([^\s;]+)")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line.strip())
        if m:
            pins[re.sub(r"[-_.]+", "-", m.group(1).lower())] = m.group(2)
    return pins


def dockerignore_excludes(rules: list[str], path: str) -> bool:
    """Docker's semantics: the last matching pattern wins, '!' re-includes; a pattern
    also covers everything under a matched directory."""
    excluded = False
    for rule in rules:
        neg = rule.startswith("!")
        pat = rule[1:] if neg else rule
        pat = pat.rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p, pat.replace("**/", "")) for p in prefixes)
        if hit:
            excluded = not neg
    return excluded


def ignore_rules(dockerfile: Path) -> list[str]:
    f = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert f.is_file(), f"{f} missing: BuildKit would send the whole repository (.venv, .rlvr)"
    return [ln.strip() for ln in f.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


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
    rules = ignore_rules(dockerfile)
    copies = [shlex.split(args) for ins, args in instructions(dockerfile) if ins in ("COPY", "ADD")]
    assert copies
    for words in copies:
        if any(w.startswith("--from=") for w in words):
            continue  # from another stage or image, not the repository
        srcs = [w for w in words if not w.startswith("--")][:-1]
        for src in srcs:
            assert (REPO / src).exists(), f"{dockerfile}: COPY {src}: not in the repository"
            assert not dockerignore_excludes(rules, src.rstrip("/")), \
                f"{dockerfile}: COPY {src} is excluded by its .dockerignore"


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
    assert dockerignore_excludes(ignore_rules(PIPELINE), "requirements-gpu.lock")
    assert dockerignore_excludes(ignore_rules(TRAINER), "requirements.lock")


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
    rules = ignore_rules(dockerfile)
    for path in (".venv", ".venv/bin/python", ".rlvr", ".rlvr/mlflow.db", ".git", "manifests/secrets/rlvr-s3.env",
                 "components/__pycache__/cli.cpython-311.pyc"):
        assert dockerignore_excludes(rules, path), f"{dockerfile.name}.dockerignore lets {path} in"
    assert not dockerignore_excludes(rules, "components/cli.py")


def test_dockerignore_matcher_follows_last_match_wins():
    rules = ["*", "!components/", "**/__pycache__"]
    assert dockerignore_excludes(rules, "README.md")
    assert not dockerignore_excludes(rules, "components/lineage.py")
    assert dockerignore_excludes(rules, "components/__pycache__/x.pyc")
