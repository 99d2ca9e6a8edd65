// The op harness's machinery (see harness.h).
#include "tests/kernels/harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "core/dtype.h"

namespace volt::kernels {

// ---- inputs ------------------------------------------------------------------------------------------

uint64_t Rng::next() { return ref::splitmix64(state_++); }

double Rng::uniform() { return std::ldexp(static_cast<double>(next() >> 11), -53); }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

int64_t Rng::below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

double Rng::normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
}

std::vector<float> Rng::normal_f32(int64_t n, double sigma, double mean) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(mean + sigma * normal());
    return v;
}

std::vector<int32_t> Rng::distinct(int64_t n, int64_t range) {
    std::vector<int32_t> all(range);
    std::iota(all.begin(), all.end(), 0);
    for (int64_t i = 0; i < n; ++i) std::swap(all[i], all[i + below(range - i)]);
    all.resize(n);
    return all;
}

void Rng::bytes(uint8_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint64_t r = next();
        std::memcpy(out + i, &r, 8);
    }
    for (const uint64_t r = next(); i < n; ++i) out[i] = static_cast<uint8_t>(r >> (8 * (i % 8)));
}

int64_t format_bytes(ops::Format f) { return f == ops::Format::kF32 ? 4 : f == ops::Format::kInt8 ? 1 : 2; }

ops::DenseWeight dense_view(ops::Format f, const void* w, int64_t out, int64_t in, ops::VectorWeight bias) {
    ops::DenseWeight d;
    d.format = f;
    d.w = w;
    d.b = bias;
    d.out = out;
    d.in = in;
    return d;
}

