// CPU expert offload (issue 22) on the CPU: the plan's parsing and refusals (model/offload.h), and the
// logits of a random model with the experts of some layers in host memory, run by the fast kernel
// (cpu::HostExpertsRunner), against the same model with every experts op on the reference kernel: within
// the fast kernel's tolerance for N = 1, all layers and a layer list, on the CPU backend (host path) and
// bitwise equal between the host path and the device path of a counting stand-in device
// (counting_backend.h), which must download, upload and add once per offloaded layer (a runner not
// prepared: every row on the host). Prepared, prompt rows run on the device's own experts op from the
// staging (only the experts they route to copied; OffloadStaging.*): their logits the device's bits.
#include "model/offload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/host_experts.h"
#include "model/counting_backend.h"
#include "model/forward.h"
#include "model/random_model.h"
#include "model/sequence_runner.h"

namespace volt::model {
namespace {

std::shared_ptr<ModelWeights> model4() { return testing::random_model(testing::small_config(4), 11); }

std::vector<bool> layers_of(const ModelWeights& w, const OffloadRequest& r) {
    auto p = plan_offload(w, r);
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    return p.is_ok() ? p->layers : std::vector<bool>{};
}

TEST(OffloadPlan, CountsListsAndAll) {
    auto w = model4();
    EXPECT_EQ(layers_of(*w, {}), std::vector<bool>(4, false));
    EXPECT_EQ(layers_of(*w, {"0"}), std::vector<bool>(4, false));
    EXPECT_EQ(layers_of(*w, {"1"}), (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(layers_of(*w, {"3"}), (std::vector<bool>{false, true, true, true}));
    EXPECT_EQ(layers_of(*w, {"4"}), std::vector<bool>(4, true));
    EXPECT_EQ(layers_of(*w, {"all"}), std::vector<bool>(4, true));
    EXPECT_EQ(layers_of(*w, {"0,2-3"}), (std::vector<bool>{true, false, true, true}));
    EXPECT_EQ(layers_of(*w, {"1-1"}), (std::vector<bool>{false, true, false, false}));
    auto p = plan_offload(*w, {"0,2-3"});
    ASSERT_TRUE(p.is_ok());
    // Bytes from the shapes (small_config: E 4, H 64, I 64, bf16 biases): gate_up 2I x H, down H x I,
    // codes half a byte, one scale per 32, 2 bytes of bias per row.
    const int64_t E = 4, H = 64, I = 64;
    const int64_t per_layer =
        E * (2 * I * H / 2 + 2 * I * H / 32 + 2 * I * 2) + E * (H * I / 2 + H * I / 32 + H * 2);
    EXPECT_EQ(expert_bytes(w->layers[0]), per_layer);
    EXPECT_EQ(p->host_bytes, 3 * per_layer);
    EXPECT_EQ(p->count(), 3);
    EXPECT_NE(p->describe().find("layers 0,2-3"), std::string::npos) << p->describe();
}

TEST(OffloadPlan, GibTakesLastLayersUntilEnough) {
    auto w = model4();
    const double layer_gib = static_cast<double>(expert_bytes(w->layers[0])) / 1073741824.0;
    EXPECT_EQ(layers_of(*w, {"", layer_gib}), (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(layers_of(*w, {"", 1.5 * layer_gib}), (std::vector<bool>{false, false, true, true}));
    EXPECT_EQ(layers_of(*w, {"", 100.0}), std::vector<bool>(4, true));  // more than there is: every layer
}

TEST(OffloadPlan, RefusesNonsenseNamingTheFlag) {
    auto w = model4();
    auto refused = [&](const OffloadRequest& r, const std::string& says) {
        auto p = plan_offload(*w, r);
        ASSERT_FALSE(p.is_ok()) << "'" << r.experts << "' " << r.gib << " was accepted";
        EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(p.status().message().find(says), std::string::npos) << p.status().message();
    };
    refused({"5"}, "the model has 4 layers");
    refused({"-1"}, "must be a number of layers >= 0");
    refused({"4-4"}, "layer 4 does not exist");
    refused({"0,9"}, "layer 9 does not exist");
    refused({"3-1"}, "runs backwards");
    refused({"1,1"}, "layer 1 is named twice");
    refused({"1,"}, "is not a layer index");
    refused({"two"}, "is not a layer index");
    refused({"1", 2.0}, "not both");
    refused({"", -1.0}, "--cpu-offload-gb");
}

// Logits [T, V] of `prompt` on `backend` with the experts of `on_host` layers run by a HostExpertsRunner.
std::vector<float> logits(std::shared_ptr<const ModelWeights> w, ops::Backend& backend,
                          const std::vector<bool>& on_host, cpu::HostExpertsRunner* runner) {
    auto placed = place_model(w, backend, on_host);
    EXPECT_TRUE(placed.is_ok()) << placed.status().to_string();
    Forward f(*placed, backend);
    f.set_host_experts(runner);
    SequenceRunner run(f, 32);
    const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43};
    return run.append(prompt, /*all_rows=*/true);
}

// Relative to the largest |logit|: the fast kernel's f32 order differences (<= 5e-7 of an experts op's
// output, experts_fast_test.cc) pass through 4 layers of norms, attention and routing: 2.2e-7 of the
// largest logit is seen, 1e-5 keeps a margin of ~50x, while a layer whose experts were dropped or doubled
// moves logits O(1).
// (A routing decision within rounding of a tie could move more; none happens for this seed.)
constexpr double kLogitsRelTol = 1e-5;

void expect_close(const std::vector<float>& a, const std::vector<float>& ref, const char* what) {
    ASSERT_EQ(a.size(), ref.size());
    double scale = 0.0, worst = 0.0;
    for (float v : ref) scale = std::max(scale, std::fabs(double(v)));
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - ref[i]));
    EXPECT_LE(worst, kLogitsRelTol * scale)
        << what << ": worst |offload - reference| " << worst << " of " << scale;
    EXPECT_GT(scale, 0.1) << "logits near zero: the case tests nothing";
}

TEST(CpuOffloadLogits, EqualTheReferenceWithinTolerance) {
    auto w = model4();
    cpu::CpuBackend cpu;
    const std::vector<float> ref = logits(w, cpu, {}, nullptr);
    for (const std::string spec : {"1", "all", "0,2"}) {
        cpu::HostExpertsRunner runner;
        const std::vector<float> off = logits(w, cpu, layers_of(*w, {spec}), &runner);
        expect_close(off, ref, spec.c_str());
        EXPECT_EQ(runner.stats().calls, layers_of(*w, {spec}) == std::vector<bool>(4, true) ? 4
                                        : spec == "1"                                       ? 1
                                                                                            : 2);
    }
}

TEST(CpuOffloadLogits, DevicePathGivesTheHostPathsBits) {
    auto w = model4();
    const std::vector<bool> on_host = layers_of(*w, {"0,2-3"});
    cpu::CpuBackend cpu;
    cpu::HostExpertsRunner host_runner;
    const std::vector<float> host = logits(w, cpu, on_host, &host_runner);
    volt::testing::CountingBackend device;
    cpu::HostExpertsRunner device_runner;
    const std::vector<float> dev = logits(w, device, on_host, &device_runner);
    ASSERT_EQ(host.size(), dev.size());
    EXPECT_EQ(std::memcmp(host.data(), dev.data(), host.size() * sizeof(float)), 0);
    // One step, three offloaded layers: each downloads x, ids and weights, uploads the sum and adds it
    // (counted against the same step with every expert on the device, whose o_proj adds too).
    volt::testing::CountingBackend none;
    logits(w, none, {}, nullptr);
    EXPECT_EQ(device_runner.stats().calls, 3);
    EXPECT_EQ(device.adds - none.adds, 3);
    EXPECT_EQ(device.downloads - none.downloads, 9);
    EXPECT_EQ(device.uploads - none.uploads, 3);
}

// ---- prompt rows on the primary (the staging) ----

TEST(OffloadStaging, DistinctExpertsAndPageRanges) {
    const std::vector<int32_t> ids = {3, 1, 3, 7, -1, 0, 1, 9};
    EXPECT_EQ(cpu::distinct_experts(ids.data(), 8, 8), (std::vector<int32_t>{0, 1, 3, 7}));
    EXPECT_EQ(cpu::distinct_experts(ids.data(), 2, 8), (std::vector<int32_t>{1, 3}));
    EXPECT_TRUE(cpu::distinct_experts(ids.data(), 0, 8).empty());
    using R = std::vector<std::pair<uintptr_t, uintptr_t>>;
    // Widened to pages; sharing or touching a page merges; empty ranges vanish; order does not matter.
    EXPECT_EQ(cpu::page_ranges({{5000, 9000}, {100, 4000}, {9100, 9200}, {20000, 20000}}, 4096),
              (R{{0, 12288}}));
    EXPECT_EQ(cpu::page_ranges({{8192, 8193}, {0, 4096}}, 4096), (R{{0, 4096}, {8192, 12288}}));
}

TEST(OffloadStaging, LayoutFromTheShapes) {
    auto w = model4();
    const ops::ExpertStagingLayout l = ops::expert_staging_layout(w->layers[0].gate_up, w->layers[0].down);
    // small_config: E 4, H 64, I 64. gate_up 2I x H: codes 16 B per 32, a scale byte per 32, f32 biases;
    // down H x I likewise; every section a multiple of 256 here, so no padding.
    const int64_t E = 4, H = 64, I = 64;
    EXPECT_EQ(l.gate_up.block_bytes, 2 * I * (H / 32) * 16);
    EXPECT_EQ(l.gate_up.scale_bytes, 2 * I * (H / 32));
    EXPECT_EQ(l.gate_up.bias_bytes, 2 * I * 4);
    EXPECT_EQ(l.down.block_bytes, H * (I / 32) * 16);
    EXPECT_EQ(l.down.bias_at + E * l.down.bias_bytes, l.bytes);
    EXPECT_EQ(l.bytes,
              E * (2 * I * H / 2 + 2 * I * H / 32 + 2 * I * 4) + E * (H * I / 2 + H * I / 32 + H * 4));
    EXPECT_EQ(l.gate_up.scales_at % 256, 0);
    EXPECT_EQ(l.down.blocks_at % 256, 0);
    // Not MXFP4: no staging.
    ops::ExpertWeights dense = w->layers[0].down;
    dense.format = ops::Format::kBf16;
    EXPECT_EQ(ops::expert_staging_layout(w->layers[0].gate_up, dense).bytes, 0);
    // The plan knows it (what the startup log names).
    auto p = plan_offload(*w, {"2"});
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(p->staging_bytes, l.bytes);
    EXPECT_EQ(plan_offload(*w, {})->staging_bytes, 0);
}

std::vector<ops::HostExpertLayer> host_layers(const ModelWeights& w, const std::vector<bool>& on_host) {
    std::vector<ops::HostExpertLayer> out;
    for (size_t l = 0; l < on_host.size(); ++l)
        if (on_host[l]) out.push_back({w.layers[l].gate_up, w.layers[l].down});
    return out;
}

TEST(OffloadStaging, PrepareAllocatesOneLayerOnADeviceOnly) {
    auto w = model4();
    const auto layers = host_layers(*w, layers_of(*w, {"3"}));
    cpu::CpuBackend cpu;
    cpu::HostExpertsRunner on_cpu;
    ASSERT_TRUE(on_cpu.prepare(cpu, layers).is_ok());
    EXPECT_EQ(on_cpu.staging_bytes(), 0);
    EXPECT_NE(on_cpu.host_prompt_reason().find("host memory"), std::string::npos);
    volt::testing::CountingBackend device;
    {
        cpu::HostExpertsRunner runner;
        ASSERT_TRUE(runner.prepare(device, layers).is_ok());
        const int64_t one = ops::expert_staging_layout(w->layers[1].gate_up, w->layers[1].down).bytes;
        EXPECT_EQ(runner.staging_bytes(), one);
        EXPECT_EQ(device.allocated(), one);
        EXPECT_EQ(runner.host_prompt_reason(), "");
        EXPECT_EQ(runner.pinned_bytes(), 0);  // the counting device pins nothing: pageable uploads
    }
    EXPECT_EQ(device.allocated(), 0);
}

// One experts call of 5 prompt rows (routed to experts 1 and 3 only) and 2 generated rows on the counting
// device: the prompt rows run on the device's experts op from the staging, bitwise what that op gives
// with the layer's own weights, and the same bits alone as beside the generated rows; the generated rows
// get the host path's bits; only the two experts the prompt rows route to are uploaded (again by every
// call: the staging serves every offloaded layer).
TEST(OffloadStaging, PromptRowsRunOnThePrimaryFromTheExpertsTheyRouteTo) {
    auto w = model4();
    const LayerWeights& layer = w->layers[3];
    const int64_t H = 64, K = 2, P = 5, T = 7;
    std::vector<float> x(T * H), weights(T * K);
    for (int64_t i = 0; i < T * H; ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
    for (int64_t t = 0; t < T; ++t) {
        weights[t * K] = 0.7f;
        weights[t * K + 1] = 0.3f;
    }
    const std::vector<int32_t> ids = {1, 3, 3, 1, 1, 3, 3, 1, 1, 3, /*generated:*/ 0, 2, 2, 1};
    std::vector<float> resid(T * H);
    for (int64_t i = 0; i < T * H; ++i) resid[i] = std::cos(0.11f * static_cast<float>(i));
    auto args = [&](int64_t first, int64_t n, int64_t prompt, float* out) {
        return ops::ExpertsArgs{.x = x.data() + first * H,
                                .expert_ids = ids.data() + first * K,
                                .expert_weights = weights.data() + first * K,
                                .gate_up = layer.gate_up,
                                .down = layer.down,
                                .out = out,
                                .num_tokens = n,
                                .top_k = K,
                                .swiglu_limit = 7.0f,
                                .swiglu_alpha = 1.702f,
                                .prompt_rows = prompt};
    };
    volt::testing::CountingBackend device;
    cpu::HostExpertsRunner runner;
    ASSERT_TRUE(runner.prepare(device, host_layers(*w, {false, false, false, true})).is_ok());
    std::vector<float> mixed = resid;
    ASSERT_TRUE(runner.run(device, args(0, T, P, mixed.data())).is_ok());
    EXPECT_EQ(runner.stats().staged_calls, 1);
    EXPECT_EQ(runner.stats().staged_rows, P);
    EXPECT_EQ(runner.stats().staged_experts, 2);
    const ops::ExpertStagingLayout l = ops::expert_staging_layout(layer.gate_up, layer.down);
    const int64_t per_expert = l.gate_up.block_bytes + l.gate_up.scale_bytes + l.gate_up.bias_bytes +
                               l.down.block_bytes + l.down.scale_bytes + l.down.bias_bytes;
    EXPECT_EQ(runner.stats().staged_bytes, 2 * per_expert);
    // Downloads: ids, then x and weights of the generated rows. Uploads: codes, scales and biases of two
    // runs of experts ({1}, {3}) for two projections, and the generated rows' sum.
    EXPECT_EQ(device.downloads, 3);
    EXPECT_EQ(device.uploads, 2 * 2 * 3 + 1);
    EXPECT_EQ(device.adds, 1);

    // Prompt rows: the device's op on the layer's own weights, bitwise.
    std::vector<float> want = resid;
    cpu::experts(args(0, P, P, want.data()));
    EXPECT_EQ(std::memcmp(mixed.data(), want.data(), P * H * sizeof(float)), 0);
    // Generated rows: the host path's bits (a runner that stages nothing).
    cpu::HostExpertsRunner host_only;
    std::vector<float> gen = resid;
    ASSERT_TRUE(host_only.run(device, args(P, T - P, 0, gen.data() + P * H)).is_ok());
    EXPECT_EQ(std::memcmp(mixed.data() + P * H, gen.data() + P * H, (T - P) * H * sizeof(float)), 0);
    double moved = 0;
    for (int64_t i = P * H; i < T * H; ++i) moved = std::max(moved, std::fabs(double(mixed[i]) - resid[i]));
    EXPECT_GT(moved, 1e-3) << "the generated rows were not computed";

    // The prompt rows alone: the same bits, from the same two experts' copies (and no sum to upload).
    const int64_t uploads = device.uploads, downloads = device.downloads;
    std::vector<float> alone = resid;
    ASSERT_TRUE(runner.run(device, args(0, P, P, alone.data())).is_ok());
    EXPECT_EQ(std::memcmp(alone.data(), mixed.data(), P * H * sizeof(float)), 0);
    EXPECT_EQ(device.uploads - uploads, 2 * 2 * 3);
    EXPECT_EQ(device.downloads - downloads, 1);
    EXPECT_EQ(runner.stats().staged_experts, 4);
}

// Logits of a prompt, then of `decode` generated tokens one step each, with the runner prepared (prompt
// rows on the device) when `prepare`.
struct PromptThenDecode {
    std::vector<float> prompt, decode;
};
PromptThenDecode prompt_then_decode(std::shared_ptr<const ModelWeights> w, ops::Backend& backend,
                                    const std::vector<bool>& on_host, cpu::HostExpertsRunner* runner) {
    auto placed = place_model(w, backend, on_host);
    EXPECT_TRUE(placed.is_ok()) << placed.status().to_string();
    if (runner != nullptr) {
        EXPECT_TRUE(runner->prepare(backend, host_layers(*w, on_host)).is_ok());
    }
    Forward f(*placed, backend);
    f.set_host_experts(runner);
    SequenceRunner run(f, 48);
    const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 83, 27, 95};
    PromptThenDecode out;
    out.prompt = run.append(prompt, /*all_rows=*/true);
    for (int32_t id : {50, 28, 84}) {
        const std::vector<float> l = run.append(std::vector<int32_t>{id}, false, 0, /*generated=*/true);
        out.decode.insert(out.decode.end(), l.begin(), l.end());
    }
    return out;
}

TEST(CpuOffloadLogits, PromptRowsOnTheDeviceGiveTheDevicesBits) {
    auto w = model4();
    const std::vector<bool> on_host = layers_of(*w, {"0,2-3"});
    volt::testing::CountingBackend none_dev;
    const PromptThenDecode ref = prompt_then_decode(w, none_dev, {}, nullptr);
    volt::testing::CountingBackend device;
    cpu::HostExpertsRunner runner;
    const PromptThenDecode off = prompt_then_decode(w, device, on_host, &runner);
    ASSERT_EQ(off.prompt.size(), ref.prompt.size());
    EXPECT_EQ(std::memcmp(off.prompt.data(), ref.prompt.data(), ref.prompt.size() * sizeof(float)), 0)
        << "prompt rows of offloaded layers must run the device's own experts op";
    expect_close(off.decode, ref.decode, "decode after a staged prompt");
    EXPECT_EQ(runner.stats().staged_calls, 3);   // the prompt step, three offloaded layers
    EXPECT_EQ(runner.stats().calls, 3 + 3 * 3);  // and three decode steps on the CPU
    EXPECT_EQ(runner.stats().staged_rows, 3 * 16);
}

TEST(CpuOffloadLogits, OffloadedExpertsAreNotPlacedOnTheDevice) {
    auto w = model4();
    volt::testing::CountingBackend all_on_device, two_on_host;
    auto a = place_model(w, all_on_device);
    auto b = place_model(w, two_on_host, layers_of(*w, {"2"}));
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(all_on_device.allocated() - two_on_host.allocated(),
              expert_bytes(w->layers[2]) + expert_bytes(w->layers[3]));
    EXPECT_EQ((*b)->weights.layers[3].gate_up.blocks, w->layers[3].gate_up.blocks);  // the host view itself
    EXPECT_NE((*b)->weights.layers[1].gate_up.blocks, w->layers[1].gate_up.blocks);  // a device copy
}

}  // namespace
}  // namespace volt::model
