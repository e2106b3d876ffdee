"""Compile generated CUDA source to a cubin with nvcc and read ptxas's resource report.

We use nvcc on both machines (13.0 on the CPU machines and on the H100 machine), so the static
features recorded on a CPU are those of the kernel that runs on the GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

NVCC_FLAGS = ("-cubin", "-O3", "-Xptxas", "-v")
#: sm_90 for the s_tir spaces; sm_90a (the arch-specific ISA) for wgmma, setmaxnreg, TMA (v3)
DEFAULT_ARCH = "sm_90"

_FEATURE_PATTERNS = {
    "registers": r"Used (\d+) registers",
    "smem_bytes": r"(\d+) bytes smem",
    "stack_bytes": r"(\d+) bytes stack frame",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
}


@dataclass
class CompileResult:
    ok: bool
    cubin: bytes | None
    features: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    log: str = ""
    timed_out: bool = False
    # the machine's fault, not the source's: no nvcc, or nvcc ended by a signal (out of memory)
    fault: bool = False


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def why_no_compiler() -> str | None:
    """None when nvcc is usable, else the reason static build checks are skipped."""
    if nvcc_path() is None:
        return "nvcc is not on PATH: static build checks (nvcc -cubin -arch=sm_90) are skipped"
    return None


def nvcc_version() -> str | None:
    """The release line of ``nvcc --version`` (None without nvcc)."""
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln for ln in out.stdout.splitlines() if "release" in ln]
    return lines[-1].strip() if lines else out.stdout.strip()[-200:]


def parse_ptxas(log: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, pat in _FEATURE_PATTERNS.items():
        m = re.search(pat, log)
        if m:
            out[key] = float(m.group(1))
    # ptxas's C7510-C7515 "Potential Performance Loss": wgmma.mma_async serialized (too few
    # registers for its pipeline, calls, ...): a kernel that runs, at a fraction of its speed
    if re.search(r"wgmma\.mma_async instructions are serialized", log):
        out["wgmma_serialized"] = 1.0
    m = re.search(r"Compile time = ([\d.]+) ms", log)
    if m:
        out["ptxas_ms"] = float(m.group(1))
    return out


def compile_cubin(source: str, *, timeout_s: float = 120.0, arch: str = DEFAULT_ARCH
                  ) -> CompileResult:
    nvcc = nvcc_path()
    if nvcc is None:
        return CompileResult(False, None, log=why_no_compiler() or "", fault=True)
    with tempfile.TemporaryDirectory(prefix="bocast_nvcc_") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        out = os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(source)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([nvcc, *NVCC_FLAGS, f"-arch={arch}", src, "-o", out],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            log = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) \
                else (e.stderr or "")
            return CompileResult(False, None, seconds=time.perf_counter() - t0,
                                 log=f"nvcc timed out after {timeout_s:.0f} s\n{log}",
                                 timed_out=True)
        seconds = time.perf_counter() - t0
        log = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines()
                        if "declared but never referenced" not in ln and "herf" not in ln
                        and ln.strip() not in ("^", ""))
        if proc.returncode != 0 or not os.path.exists(out):
            errors = [ln for ln in log.splitlines() if "error" in ln.lower()]
            if proc.returncode < 0:
                errors.insert(0, f"nvcc killed by signal {-proc.returncode}")
            return CompileResult(False, None, seconds=seconds, log="\n".join(errors) or log,
                                 fault=proc.returncode < 0)
        with open(out, "rb") as f:
            cubin = f.read()
    return CompileResult(True, cubin, parse_ptxas(log), seconds, log)
