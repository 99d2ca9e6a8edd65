// Emulation of the CUDA int8 / int4 GEMV's f16x2 arithmetic (src/cuda/kernels/gemv.cu, f16/bf16 operands;
// docs/quantization.md "Integer weights on the GPU"): x staged as f16 times 2^sx, HFMA2 chains of 8 products
// per half rounded to f16 (round to nearest even, subnormals kept), widened and summed as the kernel does,
// against exact double results, on the op harness's random weights (tests/kernels/cases_dense.cc
// random_int_weight). Prints the rms error over rms(y) and the harness metric |got - want| / max(|want|,
// rms(want)). A standalone host program, not part of the build:
//   g++ -O2 -o /tmp/emu tools/quant/int_gemv_error_emu.cc && /tmp/emu 8 2880 201088 && /tmp/emu 4 2880 201088
// Arguments: format (8 | 4), in, out, x rms (default 1). int4 uses group 64.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
static double r16(double x) {
    if (x == 0 || !std::isfinite(x)) return x;
    int e = std::ilogb(x);
    if (e < -14) e = -14;
    const double ulp = std::ldexp(1.0, e - 10);
    return std::nearbyint(x / ulp) * ulp;
}
int main(int argc, char** argv) {
    const int fmt = argc > 1 ? atoi(argv[1]) : 8;  // 8 or 4
    const int in = argc > 2 ? atoi(argv[2]) : 2880, out = argc > 3 ? atoi(argv[3]) : 4000;
    const double xs = argc > 4 ? atof(argv[4]) : 1.0;
    const int group = 64;
    std::mt19937_64 rng(7);
    std::normal_distribution<double> nd(0, xs);
    std::uniform_real_distribution<double> ud(0.5, 1.5);
    const double sigma = 1.0 / std::sqrt(double(in));
    std::vector<double> x(in);
    for (auto& v : x) v = float(nd(rng));
    double m = 0;
    for (double v : x) m = std::max(m, std::fabs(v));
    const int kx = fmt == 8 ? 4 : 7;
    const int sx = kx - std::ilogb(m);
    std::vector<double> xh(in), xr(in);
    for (int i = 0; i < in; ++i) {
        xh[i] = r16(std::ldexp(x[i], sx));
        xr[i] = std::ldexp(xh[i], -sx);
    }
    std::vector<double> ref(out), got(out), got_xonly(out);
    for (int o = 0; o < out; ++o) {
        std::vector<int> q(in);
        std::vector<double> s(in / group), z(in / group);
        double s8 = r16(sigma / 73.0 * ud(rng));
        if (fmt == 8)
            for (auto& v : q) v = int(rng() % 255) - 127;
        else {
            for (auto& v : q) v = int(rng() % 16);
            for (int g = 0; g < in / group; ++g) {
                z[g] = double(rng() % 16);
                s[g] = r16(sigma / 6.0 * ud(rng));
            }
        }
        auto w = [&](int i) { return fmt == 8 ? q[i] * s8 : (q[i] - z[i / group]) * s[i / group]; };
        double r = 0, rx = 0;
        for (int i = 0; i < in; ++i) {
            r += w(i) * x[i];
            rx += w(i) * xr[i];
        }
        ref[o] = r;
        got_xonly[o] = rx;
        // kernel: per chunk (16 int8 / 32 int4 codes) chains of 8 pairs; halves = even/odd positions of a
        // pair
        double acc = 0;
        const int per = fmt == 8 ? 16 : 32;
        for (int c = 0; c < in / per; ++c) {
            double part = 0;
            for (int ch = 0; ch < per / 16; ++ch) {
                for (int half = 0; half < 2; ++half) {
                    double h = 0;
                    for (int k = 0; k < 8; ++k) {
                        const int i =
                            c * per + ch * 16 + 2 * k + half;  // which inputs share a half: any 8 distinct
                        const double qq = fmt == 8 ? q[i] : q[i] - z[i / group];
                        h = r16(qq * xh[i] + h);
                    }
                    part += h;
                }
            }
            if (fmt == 8)
                acc += part;
            else
                acc = std::fma(part, s[(c * per) / group], acc);
        }
        got[o] = fmt == 8 ? std::ldexp(acc, -sx) * s8 : std::ldexp(acc, -sx);
    }
    double rr = 0;
    for (double v : ref) rr += v * v;
    rr = std::sqrt(rr / out);
    auto stats = [&](const std::vector<double>& g, const char* what) {
        double e2 = 0, worst = 0;
        for (int o = 0; o < out; ++o) {
            const double d = std::fabs(g[o] - ref[o]);
            e2 += d * d;
            worst = std::max(worst, d / std::max(std::fabs(ref[o]), rr));
        }
        std::printf("int%d in %d out %d x_rms %g %-22s rms err / rms(y) %.3e   max harness metric %.3e\n",
                    fmt, in, out, xs, what, std::sqrt(e2 / out) / rr, worst);
    };
    stats(got_xonly, "x rounding only");
    stats(got, "x rounding + chains");
}
