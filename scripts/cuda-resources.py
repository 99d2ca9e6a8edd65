#!/usr/bin/env python3
"""Checks every kernel's resources in an sm_70 cubin (CI, issue 13): `cuobjdump --dump-resource-usage` on
the cuda-check build's libvolt_cuda.a (every .cu compiled for 70-real), and ptxas' own report of spills when
the build log is given (the cuda-check preset compiles with -Xptxas=-v).

Rules, each with its reason:
  - static shared memory <= 96 KiB per block: the most a V100 block can have (and only after opting in;
    kernels that need more than 48 KiB must raise cudaFuncAttributeMaxDynamicSharedMemorySize).
  - no local memory (LOCAL) and no stack frame (STACK) in the hot kernels: a stack frame or local memory in
    a kernel means spilled registers or a dynamically indexed array, both slow. ALLOWED_STACK lists the
    exceptions with their reason.
  - no "spill stores" in ptxas' report (when the log is given).

usage: cuda-resources.py LIBVOLT_CUDA_A [BUILD_LOG]
"""
import re
import subprocess
import sys

MAX_SHARED = 96 * 1024
# Kernels allowed a stack frame (matched against the demangled-enough mangled name), with the reason.
ALLOWED_STACK = {
    "rope_kernel": "cosf/sinf's exact large-argument reduction (libdevice's Payne-Hanek) keeps its table "
                   "on the stack; no spill (ptxas reports 0 spill stores)",
    "rope_kv_write_kernel": "rope_kernel's cosf/sinf (the same Payne-Hanek table on the stack); no spill",
    "gemv_kernel": "the 56-byte GemvOut parameter (three output segments of a fused q|k|v GEMV) copied to "
                   "the stack because the epilogue picks a segment by a runtime index; once per output "
                   "group, no spill; the code as measured on the H200 (docs/performance.md, issue 14). "
                   "To remove: select the segment with constant indices (not re-run on a GPU yet)",
}


def short(name):
    """The kernel's identifier inside an Itanium-mangled name (<length><identifier> pieces), plus its
    template arguments' short form so that instantiations stay apart: linear_kernel<0,2>."""
    i, pieces = 0, []
    while i < len(name):
        m = re.match(r"(\d+)", name[i:])
        if not m:
            i += 1
            continue
        n = int(m.group(1))
        start = i + len(m.group(1))
        pieces.append((name[start:start + n], start + n))
        i = start + n
    for ident, end in pieces:
        if ident.endswith("_kernel"):
            args = re.findall(r"E(\d+)E|L[a-z](\d+)E", name[end:end + 80])
            vals = [a or b for a, b in args][:3]
            return ident + (f"<{','.join(vals)}>" if vals and name[end:end + 1] == "I" else "")
    return name


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    lib = sys.argv[1]
    out = subprocess.run(["cuobjdump", "--dump-resource-usage", lib], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"cuda-resources: cuobjdump failed on {lib}:\n{out.stderr}")
        return 1
    kernels = []
    arch = None
    for line in out.stdout.splitlines():
        a = re.match(r"\s*arch = (sm_\d+)", line)
        if a:
            arch = a.group(1)
        f = re.match(r"\s*Function (\S+):", line)
        if f:
            kernels.append({"name": f.group(1), "arch": arch})
            continue
        r = re.match(r"\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", line)
        if r and kernels and "reg" not in kernels[-1]:
            k = kernels[-1]
            k["reg"], k["stack"], k["shared"], k["local"] = map(int, r.groups())
    kernels = [k for k in kernels if "reg" in k]
    if not kernels:
        print(f"cuda-resources: no kernels found in {lib}")
        return 1
    failures = []
    print(f"{'kernel':32} {'arch':6} {'REG':>4} {'STACK':>5} {'SHARED':>6} {'LOCAL':>5}")
    for k in kernels:
        s = short(k["name"])
        print(f"{s:32} {k['arch'] or '?':6} {k['reg']:4} {k['stack']:5} {k['shared']:6} {k['local']:5}")
        if k["arch"] != "sm_70":
            failures.append(f"{s}: compiled for {k['arch']}, expected sm_70 (use the cuda-check preset)")
        if k["shared"] > MAX_SHARED:
            failures.append(f"{s}: {k['shared']} bytes of shared memory per block (V100 limit {MAX_SHARED})")
        if k["local"] > 0:
            failures.append(f"{s}: {k['local']} bytes of local memory (spills or a dynamically indexed array)")
        if k["stack"] > 0 and s.split("<")[0] not in ALLOWED_STACK:
            failures.append(f"{s}: a {k['stack']}-byte stack frame (register spills or local arrays); "
                            f"fix it or add it to ALLOWED_STACK with the reason")
    if len(sys.argv) > 2:
        log = open(sys.argv[2], errors="replace").read()
        current = None
        spills_seen = 0
        for line in log.splitlines():
            f = re.search(r"Compiling entry function '(\S+)' for '(sm_\d+)'", line)
            if f:
                current = f.group(1)
                continue
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and current:
                spills_seen += 1
                if int(m.group(1)) or int(m.group(2)):
                    failures.append(f"{short(current)}: ptxas reports {m.group(1)} bytes of spill stores, "
                                    f"{m.group(2)} of spill loads")
        print(f"ptxas spill reports read: {spills_seen} (from {sys.argv[2]})")
    print(f"{len(kernels)} kernels checked in {lib}")
    if failures:
        print("cuda-resources: FAILED\n  " + "\n  ".join(failures))
        return 1
    print("cuda-resources: ok (shared <= 96 KiB, no local memory, no stack frame outside ALLOWED_STACK, no spills)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