HostTensor random_dense(Rng& rng, ops::Format f, int64_t n, double sigma, double mean) {
    // Large tensors (an lm_head is 579M values) draw from a table of 65536 normal values indexed by 16
    // random bits: the same distribution at a fraction of Box-Muller's cost.
    std::vector<float> table;
    const bool tabled = n > 65536;
    if (tabled) table = rng.normal_f32(65536, sigma, mean);
    HostTensor t;
    t.bytes.resize(n * format_bytes(f));
    uint64_t bits = 0;
    for (int64_t i = 0; i < n; ++i) {
        float x;
        if (tabled) {
            if (i % 4 == 0) bits = rng.next();
            x = table[(bits >> (16 * (i % 4))) & 0xffff];
        } else {
            x = static_cast<float>(mean + sigma * rng.normal());
        }
        if (f == ops::Format::kF32) {
            std::memcpy(t.bytes.data() + 4 * i, &x, 4);
        } else {
            const uint16_t h = f == ops::Format::kF16 ? f32_to_f16(x) : f32_to_bf16(x);
            std::memcpy(t.bytes.data() + 2 * i, &h, 2);
        }
    }
    return t;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::string format_str(ops::Format f) { return ops::format_name(f); }

void add_case(std::vector<CaseDef>* out, std::string op, std::string shape, ShapeSet set,
              std::function<void(Case&)> fn) {
    out->push_back({std::move(op), std::move(shape), set, std::move(fn)});
}

std::string shape_str(std::initializer_list<std::pair<const char*, std::string>> fields) {
    std::string s;
    for (const auto& [k, v] : fields) s += (s.empty() ? "" : ",") + std::string(k) + "=" + v;
    return s;
}

std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

// ---- a case ------------------------------------------------------------------------------------------

namespace {
// Inputs depend on (seed, op, shape) only (FNV-1a of the names), so --op filters never change them.
uint64_t case_seed(uint64_t seed, const CaseDef& d) {
    uint64_t h = 1469598103934665603ull;
    for (char c : d.op + "/" + d.shape) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    return ref::splitmix64(seed ^ h);
}

double rms(const std::vector<double>& v) {
    double ss = 0.0;
    for (double x : v) ss += x * x;
    return v.empty() ? 0.0 : std::sqrt(ss / static_cast<double>(v.size()));
}

std::string sci(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2e", x);
    return b;
}

// Enough digits to see a difference in the last f32 bits.
std::string full(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", x);
    return b;
}
}  // namespace

Case::Case(const Options& opt, ops::Backend& backend, RunState& run, const CaseDef& def)
    : opt_(opt), backend_(backend), run_(run), def_(def), rng_(case_seed(opt.seed, def)) {}

Case::~Case() = default;

const std::string& Case::op() const { return def_.op; }
const std::string& Case::shape() const { return def_.shape; }

void* Case::alloc(int64_t bytes) {
    auto b = backend_.alloc(std::max<int64_t>(bytes, 16));
    if (!b.is_ok()) {
        std::fprintf(stderr, "volt_op_test: %s %s: %s\n", def_.op.c_str(), def_.shape.c_str(),
                     b.status().to_string().c_str());
        std::exit(2);
    }
    owned_.push_back(std::move(b).value());
    return owned_.back().data();
}

void* Case::upload_bytes(const void* host, int64_t bytes) {
    void* p = alloc(bytes);
    if (bytes > 0) backend_.upload(p, host, bytes);
    return p;
}

void Case::reserve(int64_t tokens, int64_t seqs, int64_t seq_len) {
    auto& r = run_.reserved;
    if (tokens <= r.max_tokens && seqs <= r.max_seqs && seq_len <= r.max_seq_len) return;
    r.max_tokens = std::max(r.max_tokens, tokens);
    r.max_seqs = std::max(r.max_seqs, seqs);
    r.max_seq_len = std::max(r.max_seq_len, seq_len);
    const Status s = backend_.reserve(r);
    if (!s.is_ok()) fail("reserve: " + s.to_string());
}

namespace {
template <typename T, typename Fn>
bool place_with(Case& c, const char* what, Fn&& fn, T* out) {
    auto r = fn();
    if (!r.is_ok()) {
        c.skip(std::string("the backend refuses ") + what + ": " + r.status().to_string());
        return false;
    }
    *out = std::move(r).value();
    return true;
}
}  // namespace

namespace {
// A placement that quantizes (to MXFP4 or int8/int4) changes the weights by far more than any arithmetic
// tolerance: the exact reference no longer applies, and the case says so instead of passing or failing.
bool quantized(ops::Format from, ops::Format to) {
    const bool q = to == ops::Format::kMxfp4 || to == ops::Format::kInt8 || to == ops::Format::kInt4;
    return q && from != to;
}
}  // namespace

bool Case::place(const ops::DenseWeight& host, ops::WeightRole role, ops::DenseWeight* out) {
    if (!place_with(
            *this, (format_str(host.format) + " dense weights").c_str(),
            [&] { return backend_.place_dense(host, role, &owned_); }, out))
        return false;
    if (quantized(host.format, out->format)) {
        skip("the backend placed " + format_str(host.format) + " weights as " + format_str(out->format) +
             " (lossy): the exact reference does not apply");
        return false;
    }
    return true;
}
bool Case::place(const ops::QkvWeights& host, ops::QkvWeights* out) {
    return place_with(
        *this, (format_str(host.q.format) + " q/k/v weights").c_str(),
        [&] { return backend_.place_qkv(host, &owned_); }, out);
}
bool Case::place(const ops::ExpertWeights& host, ops::ExpertWeights* out) {
    if (!place_with(
            *this, (format_str(host.format) + " expert weights").c_str(),
            [&] { return backend_.place_experts(host, &owned_); }, out))
        return false;
    if (quantized(host.format, out->format)) {
        skip("the backend placed " + format_str(host.format) + " experts as " + format_str(out->format) +
             " (lossy): the exact reference does not apply");
        return false;
    }
    return true;
}
bool Case::place(const ops::VectorWeight& host, ops::VectorWeight* out) {
    return place_with(
        *this, (format_str(host.format) + " vectors").c_str(),
        [&] { return backend_.place_vector(host, &owned_); }, out);
}

const Tolerance& Case::tol(const std::string& key) {
    if (const Tolerance* t = find_tolerance(backend_.name(), key)) return *t;
    static const Tolerance kMissing{"?", "?", -1.0, "no entry"};
    fail(std::string("no tolerance entry (") + backend_.name() + ", " + key + ") in tolerances.cc");
    return kMissing;
}

void Case::add(Check c) { checks_.push_back(std::move(c)); }

void Case::compare(const std::string& name, const std::vector<float>& got, const std::vector<double>& ref,
                   const Tolerance& tol) {
    Check c{name, 0, 0, tol.rel, tol.rel >= 0, ""};
    if (got.size() != ref.size()) {
        c.pass = false;
        c.detail = "size " + std::to_string(got.size()) + " vs " + std::to_string(ref.size());
        add(c);
        return;
    }
    const double floor = std::max(rms(ref), 1e-300);
    int64_t bad = 0, worst = -1;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) {
            if (bad++ == 0) worst = static_cast<int64_t>(i);
            continue;
        }
        const double d = std::abs(got[i] - ref[i]);
        const double r = d / std::max(std::abs(ref[i]), floor);
        c.max_abs = std::max(c.max_abs, d);
        if (r > c.max_rel) {
            c.max_rel = r;
            if (bad == 0) worst = static_cast<int64_t>(i);
        }
    }
    if (bad > 0) {
        c.pass = false;
        c.detail = std::to_string(bad) + " of " + std::to_string(got.size()) +
                   " not finite (unwritten poison or NaN), first at " + std::to_string(worst);
    } else if (c.max_rel > tol.rel) {
        c.pass = false;
        c.detail =
            "worst at " + std::to_string(worst) + ": got " + full(got[worst]) + " want " + full(ref[worst]);
    }
    add(c);
}

