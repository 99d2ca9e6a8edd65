"""CPU dry run of bench/compare only: Debian 12's torch 1.13 predates the float8 dtypes that llama.cpp's
converter names in a table (the demo model has none); give the names a stand-in so the module loads."""
try:
    import torch

    for _n in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, _n):
            setattr(torch, _n, torch.uint8)
except ImportError:
    pass
