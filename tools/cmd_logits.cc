// `voltllm logits`: float32 logits [T, vocab] of a prompt given as token ids, as a NumPy .npy file, for
// RoPE positions P..P+T-1 on an empty cache, on the CPU or a GPU (--device). --trace DIR also writes
// every named intermediate of the forward pass as DIR/<name>.npy (layer -1) or DIR/L<layer>.<name>.npy
// [T, cols] f32: tools/golden/transformers_logits.py --trace writes the same names from transformers'
// hooks and tests/golden/parity_test.cc reports the first layer and name that diverge. Needs no tokenizer.
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/npy.h"
#include "model/sequence_runner.h"
#include "tools/commands.h"
#include "tools/forward_session.h"

namespace volt::tools {

std::vector<int32_t> parse_id_list(const std::string& s) {
    std::vector<int32_t> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        size_t used = 0;
        long long v = std::stoll(item, &used);
        if (used != item.size() || v < 0 || v > INT32_MAX)
            throw CLI::ValidationError("--prompt-ids", "bad id '" + item + "'");
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

void register_logits(CLI::App& app) {
    auto* cmd =
        app.add_subcommand("logits", "Write the logits of a prompt (token ids) as a float32 .npy [T, vocab]");
    auto model = std::make_shared<std::string>();
    auto ids = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto start = std::make_shared<int64_t>(0);
    auto trace_dir = std::make_shared<std::string>();
    auto device = std::make_shared<executor::DeviceOptions>();
    auto kv_f16 = std::make_shared<bool>(false);
    auto kv_dtype = std::make_shared<std::string>("auto");
    auto parallel = std::make_shared<model::ParallelConfig>();
    auto offload = std::make_shared<std::string>();
    cmd->add_option("--model", *model, "checkpoint directory")->required();
    cmd->add_option("--prompt-ids", *ids, "comma-separated token ids, e.g. 1,2,3")->required();
    cmd->add_option("--start-pos", *start, "RoPE position of the first token")->capture_default_str();
    cmd->add_option("--out", *out, "output .npy path")->required();
    cmd->add_option("--trace", *trace_dir, "also write every named intermediate as .npy into this directory");
    cmd->add_flag("--kv-cache-f16", *kv_f16, "store the KV cache in fp16 (default f32)");
    cmd->add_option("--kv-cache-dtype", *kv_dtype,
                    "auto (f32, or f16 with --kv-cache-f16) or int8 (per-head scales, CPU only; "
                    "docs/quantization.md)")
        ->capture_default_str();
    cmd->add_option("--tensor-parallel-size", parallel->tensor_parallel_size,
                    "ranks each layer is split over (one thread per rank on the CPU; docs/parallel.md)")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--pipeline-parallel-size", parallel->pipeline_parallel_size,
                    "pipeline stages the layers are split over")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option(
        "--cpu-offload-experts", *offload,
        "the experts of these layers stay in host memory and run on the CPU: N (the last N), all, "
        "or a list such as 0,5,20-23 (one process, TP = PP = 1)");
    cmd->add_flag("--tp-same-device", device->tp_same_device,
                  "--device cuda with TP x PP > 1: every rank on GPU 0 (same-device communicator; tests)");
    cmd->add_flag("--disable-custom-all-reduce", device->disable_custom_all_reduce,
                  "--device cuda, one GPU per rank: NCCL alone, no one-shot all-reduce over peer memory");
    add_device_flags(cmd, device.get());
    cmd->callback([=] {
        if (device->tp_same_device && device->device != "cuda")
            throw CLI::ValidationError("--tp-same-device",
                                       "it puts the ranks of --device cuda on one GPU; --device " +
                                           device->device + " runs them on threads without it");
        const std::vector<int32_t> prompt = parse_id_list(*ids);
        if (prompt.empty()) throw CLI::ValidationError("--prompt-ids", "no ids given");
        const ops::Format kv_format = kv_format_or_exit(*kv_dtype, *kv_f16, *device);
        ForwardSession session = open_forward_or_exit(*model, *device, *parallel, *offload);
        const int64_t V = session.host->config.vocab_size;
        for (int32_t id : prompt) {
            if (id >= V) {
                std::fprintf(stderr, "error: token id %d is outside the vocabulary (%lld ids)\n", id,
                             static_cast<long long>(V));
                std::exit(1);
            }
        }
        // Traced tensors in call order; final_norm comes in chunks of logits rows and is concatenated.
        std::map<std::string, std::pair<std::vector<float>, int64_t>> traced;
        std::vector<std::string> order;
        if (!trace_dir->empty()) {
            // One tracer: tp rank 0 of every pipeline stage traces its own layers, the stages one after
            // another (each waits for the previous one's activations), so calls never overlap.
            session.set_trace(
                [&](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols) {
                    const std::string key =
                        layer < 0 ? std::string(name) : "L" + std::to_string(layer) + "." + std::string(name);
                    auto [it, fresh] = traced.try_emplace(key, std::vector<float>{}, cols);
                    if (fresh) order.push_back(key);
                    it->second.first.insert(it->second.first.end(), data, data + rows * cols);
                });
        }
        std::vector<float> logits;
        Status st = session.run_logits(prompt, *start, kv_format, &logits);
        if (st.is_ok() && !session.writes_output) {  // one rank of several processes: the output rank writes
            std::fprintf(stderr, "rank %d of %d: done\n", session.process_rank, session.world_size);
            return;
        }
        if (st.is_ok()) st = write_npy_f32(*out, logits.data(), {static_cast<int64_t>(prompt.size()), V});
        if (st.is_ok() && !trace_dir->empty()) {
            std::filesystem::create_directories(*trace_dir);
            for (const std::string& key : order) {
                const auto& [data, cols] = traced[key];
                st = write_npy_f32(*trace_dir + "/" + key + ".npy", data.data(),
                                   {static_cast<int64_t>(data.size()) / cols, cols});
                if (!st.is_ok()) break;
            }
        }
        if (!st.is_ok()) {
            std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
            std::exit(1);
        }
        std::fprintf(stderr, "wrote %s: [%zu, %lld] float32\n", out->c_str(), prompt.size(),
                     static_cast<long long>(V));
    });
}

}  // namespace volt::tools
