// Flag spelling pre-pass and token-count parsing; see serve_options.h.
#include "server/serve_options.h"

#include <cctype>
#include <limits>

namespace volt::server {

std::vector<std::string> normalize_flag_spelling(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    out.reserve(args.size());
    bool rest_positional = false;
    for (const std::string& a : args) {
        if (rest_positional || a.size() < 3 || a[0] != '-' || a[1] != '-') {
            if (a == "--") rest_positional = true;
            out.push_back(a);
            continue;
        }
        std::string b = a;
        size_t name_end = b.find('=');
        if (name_end == std::string::npos) name_end = b.size();
        for (size_t i = 2; i < name_end; ++i) {
            if (b[i] == '_') b[i] = '-';
        }
        out.push_back(std::move(b));
    }
    return out;
}

Result<int64_t> parse_token_count(std::string_view text, std::string_view flag) {
    auto bad = [&](const char* why) {
        return invalid_argument(
            std::string(flag) + ": '" + std::string(text) + "' " + why +
            " (expected an integer, a number with k/m/g (x1000) or K/M/G (x1024), or auto)");
    };
    if (text.size() == 4) {
        std::string lower;
        for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (lower == "auto") return int64_t{0};
    }
    if (text.empty()) return bad("is empty");
    int64_t multiplier = 1;
    std::string_view digits = text;
    switch (text.back()) {
        case 'k':
            multiplier = 1000;
            break;
        case 'm':
            multiplier = 1000 * 1000;
            break;
        case 'g':
            multiplier = 1000 * 1000 * 1000;
            break;
        case 'K':
            multiplier = 1024;
            break;
        case 'M':
            multiplier = 1024 * 1024;
            break;
        case 'G':
            multiplier = 1024 * 1024 * 1024;
            break;
        default:
            break;
    }
    if (multiplier != 1) digits.remove_suffix(1);
    if (digits.empty()) return bad("has no number");
    int64_t value = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') return bad("is not a token count");
        if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) return bad("is too large");
        value = value * 10 + (c - '0');
    }
    if (value > std::numeric_limits<int64_t>::max() / multiplier) return bad("is too large");
    return value * multiplier;
}

}  // namespace volt::server
