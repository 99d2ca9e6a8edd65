// The op harness's machinery: seeded inputs, backend memory of one case (upload, NaN poison, download),
// comparison of backend outputs with the double reference (reference.h) under the tolerance table
// (tolerances.h), one report line per (op, shape), and the --bench timer. The cases themselves live in
// cases_*.cc, one file per group of ops; op_test.cc is main. README.md beside this file says what is
// checked and how the error is measured.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/kernels/reference.h"
#include "tests/kernels/tolerances.h"

namespace volt::kernels {

// Command line of volt_op_test.
struct Options {
    std::string backend = "cpu";
    std::vector<std::string> ops;  // empty: every op
    bool edge = true, model = false;
    uint64_t seed = 1;
    bool bench = false;
    int bench_iters = 10;
    double ceiling_gbps = 0.0;              // > 0: BENCH lines also give the fraction of this bandwidth
    int64_t read_bytes = int64_t{1} << 30;  // buffer of the read-bandwidth reference (>= 4x L2)
    bool bench_shapes = false;              // --shapes bench: the rotating benchmark cases (cases_bench.cc)
    ref::Injection inject = ref::Injection::kNone;
    std::vector<ops::Format> kv_formats = {ops::Format::kF32, ops::Format::kF16, ops::Format::kInt8};
    bool verbose = false;
};

// splitmix64 stream: inputs are a function of (--seed, op, shape) only, whatever else runs.
class Rng {
  public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next();
    double uniform();                      // [0, 1)
    double uniform(double lo, double hi);  // [lo, hi)
    int64_t below(int64_t n);              // [0, n)
    double normal();                       // N(0, 1), Box-Muller
    std::vector<float> normal_f32(int64_t n, double sigma, double mean = 0.0);
    // n distinct values of [0, range) in random order.
    std::vector<int32_t> distinct(int64_t n, int64_t range);
    void bytes(uint8_t* out, int64_t n);

  private:
    uint64_t state_;
};

// The bytes of a host tensor in its stored format (views point into them).
struct HostTensor {
    std::vector<uint8_t> bytes;
    const void* data() const { return bytes.data(); }
};
// Random dense values N(0, sigma^2) stored as `f` (bf16, f16 or f32).
HostTensor random_dense(Rng& rng, ops::Format f, int64_t n, double sigma, double mean = 0.0);
int64_t format_bytes(ops::Format f);  // bytes per element of a dense format (f32 4, f16/bf16 2, int8 1)
// A dense weight view [out, in] with an optional bias [out].
ops::DenseWeight dense_view(ops::Format f, const void* w, int64_t out, int64_t in,
                            ops::VectorWeight bias = {});

// Random integer weights [out, in] (docs/quantization.md) whose dequantized values have about N(0, 1/in)
// scale, in the host layouts: INT8 codes uniform in [-127, 127] with per-row f16 scales (kInt8); AWQ
// qweight and qzeros words uniform over all 32 bits (every nibble value at every position) and f16 scales
// per (group, column) (kInt4, out % 8 == 0, in % group == 0). view points into the vectors.
struct IntWeight {
    std::vector<int8_t> q8;
    std::vector<uint32_t> qweight, qzeros;
    std::vector<uint16_t> scales;
    ops::DenseWeight view;
};
IntWeight random_int_weight(Rng& rng, ops::Format f, int64_t out, int64_t in, int64_t group);
int64_t int_weight_bytes(const IntWeight& w);  // the bytes an op must read

struct CaseDef;

// What lasts across the cases of one run: the workspace limits reserved so far (they only grow).
struct RunState {
    ops::WorkspaceLimits reserved;
    double read_gbps = -1.0;  // the read-bandwidth reference, measured at the first bench (0: none)
};

// One (op, shape): owns its backend memory; collects the checks and prints one line at the end.
class Case {
  public:
    Case(const Options& opt, ops::Backend& backend, RunState& run, const CaseDef& def);
    ~Case();
    Case(const Case&) = delete;
    Case& operator=(const Case&) = delete;

    ops::Backend& backend() { return backend_; }
    Rng& rng() { return rng_; }
    ref::Injection inject() const { return opt_.inject; }
    const Options& options() const { return opt_; }
    const std::string& op() const;
    const std::string& shape() const;

    // Backend memory, freed with the case.
    void* alloc(int64_t bytes);
    template <typename T>
    T* upload(const std::vector<T>& host) {
        void* p = alloc(static_cast<int64_t>(host.size() * sizeof(T)));
        if (!host.empty()) backend_.upload(p, host.data(), static_cast<int64_t>(host.size() * sizeof(T)));
        return static_cast<T*>(p);
    }
    void* upload_bytes(const void* host, int64_t bytes);
    // n elements filled with 0xFF bytes: NaN for f32 and f16, -1 for integers.
    template <typename T>
    T* poisoned(int64_t n) {
        void* p = alloc(n * static_cast<int64_t>(sizeof(T)));
        backend_.fill(p, 0xFF, n * static_cast<int64_t>(sizeof(T)));
        return static_cast<T*>(p);
    }
    void poison(void* p, int64_t bytes) { backend_.fill(p, 0xFF, bytes); }
    template <typename T>
    std::vector<T> download(const T* p, int64_t n) {
        std::vector<T> host(n);
        if (n > 0) backend_.download(host.data(), p, n * static_cast<int64_t>(sizeof(T)));
        return host;
    }
    std::vector<ops::Buffer>* owned() { return &owned_; }
    // The tolerance entry `key` of this backend; a missing entry fails the case (rel < 0 in the result).
    const Tolerance& tol(const std::string& key);
    // Sizes the backend's scratch (limits only grow over a run, as in the engine).
    void reserve(int64_t tokens, int64_t seqs, int64_t seq_len);

