#include "core/paths.h"

#include <filesystem>
#include <vector>

namespace volt {

namespace fs = std::filesystem;

std::string executable_path() {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : p.string();
}

namespace {
std::vector<fs::path> data_roots() {
    std::vector<fs::path> roots;
    fs::path exe = executable_path();
    if (exe.empty()) return roots;
    fs::path dir = exe.parent_path();
    roots.push_back(dir / ".." / "share" / "voltllm");
    roots.push_back(dir / "..");
    roots.push_back(dir / ".." / "..");
    return roots;
}
}  // namespace

std::optional<std::string> find_data_path(const std::string& relative) {
    for (const auto& r : data_roots()) {
        std::error_code ec;
        fs::path p = r / relative;
        if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
    }
    return std::nullopt;
}

std::string default_models_dir() {
    // The source tree is recognised by its package.json; an install by share/voltllm.
    for (const auto& r : data_roots()) {
        std::error_code ec;
        if (fs::exists(r / "package.json", ec) || r.filename() == "voltllm")
            return fs::weakly_canonical(r / "models", ec).string();
    }
    return (fs::path(executable_path()).parent_path() / "models").string();
}

}  // namespace volt
