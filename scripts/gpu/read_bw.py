#!/usr/bin/env python3
"""The GPU's read bandwidth now, in GB/s, printed as one number (the limit beside every benchmark of
scripts/gpu and bench/compare): torch sums a 4 GiB float32 tensor, 3 warm-up runs, the median of 20 timed
by CUDA events. Needs torch with CUDA (the GPU machine's python3)."""
import torch

x = torch.ones(1 << 30, dtype=torch.float32, device="cuda")
for _ in range(3):
    x.sum()
ts = []
for _ in range(20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    x.sum()
    b.record()
    torch.cuda.synchronize()
    ts.append(a.elapsed_time(b) / 1e3)
ts.sort()
print(f"{x.numel() * 4 / ts[len(ts) // 2] / 1e9:.1f}")
