"""A stand-in for transformers, for the CPU dry run of bench/compare only (this machine has no transformers;
the GPU machine has the real one and never sees this folder: only bench/compare/dryrun_cpu.sh puts it on
PYTHONPATH). It gives llama.cpp's convert_hf_to_gguf.py what its gpt-oss path asks of transformers:
AutoConfig (fails, so the converter reads config.json itself) and AutoTokenizer with the vocabulary and the
added tokens of tokenizer.json. encode() knows single vocabulary entries only, which is all the converter
uses it for once the pre-tokenizer is named (bench/compare/convert.py --pre-tokenizer)."""
import json
import os


class AutoConfig:
    @staticmethod
    def from_pretrained(*a, **k):
        raise RuntimeError("dry-run stand-in: no AutoConfig")


class _Added:
    def __init__(self, t):
        self.content, self.special, self.normalized = t["content"], t.get("special", False), t.get("normalized", False)


class _Tok:
    def __init__(self, path):
        j = json.load(open(os.path.join(path, "tokenizer.json"), encoding="utf-8"))
        self.vocab = dict(j["model"]["vocab"])
        self.added_tokens_decoder = {}
        for t in j.get("added_tokens", []):
            self.vocab[t["content"]] = t["id"]
            self.added_tokens_decoder[t["id"]] = _Added(t)
        self._rev = {v: k for k, v in self.vocab.items()}

    def get_vocab(self):
        return dict(self.vocab)

    def get_added_vocab(self):
        return {a.content: i for i, a in self.added_tokens_decoder.items()}

    def encode(self, text, add_special_tokens=False):
        if text in self.vocab:
            return [self.vocab[text]]
        raise NotImplementedError("dry-run stand-in: encode of a vocabulary entry only")

    def decode(self, ids):
        return "".join(self._rev[i] for i in ids)

    def __len__(self):
        return len(self.vocab)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, *a, **k):
        return _Tok(str(path))
