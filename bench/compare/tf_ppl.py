#!/usr/bin/env python3
"""bench/compare/tf_ppl.py MODEL_DIR BASE.kld: transformers' perplexity on the tokens and scored positions of a
llama.cpp KL base file (each chunk of n_ctx ids run alone; positions n_ctx/2 .. n_ctx-2 predict the next id, as
llama-perplexity scores them), for the agreement rows of bench/compare/serve_20b.sh (the demo model). fp32,
eager attention, MXFP4 experts dequantized by transformers itself (Mxfp4Config(dequantize=True)), CUDA when
torch has it. Prints one JSON line."""
import json
import math
import sys

import torch
import transformers
from transformers import GptOssForCausalLM

sys.path.insert(0, __import__("os").path.dirname(__file__))
from compare import read_base_header  # noqa: E402

model_dir, base = sys.argv[1], sys.argv[2]
f, n_ctx, n_vocab, n_chunk, tokens = read_base_header(base)
kw = dict(dtype=torch.float32, attn_implementation="eager")
try:
    from transformers import Mxfp4Config
    kw["quantization_config"] = Mxfp4Config(dequantize=True)
except ImportError:
    pass
dev = "cuda" if torch.cuda.is_available() else "cpu"
model = GptOssForCausalLM.from_pretrained(model_dir, device_map=dev, **kw).eval()
first = n_ctx // 2
nll, n = 0.0, 0
with torch.no_grad():
    for c in range(n_chunk):
        ids = torch.tensor(tokens[c].astype("int64"), device=dev)[None]
        lg = model(ids).logits[0].double()
        lsm = torch.log_softmax(lg[first:n_ctx - 1], dim=-1)
        tgt = ids[0, first + 1:n_ctx]
        nll -= lsm.gather(1, tgt[:, None]).sum().item()
        n += n_ctx - 1 - first
print(json.dumps({"tf_ppl": math.exp(nll / n), "count": n, "device": dev, "transformers": transformers.__version__,
                  "torch": torch.__version__}))
