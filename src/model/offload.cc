#include "model/offload.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "io/progress.h"
#include "ops/host_experts.h"

namespace volt::model {

namespace {

int64_t vector_bytes(const ops::VectorWeight& v) {
    return v.data == nullptr ? 0 : v.n * (v.format == ops::Format::kF32 ? 4 : 2);
}

int64_t projection_bytes(const ops::ExpertWeights& w) {
    const int64_t elems = w.num_experts * w.out * w.in;
    const int64_t data = w.format == ops::Format::kMxfp4 ? elems / 2 + elems / 32
                                                         : elems * (w.format == ops::Format::kF32 ? 4 : 2);
    return data + vector_bytes(w.bias);
}

bool all_digits(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

Status bad(const std::string& value, const std::string& why) {
    return invalid_argument("--cpu-offload-experts " + value + ": " + why);
}

// "3" -> 3; false when not a decimal number of at most 9 digits.
bool parse_index(const std::string& s, int64_t* out) {
    if (!all_digits(s) || s.size() > 9) return false;
    *out = std::stoll(s);
    return true;
}

}  // namespace

int64_t OffloadPlan::count() const {
    int64_t n = 0;
    for (bool b : layers) n += b;
    return n;
}

std::string OffloadPlan::describe() const {
    if (!any()) return "no expert offload";
    // Layer list as ranges: 0,2,20-23.
    std::string list;
    const auto L = static_cast<int64_t>(layers.size());
    for (int64_t l = 0; l < L;) {
        if (!layers[l]) {
            ++l;
            continue;
        }
        int64_t e = l;
        while (e + 1 < L && layers[e + 1]) ++e;
        if (!list.empty()) list += ",";
        list += e == l ? std::to_string(l) : std::to_string(l) + "-" + std::to_string(e);
        l = e + 1;
    }
    return "experts of " + std::to_string(count()) + " of " + std::to_string(L) +
           " layers in host memory (layers " + list + ", " +
           io::format_bytes(static_cast<double>(host_bytes)) + ")";
}

int64_t expert_bytes(const LayerWeights& layer) {
    return projection_bytes(layer.gate_up) + projection_bytes(layer.down);
}

Result<OffloadPlan> plan_offload(const ModelWeights& w, const OffloadRequest& r) {
    const int64_t L = w.config.num_hidden_layers;
    OffloadPlan plan;
    plan.layers.assign(L, false);
    const std::string& v = r.experts;
    if (!v.empty() && r.gib != 0.0)
        return invalid_argument("give --cpu-offload-experts or --cpu-offload-gb, not both");
    if (!(r.gib >= 0.0) || !std::isfinite(r.gib))
        return invalid_argument("--cpu-offload-gb " + std::to_string(r.gib) + ": must be a size >= 0 in GiB");
    const std::string Ls = std::to_string(L);
    if (v.empty() && r.gib == 0.0) return plan;
    if (r.gib > 0.0) {
        const auto want = static_cast<int64_t>(std::ceil(r.gib * 1073741824.0));
        int64_t have = 0;
        for (int64_t l = L - 1; l >= 0 && have < want; --l) {
            plan.layers[l] = true;
            have += expert_bytes(w.layers[l]);
        }
    } else if (v == "all") {
        plan.layers.assign(L, true);
    } else if (v[0] == '-') {
        return bad(v, "must be a number of layers >= 0, `all`, or a list of layer indices");
    } else if (all_digits(v)) {
        int64_t n = 0;
        if (!parse_index(v, &n) || n > L)
            return bad(v, "the model has " + Ls + " layers (give at most " + Ls + ", or `all`)");
        for (int64_t l = L - n; l < L; ++l) plan.layers[l] = true;
    } else {
        size_t start = 0;
        while (start <= v.size()) {
            const size_t comma = std::min(v.find(',', start), v.size());
            const std::string item = v.substr(start, comma - start);
            start = comma + 1;
            int64_t lo = 0, hi = 0;
            const size_t dash = item.find('-');
            bool ok;
            if (dash == std::string::npos) {
                ok = parse_index(item, &lo);
                hi = lo;
            } else {
                ok = parse_index(item.substr(0, dash), &lo) && parse_index(item.substr(dash + 1), &hi);
            }
            if (!ok)
                return bad(v, "`" + item +
                                  "` is not a layer index or range (a list reads 0,5,20-23; a bare number "
                                  "is a count of last layers)");
            if (lo > hi) return bad(v, "the range " + item + " runs backwards");
            if (hi >= L)
                return bad(v, "layer " + std::to_string(hi) + " does not exist (layers 0.." +
                                  std::to_string(L - 1) + ")");
            for (int64_t l = lo; l <= hi; ++l) {
                if (plan.layers[l]) return bad(v, "layer " + std::to_string(l) + " is named twice");
                plan.layers[l] = true;
            }
            if (comma == v.size()) break;
        }
    }
    for (int64_t l = 0; l < L; ++l)
        if (plan.layers[l]) {
            plan.host_bytes += expert_bytes(w.layers[l]);
            plan.staging_bytes = std::max(
                plan.staging_bytes, ops::expert_staging_layout(w.layers[l].gate_up, w.layers[l].down).bytes);
        }
    return plan;
}

}  // namespace volt::model