    // Placement through the backend (a GPU uploads and may convert). False (and the case is skipped
    // with the backend's message) when the backend refuses the format.
    bool place(const ops::DenseWeight& host, ops::WeightRole role, ops::DenseWeight* out);
    bool place(const ops::QkvWeights& host, ops::QkvWeights* out);
    bool place(const ops::ExpertWeights& host, ops::ExpertWeights* out);
    bool place(const ops::VectorWeight& host, ops::VectorWeight* out);

    // Compares an f32 output with the reference. Error of element i: |got - ref| / max(|ref|, floor),
    // floor = rms(ref) over the output (so cancellation near zero does not blow up the ratio). NaN
    // (poison left, or produced) counts as unwritten / non-finite and fails.
    void compare(const std::string& name, const std::vector<float>& got, const std::vector<double>& ref,
                 const Tolerance& tol);
    // A residual output ref = before + branch: error |got - ref| minus one f32 ulp of |ref| (the rounding
    // of the sum itself), over max(|branch_i|, rms(branch)): the branch's own accuracy, so a residual
    // narrowed to fp16 (an error of 2^-11 |x|) fails however small the branch.
    void compare_residual(const std::string& name, const std::vector<float>& got,
                          const std::vector<double>& ref, const std::vector<double>& branch,
                          const Tolerance& tol);
    // Exact comparison of integers (ids); rows flagged in `skip` are not compared (near-ties).
    void compare_ids(const std::string& name, const std::vector<int32_t>& got,
                     const std::vector<int32_t>& ref, int64_t per_row, const std::vector<bool>& skip);
    // Counts near-tie rows that were not compared; fails when they are more than `max_fraction` of the
    // rows (a test whose decisions are mostly ties checks nothing).
    void near_ties(int64_t skipped, int64_t rows, double max_fraction);
    // Bytes compared exactly (KV pools, copy_blocks); `what` names the first mismatch.
    void compare_bytes(const std::string& name, const std::vector<uint8_t>& got,
                       const std::vector<uint8_t>& want);
    void fail(const std::string& why);
    void note(const std::string& what);
    void skip(const std::string& why);
    bool skipped() const { return skipped_; }

    // --bench: `run` (which must leave outputs valid to run again) timed with synchronize; warm-up, then
    // the median of options().bench_iters runs; min_bytes = bytes the op must read or write at least.
    void bench(const std::function<void()>& run, int64_t min_bytes);
    // The same over `copies` copies of the op's data: call i runs run(i % copies), so a working set of
    // copies x (bytes per call) >= 4x L2 measures device memory, not L2. Calls run back to back (rounds
    // of at least 16 calls, one synchronize per round; the median round over bench_iters, per call).
    void bench_rotating(const std::function<void(int)>& run, int copies, int64_t min_bytes);
    // A key=value pair carried into the BENCH JSON line ("distinct_experts": "17.3").
    void bench_info(const std::string& key, const std::string& value);

    // Prints the line; true when every check passed (or the case was skipped).
    bool finish();

  private:
    struct Check {
        std::string name;
        double max_abs = 0, max_rel = 0, tol = 0;
        bool pass = true;
        std::string detail;
    };
    struct BenchResult {
        double median_us = 0;
        int64_t min_bytes = 0;
        int copies = 1, calls = 1;
    };
    std::vector<std::pair<std::string, std::string>> bench_info_;
    void add(Check c);

    const Options& opt_;
    ops::Backend& backend_;
    RunState& run_;
    const CaseDef& def_;
    Rng rng_;
    std::vector<ops::Buffer> owned_;
    std::vector<Check> checks_;
    std::vector<std::string> notes_;
    std::vector<BenchResult> bench_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    bool skipped_ = false;
    std::string skip_reason_;
};

enum class ShapeSet { kEdge, kModel, kBench };

// One registered (op, shape): `run` builds inputs, runs the backend, computes the reference, compares.
struct CaseDef {
    std::string op, shape;
    ShapeSet set;
    std::function<void(Case&)> run;
};

// The case lists of each group of ops (cases_*.cc). KV formats come from the options.
void add_dense_cases(const Options& opt, std::vector<CaseDef>* out);        // embedding rmsnorm linear add
                                                                            // o_proj_residual final_logits
void add_attention_cases(const Options& opt, std::vector<CaseDef>* out);    // rope kv_write attention
                                                                            // qkv_rope_kvwrite
void add_moe_cases(const Options& opt, std::vector<CaseDef>* out);          // router moe_route experts
                                                                            // experts_residual
void add_sample_cases(const Options& opt, std::vector<CaseDef>* out);       // sample
void add_copy_blocks_cases(const Options& opt, std::vector<CaseDef>* out);  // copy_blocks
void add_bench_cases(const Options& opt, std::vector<CaseDef>* out);        // --shapes bench

// Helpers shared by the case files.
void add_case(std::vector<CaseDef>* out, std::string op, std::string shape, ShapeSet set,
              std::function<void(Case&)> fn);
// "T=33,in=2880,w=bf16": a shape label (no spaces: one field of the report line).
std::string shape_str(std::initializer_list<std::pair<const char*, std::string>> fields);
std::string num(double v);  // %g
std::vector<double> to_double(const std::vector<float>& v);
std::string format_str(ops::Format f);

}  // namespace volt::kernels
