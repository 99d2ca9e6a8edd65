#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

namespace volt::io {

namespace {

Result<int64_t> payload_bytes(const TensorToWrite& t) {
    int64_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) {
        if (d < 0) return invalid_argument("tensor " + t.name + ": negative dimension " + std::to_string(d));
        n *= d;
    }
    if (n > 0 && t.data == nullptr)
        return invalid_argument("tensor " + t.name + ": null data for " + std::to_string(n) + " bytes");
    return n;
}

Status check_names(const std::vector<TensorToWrite>& tensors) {
    std::set<std::string> seen;
    for (const auto& t : tensors) {
        if (t.name.empty()) return invalid_argument("tensor with an empty name");
        if (t.name == "__metadata__") return invalid_argument("tensor name __metadata__ is reserved");
        if (!seen.insert(t.name).second) return invalid_argument("duplicate tensor name " + t.name);
    }
    return Status::ok();
}

std::string os_error(const std::string& what, const std::string& path) {
    return what + " " + path + ": " + std::strerror(errno);
}

// Writes all of `n` bytes, retrying short writes.
bool write_all(int fd, const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
        ssize_t w = ::write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        c += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

// Writes the byte chunks to `path` through a temp file in the same directory, then renames.
Status write_file_atomically(const std::string& path,
                             const std::vector<std::pair<const void*, size_t>>& parts) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return internal_error(os_error("cannot create", tmp));
    for (const auto& [p, n] : parts) {
        if (!write_all(fd, p, n)) {
            Status s = internal_error(os_error("cannot write", tmp));
            ::close(fd);
            ::unlink(tmp.c_str());
            return s;
        }
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        Status s = internal_error(os_error("cannot flush", tmp));
        ::unlink(tmp.c_str());
        return s;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        Status s = internal_error(os_error("cannot rename " + tmp + " to", path));
        ::unlink(tmp.c_str());
        return s;
    }
    return Status::ok();
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
    VOLT_RETURN_IF_ERROR(check_names(tensors));
    // ordered_json keeps the header in payload order, which makes files easy to inspect.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        header["__metadata__"] = m;
    }
    std::vector<std::pair<const void*, size_t>> parts;
    int64_t offset = 0;
    for (const auto& t : tensors) {
        VOLT_ASSIGN_OR_RETURN(int64_t n, payload_bytes(t));
        header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + n}}};
        if (n > 0) parts.emplace_back(t.data, static_cast<size_t>(n));
        offset += n;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t len_le[8];
    for (int i = 0; i < 8; ++i)
        len_le[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    parts.insert(parts.begin(), {{len_le, 8}, {text.data(), text.size()}});
    return write_file_atomically(path, parts);
}

std::string shard_file_name(int index, int num_shards) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index, num_shards - 1);
    return buf;
}

Status write_sharded_safetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                 int64_t max_shard_bytes) {
    if (max_shard_bytes <= 0) return invalid_argument("max_shard_bytes must be positive");
    VOLT_RETURN_IF_ERROR(check_names(tensors));
    // Group tensors into shards first: the file names need the shard count.
    std::vector<std::vector<TensorToWrite>> shards;
    int64_t current = 0, total = 0;
    for (const auto& t : tensors) {
        VOLT_ASSIGN_OR_RETURN(int64_t n, payload_bytes(t));
        if (shards.empty() || (current > 0 && current + n > max_shard_bytes)) {
            shards.emplace_back();
            current = 0;
        }
        shards.back().push_back(t);
        current += n;
        total += n;
    }
    if (shards.empty()) shards.emplace_back();  // an empty model still gets one (empty) shard

    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return internal_error("cannot create directory " + dir + ": " + ec.message());

    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    const int num_shards = static_cast<int>(shards.size());
    for (int s = 0; s < num_shards; ++s) {
        const std::string name = shard_file_name(s, num_shards);
        VOLT_RETURN_IF_ERROR(write_safetensors(dir + "/" + name, shards[s], {{"format", "pt"}}));
        for (const auto& t : shards[s]) weight_map[t.name] = name;
    }
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    return write_file_atomically(dir + "/model.safetensors.index.json", {{text.data(), text.size()}});
}

}  // namespace volt::io
