// volt_op_test: every op of a backend (fine and coarse ops, sample, copy_blocks, swap_blocks) on fresh seeded
// inputs against the double-precision reference (reference.h), one line per (op, shape) with max abs / rel
// error, tolerance and PASS/FAIL; exit 1 past any tolerance, 2 on a usage error. Like llama.cpp's
// test-backend-ops. README.md beside this file: what is checked, the tolerance table, the mutation list.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>

#include "executor/backend_factory.h"
#include "tests/kernels/harness.h"

namespace {

using namespace volt;
using namespace volt::kernels;

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    executor::DeviceOptions dev;
    std::string ops_arg, shapes = "edge", inject = "none", kv = "all";
    bool list = false, tolerances = false;
    CLI::App app{"volt_op_test: every op of a backend against a double-precision reference"};
    app.add_option("--backend", opt.backend, "cpu | cuda")->capture_default_str();
    app.add_option("--op", ops_arg, "only these ops (comma-separated)");
    app.add_option("--shapes", shapes,
                   "edge | model | all | bench (rotating benchmark shapes, GBs of memory)")
        ->check(CLI::IsMember({"edge", "model", "all", "bench"}))
        ->capture_default_str();
    app.add_option("--seed", opt.seed, "input seed")->capture_default_str();
    app.add_flag("--bench", opt.bench, "also time every case (BENCH lines, README.md)");
    app.add_option("--bench-iters", opt.bench_iters, "timed runs per case (median)")->capture_default_str();
    app.add_option("--ceiling-gbps", opt.ceiling_gbps,
                   "a measured read bandwidth (GB/s): BENCH lines add the fraction of it reached");
    app.add_option("--inject", inject, "break the reference on purpose: sink | window | mscale | clamp | gqa")
        ->check(CLI::IsMember({"none", "sink", "window", "mscale", "clamp", "gqa"}))
        ->capture_default_str();
    app.add_option("--read-bytes", opt.read_bytes, "buffer of the read-bandwidth reference (bytes)")
        ->capture_default_str();
    app.add_option("--kv", kv, "KV cache formats: f32 | f16 | int8 | all")
        ->check(CLI::IsMember({"f32", "f16", "int8", "all"}))
        ->capture_default_str();
    app.add_option("--dtype", dev.dtype, "GPU operand dtype (make_backend): auto | half | float | bfloat16")
        ->capture_default_str();
    app.add_option("--cuda-kernels", dev.cuda_kernels, "auto | sm70 (force the Volta kernels)")
        ->capture_default_str();
    app.add_flag("--verbose", opt.verbose, "one line per output of each case too");
    app.add_flag("--list", list, "list the cases and exit");
    app.add_flag("--tolerances", tolerances, "print the tolerance table and exit");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    if (tolerances) {
        for (const Tolerance& t : tolerance_table())
            std::printf("%-5s %-24s %8.2e  %s\n", t.backend, t.key, t.rel, t.reason);
        return 0;
    }
    opt.ops = split(ops_arg);
    opt.edge = shapes == "edge" || shapes == "all";
    opt.model = shapes == "model" || shapes == "all";
    opt.bench_shapes = shapes == "bench";
    ref::parse_injection(inject, &opt.inject);
    if (kv == "f32") opt.kv_formats = {ops::Format::kF32};
    if (kv == "f16") opt.kv_formats = {ops::Format::kF16};
    if (kv == "int8") opt.kv_formats = {ops::Format::kInt8};

    std::vector<CaseDef> cases;
    add_dense_cases(opt, &cases);
    add_attention_cases(opt, &cases);
    add_moe_cases(opt, &cases);
    add_sample_cases(opt, &cases);
    add_copy_blocks_cases(opt, &cases);
    add_bench_cases(opt, &cases);
    std::set<std::string> known;
    for (const auto& c : cases) known.insert(c.op);
    for (const auto& o : opt.ops) {
        if (known.count(o) == 0) {
            std::fprintf(stderr, "volt_op_test: unknown op %s\n", o.c_str());
            return 2;
        }
    }
    auto selected = [&](const CaseDef& c) {
        const bool on = c.set == ShapeSet::kEdge    ? opt.edge
                        : c.set == ShapeSet::kModel ? opt.model
                                                    : opt.bench_shapes;
        if (!on) return false;
        return opt.ops.empty() || std::find(opt.ops.begin(), opt.ops.end(), c.op) != opt.ops.end();
    };
    if (list) {
        for (const auto& c : cases)
            if (selected(c)) std::printf("%-17s %s\n", c.op.c_str(), c.shape.c_str());
        return 0;
    }

    // The reference itself first, against the spec's own vectors (never injected).
    const auto bad = ref::self_test();
    for (const auto& b : bad) std::printf("reference self-test FAIL: %s\n", b.c_str());
    if (!bad.empty()) return 1;

    dev.device = opt.backend;
    auto backend = executor::make_backend(dev);
    if (!backend.is_ok()) {
        std::fprintf(stderr, "volt_op_test: %s\n", backend.status().to_string().c_str());
        return 2;
    }
    ops::Backend& be = **backend;
    std::printf("volt_op_test: backend %s, shapes %s, seed %llu, kv %s%s\n", be.name(), shapes.c_str(),
                static_cast<unsigned long long>(opt.seed), kv.c_str(),
                opt.inject == ref::Injection::kNone ? "" : (", inject " + inject + " (must FAIL)").c_str());
    RunState run;
    int64_t total = 0, failed = 0, skipped = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& def : cases) {
        if (!selected(def)) continue;
        Case c(opt, be, run, def);
        def.run(c);
        ++total;
        skipped += c.skipped();
        failed += !c.finish();
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("volt_op_test: %lld cases, %lld FAIL, %lld SKIP (%.1f s)\n", static_cast<long long>(total),
                static_cast<long long>(failed), static_cast<long long>(skipped), secs);
    return failed > 0 ? 1 : 0;
}
