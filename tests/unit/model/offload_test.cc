// CPU expert offload (issue 22) on the CPU: the plan's parsing and refusals (model/offload.h), and the
// logits of a random model with the experts of some layers in host memory, run by the fast kernel
// (cpu::HostExpertsRunner), against the same model with every experts op on the reference kernel: within
// the fast kernel's tolerance for N = 1, all layers and a layer list, on the CPU backend (host path) and
// bitwise equal between the host path and the device path of a counting stand-in device
// (counting_backend.h), which must download, upload and add once per offloaded layer.
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
