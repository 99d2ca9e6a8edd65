// mxfp4_error: quantization error of the three MXFP4 scale rules (quant/mxfp4.h) on weight-like data:
// Gaussian, Laplace, Student-t(3), Gaussian with rare 10x outliers, each with row-wise log-normal scales,
// and make-model's own expert weights. Prints relative RMSE (sqrt(sum err^2 / sum x^2)), the share of
// blocks that took e_ocp + 1, the share of elements clipped at 6 * scale, and the speed. Results and the
// choice of default: docs/quantization.md. Usage: mxfp4_error [rows] (default 4096 rows of 2880).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "model/make_model.h"
#include "quant/mxfp4.h"

namespace {

using volt::model::fill_normal;
using volt::model::splitmix64;
using volt::quant::ScaleRule;

constexpr int64_t kCols = 2880;  // gpt-oss hidden size: 90 blocks per row

double uniform(uint64_t key, int64_t i) {  // (0, 1)
    return (static_cast<double>(splitmix64(key + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 11) +
            0.5) *
           0x1p-53;
}

// Fills rows x kCols with one distribution; every row gets its own log-normal scale exp(0.5 z).
using Fill = std::function<void(int64_t rows, float* x)>;

void row_scales(int64_t rows, float* x) {
    std::vector<float> z(rows);
    fill_normal(99, 0, rows, z.data());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < kCols; ++k) x[r * kCols + k] *= std::exp(0.5f * z[r]);
}

struct Stats {
    double rel_rmse = 0, upper_share = 0, clipped_share = 0, ns_per_elem = 0;
};

Stats measure(const std::vector<float>& x, int64_t rows, ScaleRule rule) {
    const int64_t nb = kCols / 32;
    std::vector<uint8_t> codes(rows * nb * 16), scales(rows * nb);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < rows; ++r)
        if (!volt::quant::quantize_mxfp4_row(x.data() + r * kCols, kCols, rule, codes.data() + r * nb * 16,
                                             scales.data() + r * nb)
                 .is_ok())
            std::abort();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<float> y(kCols);
    double err = 0, sig = 0;
    int64_t upper = 0, clipped = 0;
    for (int64_t r = 0; r < rows; ++r) {
        volt::quant::decode_mxfp4_row(codes.data() + r * nb * 16, scales.data() + r * nb, kCols, y.data());
        for (int64_t b = 0; b < nb; ++b) {
            const float* xb = x.data() + r * kCols + b * 32;
            float amax = 0;
            for (int k = 0; k < 32; ++k) amax = std::fmax(amax, std::fabs(xb[k]));
            const int s = scales[r * nb + b];
            upper += s != volt::quant::ocp_scale_byte(amax);
            const double top = 6.0 * std::ldexp(1.0, s - 127);
            for (int k = 0; k < 32; ++k) clipped += std::fabs(xb[k]) > top;
        }
        for (int64_t k = 0; k < kCols; ++k) {
            const double d = double(y[k]) - x[r * kCols + k];
            err += d * d;
            sig += double(x[r * kCols + k]) * x[r * kCols + k];
        }
    }
    Stats st;
    st.rel_rmse = std::sqrt(err / sig);
    st.upper_share = double(upper) / (rows * nb);
    st.clipped_share = double(clipped) / (rows * kCols);
    st.ns_per_elem = secs * 1e9 / (rows * kCols);
    return st;
}

}  // namespace

int main(int argc, char** argv) {
    const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 4096;
    const int64_t n = rows * kCols;
    std::vector<std::pair<std::string, Fill>> dists = {
        {"gaussian", [](int64_t rows, float* x) { fill_normal(1, 0, rows * kCols, x); }},
        {"gaussian, row scales",
         [](int64_t rows, float* x) {
             fill_normal(1, 0, rows * kCols, x);
             row_scales(rows, x);
         }},
        {"laplace, row scales",
         [](int64_t rows, float* x) {
             for (int64_t i = 0; i < rows * kCols; ++i) {
                 const double u = uniform(2, i) - 0.5;
                 x[i] = static_cast<float>(-std::copysign(std::log(1 - 2 * std::fabs(u)), u));
             }
             row_scales(rows, x);
         }},
        {"student-t(3), row scales",
         [](int64_t rows, float* x) {
             const int64_t m = rows * kCols;
             std::vector<float> z(4 * m);
             fill_normal(3, 0, 4 * m, z.data());
             for (int64_t i = 0; i < m; ++i) {
                 const double chi2 = double(z[4 * i + 1]) * z[4 * i + 1] +
                                     double(z[4 * i + 2]) * z[4 * i + 2] +
                                     double(z[4 * i + 3]) * z[4 * i + 3];
                 x[i] = static_cast<float>(z[4 * i] / std::sqrt(chi2 / 3.0));
             }
             row_scales(rows, x);
         }},
        {"gaussian + 0.1% 10x outliers",
         [](int64_t rows, float* x) {
             fill_normal(4, 0, rows * kCols, x);
             for (int64_t i = 0; i < rows * kCols; ++i)
                 if (uniform(5, i) < 0.001) x[i] *= 10.0f;
             row_scales(rows, x);
         }},
        {"make-model 20b gate_up (bf16)",
         [](int64_t rows, float* x) {
             auto c = volt::model::preset_config("20b");
             if (!volt::model::generate_rows(*c, 0, "model.layers.0.mlp.experts.gate_up_proj", 0, rows, x)
                      .is_ok())
                 std::abort();
             for (int64_t i = 0; i < rows * kCols; ++i) x[i] = volt::bf16_to_f32(volt::f32_to_bf16(x[i]));
         }},
    };
    std::printf("%d x %d elements per distribution\n", int(rows), int(kCols));
    std::printf("| distribution | rule | rel. RMSE | blocks at e+1 | clipped elements | ns/element |\n");
    std::printf("|---|---|---|---|---|---|\n");
    std::vector<float> x(n);
    for (const auto& [name, fill] : dists) {
        fill(rows, x.data());
        for (ScaleRule rule : {ScaleRule::kOcp, ScaleRule::kNoSaturate, ScaleRule::kBestOf2}) {
            const Stats s = measure(x, rows, rule);
            std::printf("| %s | %s | %.4f%% | %.2f%% | %.4f%% | %.1f |\n", name.c_str(),
                        volt::quant::scale_rule_name(rule), 100 * s.rel_rmse, 100 * s.upper_share,
                        100 * s.clipped_share, s.ns_per_elem);
        }
    }
    return 0;
}
