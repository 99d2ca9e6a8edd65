// The vLLM serve flag table and the command-line pre-pass; see vllm_flags.h. Row texts are copied into
// docs/flags.md; tests/unit/server/vllm_flags_test.cc fails when the two differ.
#include "server/vllm_flags.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

namespace volt::server {
namespace {

using A = FlagArity;
using S = FlagStatus;
using O = FlagOrigin;

// Sorted by name (a test checks). Keep each text to one line: it is the notice or the error users read.
constexpr VllmFlag kFlags[] = {
    {"--allow-credentials", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, false,
     "CORS headers are not sent; put a reverse proxy in front for browser clients"},
    {"--allowed-headers", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "CORS headers are not sent; put a reverse proxy in front for browser clients"},
    {"--allowed-methods", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "CORS headers are not sent; put a reverse proxy in front for browser clients"},
    {"--allowed-origins", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "CORS headers are not sent; put a reverse proxy in front for browser clients"},
    {"--api-key", "", A::kValue, S::kHonoured, O::kVllm, false,
     "requires `Authorization: Bearer KEY` on every route but /health (one key; vLLM leaves more routes "
     "open)"},
    {"--async-scheduling", "", A::kSwitch, S::kHonoured, O::kVllm, true,
     "cuda at tensor x pipeline parallel size 1: the engine schedules and stages step N+1 while the GPU runs "
     "step N (two steps in flight); on by default here, `--no-async-scheduling` runs one step at a time; "
     "the CPU and TP/PP ranks always run one"},
    {"--block-size", "", A::kValue, S::kHonoured, O::kVllm, false, "tokens per KV-cache block (default 16)"},
    {"--chat-template", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: gpt-oss prompts are rendered by the built-in harmony renderer, not a Jinja template"},
    {"--collective-timeout", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "seconds a tensor/pipeline-parallel rank may wait in one collective before the engine fails (default "
     "300; docs/parallel.md)"},
    {"--compilation-config", "-cc", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: there is no torch.compile here"},
    {"--config", "", A::kValue, S::kRejected, O::kVllm, false,
     "YAML config files are not read; pass the flags on the command line"},
    {"--cpu-offload-experts", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "the experts of the last N layers (or `all`, or a list such as 0,5,20-23) stay in host memory; "
     "generated rows run them on the CPU (llama.cpp's --n-cpu-moe), prompt rows on the GPU from a staging "
     "of one layer's experts (only those routed to are copied; docs/architecture.md); the KV cache gets "
     "their device memory less that staging"},
    {"--cpu-offload-gb", "", A::kValue, S::kHonoured, O::kVllm, false,
     "GiB of weights in host memory: here expert weights of the last layers until at least that much, run "
     "on the CPU for generated rows and copied to the GPU for prompt rows, as --cpu-offload-experts (vLLM "
     "streams any weights to the GPU instead)"},
    {"--cuda-kernels", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "auto, or sm70: the Volta (sm_70) kernels and no cuBLAS on any GPU (what a V100 runs; for checks)"},
    {"--data-parallel-size", "-dp", A::kValue, S::kRejected, O::kVllm, false,
     "run one voltllm process per GPU group behind a load balancer instead"},
    {"--device", "", A::kValue, S::kHonoured, O::kVllmRemoved, false,
     "cpu (the default) or cuda: where the model runs (builds with CUDA: the volta, volta-ptx, cuda13 "
     "presets)"},
    {"--disable-custom-all-reduce", "", A::kSwitch, S::kHonoured, O::kVllm, false,
     "GPUs, one per rank: NCCL alone, without the one-shot all-reduce over peer memory (so does "
     "NCCL_P2P_DISABLE=1); nothing to turn off on the CPU or with --tp-same-device"},
    {"--disable-fastapi-docs", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: there are no /docs pages"},
    {"--disable-frontend-multiprocessing", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: the HTTP front end and the engine share one process"},
    {"--disable-log-requests", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllmRemoved, true,
     "removed from vLLM (PR #29402); request logging is already off unless --enable-log-requests"},
    {"--disable-log-stats", "", A::kSwitch, S::kHonoured, O::kVllm, false,
     "turns off the periodic stats line in the log (/metrics still works)"},
    {"--disable-sliding-window", "", A::kSwitch, S::kRejected, O::kVllm, false,
     "gpt-oss alternates sliding-window and full attention layers; turning the window off changes the model"},
    {"--disable-uvicorn-access-log", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: there is no per-connection access log (see --enable-log-requests)"},
    {"--distributed-executor-backend", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: one process drives all its GPUs through NCCL"},
    {"--download-dir", "", A::kValue, S::kHonoured, O::kVllm, false,
     "also looked in for `org/name` models, before the Hugging Face cache; nothing is ever downloaded"},
    {"--dtype", "", A::kValue, S::kHonoured, O::kVllm, false,
     "activation dtype: auto, half/float16, bfloat16, float/float32 (Volta: half)"},
    {"--embedding-in-host-memory", "", A::kSwitch, S::kHonoured, O::kVoltllm, false,
     "cuda: the embedding table stays in pinned host memory (its 1.08 GiB go to the KV cache), as llama.cpp "
     "does"},
    {"--enable-auto-tool-choice", "", A::kSwitch, S::kHonoured, O::kVllm, false,
     "lets the model call tools when `tool_choice` is auto (gpt-oss: harmony function calls)"},
    {"--enable-chunked-prefill", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, true,
     "ignored: prefill is always chunked by --max-num-batched-tokens"},
    {"--enable-log-requests", "", A::kSwitch, S::kHonoured, O::kVllm, true,
     "logs each request (id, prompt prefix, sampling parameters) and its end; off by default"},
    {"--enable-prefix-caching", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, true,
     "ignored: prefix caching is not implemented yet"},
    {"--enable-prompt-tokens-details", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: usage.prompt_tokens_details is not reported (no prefix cache)"},
    {"--enable-server-load-tracking", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: load is in /metrics (vllm:num_requests_running, vllm:num_requests_waiting)"},
    {"--enforce-eager", "", A::kSwitch, S::kHonoured, O::kVllm, false,
     "cuda: decode steps run eagerly instead of as CUDA graphs (by default one graph per batch-size bucket)"},
    {"--executor", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "cpu (the default here), or scripted: replays --script token ids (tests)"},
    {"--generation-config", "", A::kValue, S::kHonoured, O::kVllm, false,
     "auto: sampling defaults from the checkpoint's generation_config.json; vllm: ignore it; or a folder"},
    {"--gpu-memory-utilization", "", A::kValue, S::kHonoured, O::kVllm, false,
     "share of the GPU's total memory for weights, activations and KV cache (default 0.92, as vLLM), after a "
     "profiling run; CPU: ignored"},
    {"--health-step-timeout", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "seconds one engine step may take while work is pending before /health answers 503 (default 120)"},
    {"--hf-token", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: models are resolved offline, nothing is downloaded"},
    {"--host", "", A::kValue, S::kHonoured, O::kVllm, false,
     "listen address, default 127.0.0.1 (vLLM listens everywhere; use --host 0.0.0.0 for that)"},
    {"--kv-cache-dtype", "", A::kValue, S::kHonoured, O::kVllm, false,
     "auto (f32 on the CPU, f16 on a GPU) or int8 (per-head scales, CPU and CUDA; docs/quantization.md); "
     "fp8, fp8_e4m3, fp8_e5m2 are refused (not implemented)"},
    {"--kv-cache-memory-bytes", "", A::kValue, S::kHonoured, O::kVllm, false,
     "KV-cache size in bytes (32G, 4g ...), overriding --gpu-memory-utilization's sizing"},
    {"--kv-offloading-size", "", A::kValue, S::kRejected, O::kVllm, false,
     "KV-cache offloading to CPU memory is not implemented"},
    {"--load-format", "", A::kValue, S::kHonoured, O::kVllm, false,
     "auto/safetensors: the checkpoint's safetensors through its index; dummy: random weights"},
    {"--long-prefill-token-threshold", "", A::kValue, S::kHonoured, O::kVllm, false,
     "while others run or wait, a prompt computes at most this many tokens per step (0: a quarter of "
     "--max-num-batched-tokens; -1: no cap)"},
    {"--master-addr", "", A::kValue, S::kHonoured, O::kVllm, false,
     "several processes, one tensor / pipeline parallel rank each (--device cpu): rank 0's address, where it "
     "listens (else MASTER_ADDR; docs/parallel.md)"},
    {"--master-port", "", A::kValue, S::kHonoured, O::kVllm, false,
     "several processes: rank 0's port (else MASTER_PORT)"},
    {"--max-log-len", "", A::kValue, S::kHonoured, O::kVllm, false,
     "characters of the prompt printed per request by --enable-log-requests (default: all)"},
    {"--max-logprobs", "", A::kValue, S::kHonoured, O::kVllm, false,
     "largest `logprobs`/`top_logprobs` a request may ask for (default 20)"},
    {"--max-model-len", "", A::kValue, S::kHonoured, O::kVllm, false,
     "context length in tokens: 4096, 32k (32,000), 32K (32,768), 25.6k, or auto/-1 (the model's own)"},
    {"--max-num-batched-tokens", "", A::kValue, S::kHonoured, O::kVllm, false,
     "tokens per engine step (prefill chunk budget)"},
    {"--max-num-partial-prefills", "", A::kValue, S::kHonoured, O::kVllm, false,
     "prompts whose prefill may be partly done at once (default 1)"},
    {"--max-num-seqs", "", A::kValue, S::kHonoured, O::kVllm, false,
     "sequences running at once; on sm_80+ GPUs 1 also keeps the expert GEMV for generated rows "
     "(docs/cuda.md)"},
    {"--max-queued-requests", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "bounded waiting queue, in sequences; one more gets 503 with Retry-After (SGLang's name; vLLM has "
     "none)"},
    {"--max-request-body-bytes", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "larger request bodies get 413"},
    {"--max-seq-len-to-capture", "", A::kValue, S::kAcceptedWithNotice, O::kVllmRemoved, false,
     "removed from vLLM; ignored: no CUDA graphs are captured here"},
    {"--max-seqs-per-request", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "sequences (prompts x n) one request may ask for; more get 400 (default: --max-num-seqs + the queue)"},
    {"--model", "", A::kValue, S::kHonoured, O::kVllm, false,
     "a checkpoint directory, or `org/name` resolved offline in the Hugging Face cache"},
    {"--nnodes", "", A::kValue, S::kHonoured, O::kVllm, false,
     "processes of a launch across nodes, one per node and one tensor / pipeline parallel rank each: must "
     "equal TP x PP (several ranks per node as threads: not built); rank 0 serves the API "
     "(docs/parallel.md)"},
    {"--node-rank", "", A::kValue, S::kHonoured, O::kVllm, false,
     "this node's process among --nnodes, i.e. its rank (else NODE_RANK); the others run rank 0's steps"},
    {"--num-gpu-blocks-override", "", A::kValue, S::kHonoured, O::kVllm, false,
     "pins the KV pool to this many blocks per attention group (same as --num-kv-blocks-override)"},
    {"--num-kv-blocks", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "pins the KV pool to this many blocks per attention group (tests)"},
    {"--num-kv-blocks-override", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "the engine's name for --num-kv-blocks (`voltllm generate` spells it so)"},
    {"--pipeline-micro-batches", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "micro-batches of whole sequences each step is cut into at --pipeline-parallel-size > 1, so that "
     "stage s runs one while stage s + 1 runs the one before (0, the default: the stage count; 1: the step "
     "whole, one stage at a time); outputs equal 1's bitwise on the CPU (docs/parallel.md)"},
    {"--pipeline-parallel-rank", "", A::kValue, S::kAcceptedWithNotice, O::kArticle, false,
     "not a vLLM flag; this process serves the whole model as one replica and ignores "
     "--pipeline-parallel-size"},
    {"--pipeline-parallel-size", "-pp", A::kValue, S::kHonoured, O::kVllm, false,
     "pipeline stages the layers are split over (up to the layer count): threads of this process, or one "
     "process each (--nnodes, torchrun's WORLD_SIZE); with --device cuda one GPU per rank (NCCL, in one "
     "process or one process per GPU), or all on GPU 0 with --tp-same-device"},
    {"--port", "", A::kValue, S::kHonoured, O::kVllm, false,
     "listen port, default 8000; 0 picks a free one (printed at start)"},
    {"--preemption-mode", "", A::kValue, S::kHonoured, O::kVllmRemoved, false,
     "swap (KV blocks of a preempted sequence go to --swap-space host memory) or recompute; default swap on "
     "a GPU"},
    {"--quantization", "-q", A::kValue, S::kHonoured, O::kVllm, false,
     "awq, int8 or mxfp4: must match the checkpoint's quantization_config, else the start fails naming both "
     "(docs/quantization.md)"},
    {"--reasoning-parser", "", A::kValue, S::kHonoured, O::kVllm, false,
     "openai_gptoss: the harmony analysis channel is returned as reasoning_content (the only parser)"},
    {"--revision", "", A::kValue, S::kHonoured, O::kVllm, false,
     "which Hugging Face cache snapshot an `org/name` model resolves to (a ref name or a commit hash)"},
    {"--root-path", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: routes are served at /v1 whatever the proxy prefix"},
    {"--script", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "token-id script the scripted executor replays (tests)"},
    {"--seed", "", A::kValue, S::kHonoured, O::kVllm, false,
     "seed of the sampler for requests that give none"},
    {"--served-model-name", "", A::kValues, S::kHonoured, O::kVllm, false,
     "names accepted in `model`; the first is echoed in responses and is the Prometheus model_name label"},
    {"--shutdown-timeout", "", A::kValue, S::kHonoured, O::kVoltllm, false,
     "seconds in-flight requests may finish after SIGTERM before they are aborted"},
    {"--speculative-config", "", A::kValue, S::kRejected, O::kVllm, false,
     "speculative decoding is not implemented"},
    {"--ssl-certfile", "", A::kValue, S::kRejected, O::kVllm, false,
     "no TLS in this build; terminate TLS in a reverse proxy"},
    {"--ssl-keyfile", "", A::kValue, S::kRejected, O::kVllm, false,
     "no TLS in this build; terminate TLS in a reverse proxy"},
    {"--swap-space", "", A::kValue, S::kHonoured, O::kVllmRemoved, false,
     "GiB of host memory (pinned) per GPU for the KV blocks of preempted sequences (default 4; 0: none)"},
    {"--tensor-parallel-size", "-tp", A::kValue, S::kHonoured, O::kVllm, false,
     "ranks each layer is split over (must divide the KV heads; docs/parallel.md): threads of this "
     "process, or one process each (--nnodes, torchrun's WORLD_SIZE); with --device cuda one GPU per "
     "rank (NCCL, in one process or one process per GPU), or all on GPU 0 with --tp-same-device"},
    {"--tokenizer", "", A::kValue, S::kHonoured, O::kVllm, false,
     "a tokenizer.json file to use instead of the one next to the checkpoint (no Hugging Face ids)"},
    {"--tool-call-parser", "", A::kValue, S::kHonoured, O::kVllm, false,
     "openai: harmony function calls become `tool_calls` (the only parser)"},
    {"--tool-server", "", A::kValue, S::kRejected, O::kVllm, false,
     "built-in tools (browser, python) are not served yet; pass function tools in the request"},
    {"--tp-same-device", "", A::kSwitch, S::kHonoured, O::kVoltllm, false,
     "--device cuda with tensor x pipeline parallel size > 1: every rank on GPU 0 through the same-device "
     "communicator (for tests; without it each rank needs a GPU of its own)"},
    {"--trust-remote-code", "", A::kSwitch, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: no code from a checkpoint is ever run; gpt-oss needs none"},
    {"--uds", "", A::kValue, S::kRejected, O::kVllm, false,
     "the HTTP layer listens on TCP only; use --host 127.0.0.1 --port N"},
    {"--uvicorn-log-level", "", A::kValue, S::kAcceptedWithNotice, O::kVllm, false,
     "ignored: use voltllm's --log-level"},
};

bool is_long_flag(std::string_view a) { return a.size() > 2 && a[0] == '-' && a[1] == '-'; }
bool is_flag(std::string_view a) {
    if (a.size() < 2 || a[0] != '-') return false;
    // "-1" is a value (--max-model-len -1), not a short flag.
    return !(std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.');
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

}  // namespace

std::span<const VllmFlag> vllm_flag_table() { return kFlags; }

std::string normalize_flag_name(std::string_view arg) {
    std::string out(arg);
    if (!is_long_flag(arg)) return out;
    size_t end = out.find('=');
    if (end == std::string::npos) end = out.size();
    for (size_t i = 2; i < end; ++i) {
        if (out[i] == '_') out[i] = '-';
    }
    return out;
}

std::string flag_markdown_row(const VllmFlag& f) {
    const char* status = f.status == S::kHonoured             ? "honoured"
                         : f.status == S::kAcceptedWithNotice ? "notice"
                                                              : "rejected";
    const char* arity = f.arity == A::kSwitch  ? (f.negatable ? "switch (`--no-` too)" : "switch")
                        : f.arity == A::kValue ? "value"
                                               : "values";
    const char* origin = f.origin == O::kVllm          ? "vLLM"
                         : f.origin == O::kVllmRemoved ? "removed from vLLM"
                         : f.origin == O::kArticle     ? "article"
                                                       : "voltllm";
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on the chained operator+ form.
    std::string row = "| `";
    row.append(f.name).append("` | ");
    if (!f.alias.empty()) row.append("`").append(f.alias).append("`");
    row.append(" | ").append(status).append(" | ").append(arity).append(" | ").append(origin).append(" | ");
    row.append(f.text).append(" |");
    return row;
}

const VllmFlag* find_vllm_flag(std::string_view name) {
    for (const VllmFlag& f : kFlags) {
        if (f.name == name || (!f.alias.empty() && f.alias == name)) return &f;
    }
    return nullptr;
}

std::string suggest_nearest(std::string_view unknown) {
    std::string key = normalize_flag_name(unknown);
    if (size_t eq = key.find('='); eq != std::string::npos) key.resize(eq);
    const VllmFlag* best = nullptr;
    size_t best_d = std::numeric_limits<size_t>::max();
    for (const VllmFlag& f : kFlags) {
        size_t d = edit_distance(key, f.name);
        if (d < best_d) {
            best_d = d;
            best = &f;
        }
    }
    size_t limit = std::max<size_t>(2, key.size() / 3);
    if (best == nullptr || best_d > limit) return {};
    return std::string(best->name);
}

const ParsedFlag* VllmCommandLine::find(std::string_view name) const {
    for (auto it = flags.rbegin(); it != flags.rend(); ++it) {
        if (it->flag->name == name) return &*it;
    }
    return nullptr;
}

Result<VllmCommandLine> parse_vllm_command_line(const std::vector<std::string>& args,
                                                const std::vector<std::string_view>& wired) {
    VllmCommandLine cl;
    std::optional<std::string> positional;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& given = args[i];
        if (!is_flag(given)) {
            if (positional) {
                return invalid_argument("unexpected argument '" + given + "' (the model is already '" +
                                        *positional + "')");
            }
            positional = given;
            continue;
        }
        std::string norm = normalize_flag_name(given);
        std::optional<std::string> inline_value;
        if (size_t eq = norm.find('='); eq != std::string::npos) {
            inline_value = norm.substr(eq + 1);
            norm.resize(eq);
        }
        bool negated = false;
        const VllmFlag* flag = find_vllm_flag(norm);
        if (flag == nullptr && norm.rfind("--no-", 0) == 0) {
            const VllmFlag* base = find_vllm_flag("--" + norm.substr(5));
            if (base != nullptr && base->negatable) {
                flag = base;
                negated = true;
            }
        }
        if (flag == nullptr) {
            std::string msg = "unknown flag " + norm;
            std::string near = suggest_nearest(norm);
            if (!near.empty()) msg += "; did you mean " + near + "?";
            return invalid_argument(msg);
        }
        if (flag->status == FlagStatus::kRejected) {
            return invalid_argument(std::string(flag->name) +
                                    " is not supported: " + std::string(flag->text));
        }
        ParsedFlag pf{flag, given, {}, negated};
        if (flag->arity == FlagArity::kSwitch) {
            if (inline_value) {
                return invalid_argument(std::string(flag->name) + " takes no value (got '" + *inline_value +
                                        "')");
            }
        } else if (inline_value) {
            pf.values.push_back(*inline_value);
        } else {
            while (i + 1 < args.size() && !is_flag(args[i + 1])) {
                pf.values.push_back(args[++i]);
                if (flag->arity == FlagArity::kValue) break;
            }
            if (pf.values.empty()) return invalid_argument(std::string(flag->name) + " needs a value");
        }
        cl.flags.push_back(std::move(pf));
    }

    const bool replica_per_process = cl.find("--pipeline-parallel-rank") != nullptr;
    for (const ParsedFlag& pf : cl.flags) {
        bool notice_only = pf.flag->status == FlagStatus::kAcceptedWithNotice ||
                           (replica_per_process && pf.flag->name == "--pipeline-parallel-size");
        const bool unwired =
            !wired.empty() && std::find(wired.begin(), wired.end(), pf.flag->name) == wired.end();
        if (notice_only || unwired) {
            std::string line(pf.flag->name);
            for (const std::string& v : pf.values) line += " " + v;
            if (!notice_only) {
                line += ": not wired in this build yet; ignored";
            } else if (pf.flag->name == "--pipeline-parallel-size") {
                line += ": ignored with --pipeline-parallel-rank (one replica per process)";
            } else {
                line += ": " + std::string(pf.flag->text);
            }
            cl.notices.push_back(std::move(line));
            continue;
        }
        cl.honoured_args.push_back(
            std::string(pf.negated ? "--no-" + std::string(pf.flag->name.substr(2)) : pf.flag->name));
        for (const std::string& v : pf.values) cl.honoured_args.push_back(v);
    }
    if (const ParsedFlag* m = cl.find("--model")) {
        cl.model = m->values.front();
    } else {
        cl.model = positional;
    }
    return cl;
}

Result<OpsSettings> ops_settings(const VllmCommandLine& cl) {
    OpsSettings o;
    if (cl.find("--disable-log-stats") != nullptr) o.log_stats = false;
    if (const ParsedFlag* f = cl.find("--enable-log-requests")) o.log_requests = !f->negated;
    if (const ParsedFlag* f = cl.find("--max-log-len")) {
        VOLT_ASSIGN_OR_RETURN(o.max_log_len, parse_human_int(f->values.front(), "--max-log-len", false));
    }
    if (const ParsedFlag* f = cl.find("--served-model-name")) o.served_model_names = f->values;
    if (const ParsedFlag* f = cl.find("--revision")) o.revision = f->values.front();
    if (const ParsedFlag* f = cl.find("--download-dir")) o.download_dir = f->values.front();
    return o;
}

Result<int64_t> parse_human_int(std::string_view text, std::string_view flag, bool allow_auto) {
    auto bad = [&](std::string_view why) {
        return invalid_argument(std::string(flag) + ": '" + std::string(text) + "' " + std::string(why) +
                                " (expected an integer, 25.6k / 32k (x1000), 32K (x1024)" +
                                (allow_auto ? ", auto or -1)" : ")"));
    };
    std::string lower;
    for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (allow_auto && (lower == "auto" || lower == "-1")) return kAutoValue;
    if (text.empty()) return bad("is empty");

    int64_t mult = 1;
    bool decimal_suffix = false;
    std::string_view num = text;
    switch (text.back()) {
        case 'k':
            mult = 1000;
            decimal_suffix = true;
            break;
        case 'm':
            mult = 1000 * 1000;
            decimal_suffix = true;
            break;
        case 'g':
            mult = int64_t{1000} * 1000 * 1000;
            decimal_suffix = true;
            break;
        case 't':
            mult = int64_t{1000} * 1000 * 1000 * 1000;
            decimal_suffix = true;
            break;
        case 'K':
            mult = int64_t{1} << 10;
            break;
        case 'M':
            mult = int64_t{1} << 20;
            break;
        case 'G':
            mult = int64_t{1} << 30;
            break;
        case 'T':
            mult = int64_t{1} << 40;
            break;
        default:
            break;
    }
    if (mult != 1) num.remove_suffix(1);
    size_t dot = num.find('.');
    std::string_view int_part = num.substr(0, dot);
    std::string_view frac_part = dot == std::string_view::npos ? std::string_view{} : num.substr(dot + 1);
    if (int_part.empty() || (dot != std::string_view::npos && frac_part.empty()))
        return bad("is not a number");
    if (dot != std::string_view::npos && !decimal_suffix) {
        return bad(mult == 1 ? "is not an integer"
                             : "has decimals with a binary suffix (use k/m/g for x1000)");
    }
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    int64_t whole = 0;
    for (char c : int_part) {
        if (c < '0' || c > '9') return bad("is not a number");
        if (whole > (kMax - 9) / 10) return bad("is too large");
        whole = whole * 10 + (c - '0');
    }
    if (whole > kMax / mult) return bad("is too large");
    int64_t value = whole * mult;
    // The fraction times a power-of-ten multiplier, digit by digit: exact, then truncated like int().
    int64_t scale = mult;
    for (char c : frac_part) {
        if (c < '0' || c > '9') return bad("is not a number");
        scale /= 10;
        value += (c - '0') * scale;
    }
    return value;
}

bool ServedModelNames::accepts(std::string_view requested) const {
    auto eq = [&](const std::string& n) { return n == requested; };
    return std::any_of(names.begin(), names.end(), eq) || std::any_of(aliases.begin(), aliases.end(), eq);
}

ServedModelNames served_model_names(std::string_view model_arg, const std::vector<std::string>& served_flag) {
    ServedModelNames out;
    if (!served_flag.empty()) {
        out.names = served_flag;
        return out;
    }
    out.names.emplace_back(model_arg);
    std::string_view trimmed = model_arg;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
    size_t slash = trimmed.rfind('/');
    std::string base(slash == std::string_view::npos ? trimmed : trimmed.substr(slash + 1));
    if (!base.empty() && base != "." && base != ".." && base != model_arg) out.aliases.push_back(base);
    return out;
}

}  // namespace volt::server
