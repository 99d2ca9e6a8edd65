// Offline model resolution in the Hugging Face cache; see model_path.h.
#include "io/model_path.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace volt::io {
namespace fs = std::filesystem;

namespace {

std::string env_get(const ModelPathOptions& o, const std::string& key) {
    auto it = o.env.find(key);
    return it == o.env.end() ? std::string() : it->second;
}

bool is_dir(const fs::path& p) {
    std::error_code ec;
    return fs::is_directory(p, ec);
}

std::string read_trimmed(const fs::path& p) {
    std::ifstream in(p);
    std::string s;
    std::getline(in, s);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
}

bool looks_like_repo_id(const std::string& m) {
    size_t slash = m.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == m.size()) return false;
    if (m.find('/', slash + 1) != std::string::npos) return false;
    return m[0] != '.' && m.find("..") == std::string::npos;
}

}  // namespace

std::map<std::string, std::string> model_path_environment() {
    std::map<std::string, std::string> env;
    for (const char* key : {"HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"}) {
        if (const char* v = std::getenv(key)) env[key] = v;
    }
    return env;
}

std::vector<std::string> hub_cache_roots(const ModelPathOptions& options) {
    std::vector<std::string> roots;
    if (!options.download_dir.empty()) roots.push_back(options.download_dir);
    if (std::string v = env_get(options, "HF_HUB_CACHE"); !v.empty()) {
        roots.push_back(v);
    } else if (std::string h = env_get(options, "HF_HOME"); !h.empty()) {
        roots.push_back((fs::path(h) / "hub").string());
    } else if (std::string x = env_get(options, "XDG_CACHE_HOME"); !x.empty()) {
        roots.push_back((fs::path(x) / "huggingface" / "hub").string());
    } else if (std::string home = env_get(options, "HOME"); !home.empty()) {
        roots.push_back((fs::path(home) / ".cache" / "huggingface" / "hub").string());
    }
    return roots;
}

Result<std::string> resolve_model_path(const std::string& model, const ModelPathOptions& options) {
    if (model.empty()) return invalid_argument("--model is empty");
    if (is_dir(model)) return fs::absolute(model).lexically_normal().string();
    if (!looks_like_repo_id(model)) {
        return not_found("model '" + model + "': no such directory (" + fs::absolute(model).string() +
                         "), and not a Hugging Face id of the form org/name");
    }
    const std::string org = model.substr(0, model.find('/'));
    const std::string name = model.substr(model.find('/') + 1);
    const std::string repo_dir = "models--" + org + "--" + name;

    std::vector<std::string> looked = {fs::absolute(model).string()};
    for (const std::string& root : hub_cache_roots(options)) {
        fs::path repo = fs::path(root) / repo_dir;
        fs::path snapshots = repo / "snapshots";
        fs::path ref = repo / "refs" / options.revision;
        std::error_code ec;
        if (fs::is_regular_file(ref, ec)) {
            std::string sha = read_trimmed(ref);
            fs::path snap = snapshots / sha;
            if (!sha.empty() && is_dir(snap)) return snap.string();
            looked.push_back(snap.string() + " (from " + ref.string() + ")");
            continue;
        }
        fs::path direct = snapshots / options.revision;
        if (is_dir(direct)) return direct.string();
        if (options.revision == "main" && is_dir(snapshots)) {
            // No refs/main (a cache copied by hand): the only snapshot, else the newest.
            fs::path best;
            fs::file_time_type best_t{};
            for (const auto& e : fs::directory_iterator(snapshots, ec)) {
                if (!e.is_directory()) continue;
                auto t = fs::last_write_time(e.path(), ec);
                if (best.empty() || t > best_t) {
                    best = e.path();
                    best_t = t;
                }
            }
            if (!best.empty()) return best.string();
        }
        looked.push_back(snapshots.string() + " (revision " + options.revision + ")");
    }
    std::string msg = "model '" + model + "' not found offline; looked in:";
    for (const std::string& l : looked) msg += "\n  " + l;
    msg += "\nnothing is downloaded: fetch it first (huggingface-cli download " + model +
           ") or pass the checkpoint directory";
    return not_found(msg);
}

}  // namespace volt::io
