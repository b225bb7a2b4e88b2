"""The Dockerfile's shape (hadolint runs separately in scripts/check-packaging.sh)."""

import json
import re

from conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def instructions():
    text = DOCKERFILE.read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)  # join continuation lines
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages():
    out, current = [], None
    for word, rest in instructions():
        if word == "FROM":
            current = {"from": rest, "body": []}
            out.append(current)
        elif current is not None:
            current["body"].append((word, rest))
    return out


def test_multi_stage_build_on_bookworm_run_on_distroless():
    st = stages()
    assert len(st) == 2
    assert re.fullmatch(r"rust:1-bookworm AS builder", st[0]["from"], re.I)
    assert st[1]["from"] == "gcr.io/distroless/cc-debian12:nonroot"
    runs = " ".join(rest for word, rest in st[0]["body"] if word == "RUN")
    assert "cargo build --release --locked -p gpu-otel-sidecar" in runs


def test_only_the_binary_is_copied_into_the_runtime_image():
    copies = [rest for word, rest in stages()[1]["body"] if word == "COPY"]
    assert len(copies) == 1
    assert "--from=builder" in copies[0] and copies[0].endswith("/gpu-otel-sidecar /gpu-otel-sidecar")


def test_runtime_settings():
    body = stages()[1]["body"]
    env = " ".join(rest for word, rest in body if word == "ENV")
    assert re.search(r"\bNVIDIA_DRIVER_CAPABILITIES=utility\b", env)
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    [user] = [rest for word, rest in body if word == "USER"]
    uid = user.split(":")[0]
    assert uid in ("nonroot", "65532"), "run as distroless' nonroot user"
    [health] = [rest for word, rest in body if word == "HEALTHCHECK"]
    cmd = health[health.index("CMD") + 3:].strip()
    assert json.loads(cmd) == ["/gpu-otel-sidecar", "health"], "exec-form health check (no shell in the image)"
    [entry] = [rest for word, rest in body if word == "ENTRYPOINT"]
    assert json.loads(entry) == ["/gpu-otel-sidecar"]


def test_oci_labels():
    labels = " ".join(rest for word, rest in stages()[1]["body"] if word == "LABEL")
    for key in ("title", "description", "version", "revision", "source", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key


def test_dockerignore_keeps_the_workspace_and_drops_the_rest():
    ignored = [l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert ".git" in ignored and any(p.endswith("target") for p in ignored)
    for needed in ("Cargo.toml", "Cargo.lock", "src", "tests", "tests/nvml-mock"):
        assert needed not in ignored, f"{needed} is needed by cargo"


def dockerignore_patterns():
    pats = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            assert not line.startswith("!"), "exceptions are not handled by this test"
            pats.append(line.strip("/"))
    return pats


def ignored(rel, patterns):
    """Docker's .dockerignore rule, for the patterns used here: a pattern matches the path or
    one of its parent directories; `**` matches any number of directories."""
    import fnmatch

    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        for p in prefixes:
            if fnmatch.fnmatchcase(p, pat):
                return True
            if pat.startswith("**/") and (fnmatch.fnmatchcase(p, pat[3:]) or fnmatch.fnmatchcase(p.split("/")[-1], pat[3:])):
                return True
    return False


def test_build_context_is_a_loadable_cargo_workspace(tmp_path):
    """What `docker build .` sends (git's files minus .dockerignore) holds the whole Cargo
    workspace: cargo can load every member and target from it, and Cargo.lock is there for
    --locked."""
    import shutil
    import subprocess

    import pytest

    cargo = shutil.which("cargo")
    if not cargo:
        pytest.skip("cargo not on PATH")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    patterns = dockerignore_patterns()
    ctx = tmp_path / "context"
    kept = 0
    for rel in filter(None, files):
        if ignored(rel, patterns) or not (ROOT / rel).is_file():
            continue
        (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, ctx / rel)
        kept += 1
    assert (ctx / "Cargo.lock").is_file() and (ctx / "Cargo.toml").is_file()
    assert not (ctx / "helm").exists() and not (ctx / "docker").exists()
    proc = subprocess.run([cargo, "metadata", "--no-deps", "--offline", "--format-version", "1"],
                          cwd=ctx, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"cargo cannot load the workspace from the build context ({kept} files):\n{proc.stderr}"
    meta = json.loads(proc.stdout)
    assert "gpu-otel-sidecar" in {p["name"] for p in meta["packages"]}