void Case::compare_residual(const std::string& name, const std::vector<float>& got,
                            const std::vector<double>& ref, const std::vector<double>& branch,
                            const Tolerance& tol) {
    Check c{name, 0, 0, tol.rel, tol.rel >= 0, ""};
    const double floor = std::max(rms(branch), 1e-300);
    int64_t bad = 0, worst = -1;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) {
            if (bad++ == 0) worst = static_cast<int64_t>(i);
            continue;
        }
        const double d = std::abs(got[i] - ref[i]);
        // One ulp of the f32 result: the rounding of x + branch that every f32 backend makes.
        const double ulp = ref[i] == 0.0 ? 0.0 : std::ldexp(1.0, std::ilogb(ref[i]) - 23);
        const double r = std::max(0.0, d - ulp) / std::max(std::abs(branch[i]), floor);
        c.max_abs = std::max(c.max_abs, d);
        if (r > c.max_rel) {
            c.max_rel = r;
            if (bad == 0) worst = static_cast<int64_t>(i);
        }
    }
    if (bad > 0) {
        c.pass = false;
        c.detail = std::to_string(bad) + " of " + std::to_string(got.size()) + " not finite, first at " +
                   std::to_string(worst);
    } else if (c.max_rel > tol.rel) {
        c.pass = false;
        c.detail =
            "worst at " + std::to_string(worst) + ": got " + full(got[worst]) + " want " + full(ref[worst]);
    }
    add(c);
}

void Case::compare_ids(const std::string& name, const std::vector<int32_t>& got,
                       const std::vector<int32_t>& ref, int64_t per_row, const std::vector<bool>& skip) {
    Check c{name, 0, 0, 0, true, ""};
    int64_t wrong = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!skip.empty() && skip[i / per_row]) continue;
        if (got[i] != ref[i] && wrong++ == 0) first = static_cast<int64_t>(i);
    }
    if (wrong > 0) {
        c.pass = false;
        c.max_abs = static_cast<double>(wrong);
        c.detail = std::to_string(wrong) + " ids differ, first at " + std::to_string(first) + ": got " +
                   std::to_string(got[first]) + " want " + std::to_string(ref[first]);
    }
    add(c);
}

void Case::near_ties(int64_t skipped, int64_t rows, double max_fraction) {
    if (skipped > 0) note(std::to_string(skipped) + "/" + std::to_string(rows) + " near-ties skipped");
    // One tie is always allowed (a case of 2 rows may meet one); more must stay under the fraction.
    if (skipped > 1 && static_cast<double>(skipped) > max_fraction * static_cast<double>(rows))
        fail("near-ties in " + std::to_string(skipped) + " of " + std::to_string(rows) +
             " rows: the case checks too little (inputs need more spread)");
}

void Case::compare_bytes(const std::string& name, const std::vector<uint8_t>& got,
                         const std::vector<uint8_t>& want) {
    Check c{name, 0, 0, 0, true, ""};
    int64_t wrong = 0, first = -1;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
        if (got[i] != want[i] && wrong++ == 0) first = static_cast<int64_t>(i);
    if (wrong > 0 || got.size() != want.size()) {
        c.pass = false;
        c.max_abs = static_cast<double>(wrong);
        c.detail = std::to_string(wrong) + " bytes differ, first at byte " + std::to_string(first);
    }
    add(c);
}

void Case::fail(const std::string& why) { add({"check", 0, 0, 0, false, why}); }

void Case::note(const std::string& what) { notes_.push_back(what); }

void Case::skip(const std::string& why) {
    skipped_ = true;
    skip_reason_ = why;
}

void Case::bench(const std::function<void()>& run, int64_t min_bytes) {
    bench_rotating([&](int) { run(); }, 1, min_bytes);
}

