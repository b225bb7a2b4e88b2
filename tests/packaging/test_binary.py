"""The release binary links only glibc (libc, libm), libgcc_s and the loader, and needs at most
GLIBC_2.36 (Debian bookworm, the distroless cc-debian12 runtime).

The binary: $GPU_OTEL_SIDECAR_BINARY, else target/release/gpu-otel-sidecar. Without one the test
skips, unless REQUIRE_RELEASE_BINARY=1 (CI builds it first)."""

import os
import re

import pytest

from conftest import ROOT

ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libgcc_s.so.1"}
LOADERS = {"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"}
MAX_GLIBC = (2, 36)


@pytest.fixture(scope="module")
def binary():
    path = os.environ.get("GPU_OTEL_SIDECAR_BINARY") or str(ROOT / "target" / "release" / "gpu-otel-sidecar")
    if not os.path.isfile(path):
        if os.environ.get("REQUIRE_RELEASE_BINARY") == "1":
            pytest.fail(f"release binary {path} not found (cargo build --release -p gpu-otel-sidecar)")
        pytest.skip(f"no release binary at {path}; build it to check its dynamic dependencies")
    return path


def test_dynamic_dependencies(binary):
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    with open(binary, "rb") as f:
        elf = ELFFile(f)
        interp = [s for s in elf.iter_segments() if s["p_type"] == "PT_INTERP"]
        assert interp, "not a dynamically linked executable (no PT_INTERP): a static binary cannot dlopen NVML"
        assert interp[0].get_interp_name() in LOADERS
        needed = set()
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                needed |= {t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"}
        assert needed <= ALLOWED_NEEDED, f"unexpected libraries: {sorted(needed - ALLOWED_NEEDED)}"
        assert "libc.so.6" in needed
        versions = set()
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for verneed, aux_iter in section.iter_versions():
                    for aux in aux_iter:
                        versions.add(aux.name)
    glibc = [tuple(int(x) for x in m.group(1).split(".")) for v in versions if (m := re.fullmatch(r"GLIBC_([0-9.]+)", v))]
    assert glibc, "no GLIBC symbol versions"
    assert max(glibc) <= MAX_GLIBC, f"needs GLIBC_{'.'.join(map(str, max(glibc)))} > bookworm's 2.36"
