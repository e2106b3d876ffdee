"""Reads a cubin's SASS for one defect the source cannot show: an instruction that touches a
wgmma accumulator register while the asynchronous wgmma that writes it may still be running.

wgmma.mma_async writes its fp32 accumulators asynchronously (SASS ``HGMMA``); only a
``wgmma.wait_group N`` (``WARPGROUP.DEPBAR.LE gsb0, N``) makes all but the N newest committed
groups' registers readable. The generated PTX orders it right, but ptxas (nvcc 13.0) has been
seen to schedule a kernel's epilogue reads above the final wait (space v3's scalar epilogue at
``inflight`` 1: the last k block's products missing, ``wrong_result`` on the GPU). The check
here is a dataflow pass over the SASS's control-flow graph: per register, the fewest groups
committed after the one that writes it (on any path); ``DEPBAR.LE gsb0, N`` retires every
register of N or more; a non-HGMMA instruction naming a register still pending is reported.

The disassembler is ``cuobjdump`` (CUDA's, or the PyPI wheel ``nvidia-cuda-cuobjdump``, the
``test`` extra: its binary lies in the ``nvidia`` namespace package, ``cu13/bin``)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

TOOL = "cuobjdump"
#: at most this many groups are counted (a wait names 0 to 7); a register committed this many
#: groups ago or more stays "this many" until a wait retires it
_MAX_DEPTH = 8
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_HGMMA = re.compile(r"HGMMA\.\d+x(\d+)x\d+\.F32\S*\s+R(\d+)\b")
_DEPBAR = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)")
_REG = re.compile(r"(?<![\w.])R(\d+)\b")
_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?(BRA|EXIT|RET|BRX|JMP|JMX)\b(?:\S*)\s*(0x[0-9a-f]+)?")


def tool_path(name: str = TOOL) -> str | None:
    """``name`` on PATH, else in the PyPI wheel's folder (``nvidia/cu13/bin`` or ``cu12``);
    None where neither has it."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for cu in ("cu13", "cu12"):
            path = os.path.join(root, cu, "bin", name)
            if os.access(path, os.X_OK):
                return path
    return None


def why_no_disassembler() -> str | None:
    """None when :func:`sass` can run, else why not (and how to get the tool)."""
    if tool_path() is None:
        return (f"{TOOL} is neither on PATH nor installed from PyPI (pip install "
                f"nvidia-cuda-cuobjdump, in bocast's test extra): the SASS check cannot run")
    return None


def sass(cubin: bytes, *, timeout_s: float = 60.0) -> str:
    """The cubin's SASS as ``cuobjdump -sass`` prints it."""
    tool = tool_path()
    if tool is None:
        raise RuntimeError(why_no_disassembler())
    with tempfile.TemporaryDirectory(prefix="bocast_sass_") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([tool, "-sass", path], capture_output=True, text=True,
                              timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{TOOL} -sass failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


@dataclass(frozen=True)
class EarlyRead:
    """An instruction naming accumulator registers while their wgmma group may be running."""
    function: str
    address: int
    instruction: str
    registers: tuple[int, ...]

    def __str__(self) -> str:
        regs = ", ".join(f"R{r}" for r in self.registers)
        return f"{self.function} /*{self.address:04x}*/ {self.instruction} ({regs} pending)"


def _functions(text: str) -> dict[str, list[tuple[int, str]]]:
    """Each function's instructions, (address, text without the predicate's spacing)."""
    out: dict[str, list[tuple[int, str]]] = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"\s*Function\s*:\s*(\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = _INSTR.search(line)
        if m and name is not None:
            out[name].append((int(m.group(1), 16), " ".join(m.group(2).split())))
    return out


def _registers(ins: str) -> set[int]:
    """The general registers an instruction names (a vector operand's .64/.128 width counts:
    ``STG.E.64 [R2.64], R24`` reads R24 and R25; an address's pair is the base's own)."""
    op = ins.split()[1] if ins.startswith("@") else ins.split()[0]
    width = 4 if ".128" in op else 2 if ".64" in op else 1
    regs: set[int] = set()
    for m in _REG.finditer(ins):
        r = int(m.group(1))
        in_address = ins.rfind("[", 0, m.start()) > ins.rfind("]", 0, m.start())
        regs.update(range(r, r + (1 if in_address else width)))
    return regs


def _transfer(state: dict[int, int], ins: str) -> tuple[dict[int, int], set[int]]:
    """(the pending registers after ``ins``: register -> groups committed since its own, the
    registers of ``ins`` that were pending)."""
    m = _HGMMA.search(ins)
    if m:
        new = dict(state)
        for r in range(int(m.group(2)), int(m.group(2)) + int(m.group(1)) // 2):
            new[r] = -1  # in the open group, committed by the next HGMMA with gsb0
        if "gsb0" in ins:
            new = {r: min(d + 1, _MAX_DEPTH) for r, d in new.items()}
        return new, set()
    m = _DEPBAR.search(ins)
    if m:
        keep = int(m.group(1), 16)
        return {r: d for r, d in state.items() if d < keep}, set()
    if "WARPGROUP" in ins:  # ARRIVE (wgmma.fence): orders nothing for registers
        return state, set()
    return state, _registers(ins) & set(state)


def early_accumulator_reads(text: str) -> list[EarlyRead]:
    """Every instruction of ``text`` (cuobjdump -sass) that reads or writes a register an
    HGMMA may still be writing on some path to it (empty for a race-free kernel)."""
    found: list[EarlyRead] = []
    for name, instrs in _functions(text).items():
        if not any(_HGMMA.search(ins) for _, ins in instrs):
            continue
        index = {addr: i for i, (addr, _) in enumerate(instrs)}
        succ: list[list[int]] = []
        for i, (_, ins) in enumerate(instrs):
            m = _BRANCH.match(ins)
            nxt = [i + 1] if i + 1 < len(instrs) else []
            if m is None:
                succ.append(nxt)
                continue
            conditional, kind, target = m.group(1), m.group(2), m.group(3)
            tgt = [index[int(target, 16)]] if target and int(target, 16) in index else []
            succ.append((nxt if conditional else []) + (tgt if kind == "BRA" else []))
        # instruction-level worklist: state on entry of each instruction, joined by min depth
        entry: list[dict[int, int] | None] = [None] * len(instrs)
        entry[0] = {}
        work = [0]
        while work:
            i = work.pop()
            out, _ = _transfer(entry[i] or {}, instrs[i][1])
            for j in succ[i]:
                old = entry[j]
                merged = dict(out) if old is None else {
                    r: min(old.get(r, _MAX_DEPTH + 1), out.get(r, _MAX_DEPTH + 1))
                    for r in old.keys() | out.keys()}
                if merged != old:
                    entry[j] = merged
                    work.append(j)
        for (addr, ins), state in zip(instrs, entry):
            if state is None:  # unreachable
                continue
            _, hit = _transfer(state, ins)
            if hit:
                found.append(EarlyRead(name, addr, ins, tuple(sorted(hit))))
    return found