void Case::bench_rotating(const std::function<void(int)>& run, int copies, int64_t min_bytes) {
    if (!opt_.bench || skipped_) return;
    if (run_.read_gbps < 0.0) {
        run_.read_gbps = backend_.measure_read_gbps(opt_.read_bytes);
        std::printf("{\"bench\":\"read_bandwidth\",\"backend\":\"%s\",\"bytes\":%lld,\"gbps\":%.1f}\n",
                    backend_.name(), static_cast<long long>(opt_.read_bytes), run_.read_gbps);
    }
    copies = std::max(1, copies);
    const int calls = (std::max(16, copies) + copies - 1) / copies * copies;
    for (int i = 0; i < copies; ++i) run(i);
    backend_.synchronize();
    std::vector<double> us;
    for (int it = 0; it < std::max(1, opt_.bench_iters); ++it) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) run(i % copies);
        backend_.synchronize();
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
    std::sort(us.begin(), us.end());
    bench_.push_back({us[us.size() / 2], min_bytes, copies, calls});
}

void Case::bench_info(const std::string& key, const std::string& value) {
    bench_info_.push_back({key, value});
}

bool Case::finish() {
    if (skipped_) {
        std::printf("%-17s %-58s SKIP  %s\n", def_.op.c_str(), def_.shape.c_str(), skip_reason_.c_str());
        return true;
    }
    // The line shows the check closest to (or furthest past) its tolerance.
    const Check* worst = nullptr;
    double worst_ratio = -1.0;
    bool pass = true;
    for (const Check& c : checks_) {
        pass = pass && c.pass;
        const double ratio = !c.pass ? 1e300 : (c.tol > 0 ? c.max_rel / c.tol : 0.0);
        if (worst == nullptr || ratio > worst_ratio) {
            worst = &c;
            worst_ratio = ratio;
        }
    }
    std::string tail;
    if (worst != nullptr)
        tail = "(" + worst->name + (worst->detail.empty() ? "" : ": " + worst->detail) + ")";
    for (const auto& n : notes_) tail += " [" + n + "]";
    std::printf("%-17s %-58s max_abs %s  max_rel %s  tol %s  %s  %s\n", def_.op.c_str(), def_.shape.c_str(),
                sci(worst ? worst->max_abs : 0).c_str(), sci(worst ? worst->max_rel : 0).c_str(),
                sci(worst ? worst->tol : 0).c_str(), pass ? "PASS" : "FAIL", tail.c_str());
    if (opt_.verbose) {
        std::printf("    (%.2f s with the reference)\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
        for (const Check& c : checks_)
            std::printf("    %-14s max_abs %s  max_rel %s  tol %s  %s %s\n", c.name.c_str(),
                        sci(c.max_abs).c_str(), sci(c.max_rel).c_str(), sci(c.tol).c_str(),
                        c.pass ? "PASS" : "FAIL", c.detail.c_str());
    }
    for (const auto& b : bench_) {
        const double gbps = b.median_us > 0 ? static_cast<double>(b.min_bytes) / (b.median_us * 1e3) : 0.0;
        std::printf("BENCH op=%s shape=%s backend=%s median_us=%.3f min_bytes=%lld gbps=%.3f iters=%d",
                    def_.op.c_str(), def_.shape.c_str(), backend_.name(), b.median_us,
                    static_cast<long long>(b.min_bytes), gbps, opt_.bench_iters);
        if (opt_.ceiling_gbps > 0)
            std::printf(" ceiling_gbps=%.1f fraction=%.3f", opt_.ceiling_gbps, gbps / opt_.ceiling_gbps);
        if (run_.read_gbps > 0)
            std::printf(" read_gbps=%.1f read_fraction=%.3f", run_.read_gbps, gbps / run_.read_gbps);
        std::printf("\n");
        // The same as one JSON line (scripts/gpu/bench.sh collects the lines starting with {"bench").
        std::string j = "{\"bench\":\"" + def_.op + "\",\"shape\":\"" + def_.shape + "\",\"backend\":\"" +
                        backend_.name() + "\",\"pass\":" + (pass ? "true" : "false");
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      ",\"median_us\":%.3f,\"min_bytes\":%lld,\"gbps\":%.1f,\"read_gbps\":%.1f,"
                      "\"fraction\":%.4f,\"copies\":%d,\"working_set_bytes\":%lld,\"calls_per_round\":%d,"
                      "\"rounds\":%d",
                      b.median_us, static_cast<long long>(b.min_bytes), gbps, std::max(0.0, run_.read_gbps),
                      run_.read_gbps > 0 ? gbps / run_.read_gbps : 0.0, b.copies,
                      static_cast<long long>(b.min_bytes) * b.copies, b.calls, opt_.bench_iters);
        j += buf;
        for (const auto& [k, v] : bench_info_) j += ",\"" + k + "\":\"" + v + "\"";
        j += "}";
        std::printf("%s\n", j.c_str());
    }
    std::fflush(stdout);
    return pass;
}

}  // namespace volt::kernels
