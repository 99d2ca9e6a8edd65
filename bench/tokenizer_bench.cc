// Single-thread encode throughput (MB/s) of volt::tokenizer on one large text, in both special-token
// modes, beside the ids' count and FNV-1a hash so the run doubles as a parity check against Hugging Face
// `tokenizers` (tools/golden_tokenizer.py prints the same hash). Results: docs/performance.md.
// Usage: tokenizer_bench TOKENIZER_JSON TEXT_FILE [REPS] [--no-runs]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

// FNV-1a 64 over the ids as little-endian int32 bytes.
uint64_t fnv1a_ids(const std::vector<int32_t>& ids) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int32_t id : ids) {
        auto u = static_cast<uint32_t>(id);
        for (int i = 0; i < 4; ++i) {
            h ^= (u >> (8 * i)) & 0xFF;
            h *= 0x100000001B3ull;
        }
    }
    return h;
}

}  // namespace

int main(int argc, char** argv) {
    using volt::tokenizer::SpecialTokens;
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s TOKENIZER_JSON TEXT_FILE [REPS] [--no-runs]\n", argv[0]);
        return 2;
    }
    int reps = argc > 3 ? std::atoi(argv[3]) : 5;
    auto t0 = std::chrono::steady_clock::now();
    auto tok = volt::tokenizer::Tokenizer::from_file(argv[1]);
    if (!tok) {
        std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
        return 1;
    }
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ifstream f(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    std::printf("load %.3f s; text %zu bytes\n", load_s, text.size());
    for (auto [mode, label] : {std::pair{SpecialTokens::kRecognise, "recognise"},
                               std::pair{SpecialTokens::kIgnore, "no_special"}}) {
        double best = 1e30;
        std::vector<int32_t> ids;
        for (int r = 0; r < reps; ++r) {
            auto s = std::chrono::steady_clock::now();
            auto out = (*tok)->encode(text, mode);
            double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
            if (!out) {
                std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
                return 1;
            }
            best = std::min(best, dt);
            ids = std::move(out).value();
        }
        std::printf("%-10s: %.4f s best of %d, %.2f MB/s, %zu ids, fnv1a %016llx\n", label, best, reps,
                    text.size() / 1e6 / best, ids.size(), static_cast<unsigned long long>(fnv1a_ids(ids)));
    }
    // Paragraph by paragraph (the text split at "\n\n", as golden_tokenizer.py bench does for HF).
    std::vector<std::string_view> paragraphs;
    for (size_t start = 0;;) {
        size_t end = text.find("\n\n", start);
        paragraphs.push_back(
            std::string_view(text).substr(start, end == std::string::npos ? end : end - start));
        if (end == std::string::npos) break;
        start = end + 2;
    }
    double best = 1e30;
    std::vector<int32_t> all;
    for (int r = 0; r < reps; ++r) {
        all.clear();
        auto s = std::chrono::steady_clock::now();
        for (std::string_view p : paragraphs) {
            auto out = (*tok)->encode(p, SpecialTokens::kRecognise);
            if (!out) return 1;
            all.insert(all.end(), out->begin(), out->end());
        }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
    }
    std::printf("paragraphs: %.4f s best of %d, %.2f MB/s, %zu paragraphs, %zu ids, fnv1a %016llx\n", best,
                reps, text.size() / 1e6 / best, paragraphs.size(), all.size(),
                static_cast<unsigned long long>(fnv1a_ids(all)));
    if (argc > 4 && std::string(argv[4]) == "--no-runs") return 0;
    // BUG-31 runs: 1M repeats of one character (the same list as tools/golden_tokenizer.py RUNS).
    for (auto [unit, repeat] : {std::pair<std::string, int>{"^", 1000000},
                                {"a", 1000000},
                                {" ", 1000000},
                                {"\n", 1000000},
                                {"1", 1000000},
                                {"\xF0\x9F\x91\x8D", 1000000},
                                {"a ", 500000},
                                {"\xE4\xB8\xAD", 1000000},
                                {"\xC2\xA0", 1000000}}) {
        std::string run;
        for (int i = 0; i < repeat; ++i) run += unit;
        auto s = std::chrono::steady_clock::now();
        auto out = (*tok)->encode(run, SpecialTokens::kRecognise);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
        if (!out) {
            std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
            return 1;
        }
        std::printf("run %-12s x %7d: %.4f s, %zu ids, fnv1a %016llx\n", unit == "\n" ? "\\n" : unit.c_str(),
                    repeat, dt, out->size(), static_cast<unsigned long long>(fnv1a_ids(*out)));
    }
    return 0;
}
