#!/usr/bin/env python3
"""Finds floating-point multiplies that ptxas may or may not fuse with an add (CI, no GPU needed).

A PTX mul/add/sub without a rounding modifier (mul.f32, add.f32, mul.f16x2, ...) may be contracted by
ptxas into one fma; with one (mul.rn.f32 from __fmul_rn, fma.rn.f32 from __fmaf_rn or from NVVM's own
contraction) it may not. Whether ptxas fuses such a pair depends on the code around it (NVVM contracts
only inside a basic block; ptxas after its own if-conversion and scheduling), so the same source
expression inlined into two kernels can round once in one and twice in the other. The GEMV's batch
invariance (a row alone bitwise equal to the same row in any tile) rests on every kernel instance doing
the same arithmetic, so its kernels must leave ptxas no such choice: this script reports every register
defined by a contractable mul that a contractable add or sub reads (through movs), per .entry whose name
matches the pattern. The bug it catches: gemv_kernel<int8, f16, 1>'s one-row epilogue
`total * scale + bias` became mul.f32 + add.f32 (NVVM had hoisted the mul above the bias-format branch)
and ptxas kept them apart, while every tile epilogue was one fma: one output in a few differed in its
last bit between a row alone and the same row in a batch (CudaOps.IntegerWeightsMatchCpuAndAreBatchInvariant
on an H100).

usage: ptx-contraction.py FILE.ptx [ENTRY_REGEX]   (default regex: gemv_kernel); exit 1 when any is found
"""
import re
import sys

FLOAT_TYPES = {"f32", "f64", "f16", "f16x2", "bf16", "bf16x2"}
ROUNDING = {"rn", "rz", "rm", "rp"}
INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s+([^;]*);")


def parse(op):
    parts = op.split(".")
    return parts[0], set(parts[1:])


def contractable(op, names):
    base, mods = parse(op)
    return base in names and bool(mods & FLOAT_TYPES) and not (mods & ROUNDING)


def entries(text):
    """(name, body lines) of each .entry / .func."""
    out, name, body = [], None, []
    for line in text.splitlines():
        m = re.match(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", line)
        if m:
            if name is not None:
                out.append((name, body))
            name, body = m.group(1), []
        elif name is not None:
            body.append(line)
    if name is not None:
        out.append((name, body))
    return out


def instructions(body):
    for line in body:
        # Inline asm arrives as "{ mul.f16x2 %r1,%r2,%r3;\n}" on one line or several.
        for stmt in line.replace("{", " ").replace("}", " ").split(";"):
            m = INSTR.match(stmt + ";")
            if m:
                ops = [o.strip() for o in m.group(2).split(",")]
                yield m.group(1), ops, line.strip()


def check(name, body):
    tainted = {}  # register -> the mul that defined it
    found = []
    instrs = list(instructions(body))
    # Two passes so that movs after the use in text order (loops) still propagate.
    for _ in range(2):
        for op, ops, line in instrs:
            if not ops:
                continue
            base, _ = parse(op)
            if contractable(op, {"mul"}):
                tainted[ops[0]] = line
            elif base == "mov" and len(ops) == 2 and ops[1] in tainted:
                tainted[ops[0]] = tainted[ops[1]]
    for op, ops, line in instrs:
        if contractable(op, {"add", "sub"}):
            for src in ops[1:]:
                if src in tainted:
                    found.append((tainted[src], line))
    return found


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    pattern = re.compile(sys.argv[2] if len(sys.argv) > 2 else "gemv_kernel")
    text = open(sys.argv[1]).read()
    bad, n = 0, 0
    for name, body in entries(text):
        if not pattern.search(name):
            continue
        n += 1
        for mul, add in check(name, body):
            bad += 1
            print(f"{name}:\n  {mul}\n  {add}")
    print(f"ptx-contraction: {n} entries matching /{pattern.pattern}/, {bad} mul+add pairs left to ptxas")
    if n == 0:
        print("ptx-contraction: no entry matched")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
