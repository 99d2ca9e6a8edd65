#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace volt::io {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;  // the safetensors library's own limit

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

std::string shape_to_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string TensorInfo::shape_string() const { return shape_to_string(shape); }

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return not_found("safetensors file " + path + " does not exist");
        return internal_error("cannot open " + path + ": " + std::strerror(errno));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        Status s = internal_error("cannot stat " + path + ": " + std::strerror(errno));
        ::close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return invalid_argument(path + " is not a regular file");
    }
    f->size_ = st.st_size;
    if (f->size_ < 8) {
        ::close(fd);
        return data_loss(path + ": truncated: the file is " + std::to_string(f->size_) +
                         " bytes, shorter than the 8-byte header size");
    }
    void* p = ::mmap(nullptr, static_cast<size_t>(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED) return internal_error("cannot mmap " + path + ": " + std::strerror(errno));
    f->base_ = static_cast<const uint8_t*>(p);
    VOLT_RETURN_IF_ERROR(f->parse_header());
    return f;
}

SafetensorsFile::~SafetensorsFile() {
    if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), static_cast<size_t>(size_));
}

Status SafetensorsFile::parse_header() {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base_[i];
    if (header_len > static_cast<uint64_t>(size_ - 8)) {
        return data_loss(path_ + ": header size " + std::to_string(header_len) +
                         " runs past the end of the " + std::to_string(size_) +
                         "-byte file (truncated, or not a safetensors file)");
    }
    if (static_cast<int64_t>(header_len) > kMaxHeaderBytes) {
        return data_loss(path_ + ": header size " + std::to_string(header_len) +
                         " is over the 100 MiB limit");
    }
    const char* text = reinterpret_cast<const char*>(base_ + 8);
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text, text + header_len);
    } catch (const nlohmann::json::exception& e) {
        return data_loss(path_ + ": bad header: not valid JSON (" + e.what() + ")");
    }
    if (!header.is_object()) return data_loss(path_ + ": bad header: the JSON is not an object");

    const int64_t data_start = 8 + static_cast<int64_t>(header_len);
    const int64_t data_size = size_ - data_start;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const nlohmann::json& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) return data_loss(path_ + ": bad header: __metadata__ is not an object");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    return data_loss(path_ + ": bad header: __metadata__ value " + quoted(m.key()) +
                                     " is not a string");
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = path_ + ": tensor " + name;
        if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
            return data_loss(where + ": bad header entry: needs dtype, shape and data_offsets");
        TensorInfo t;
        t.name = name;
        if (!v["dtype"].is_string()) return data_loss(where + ": bad header entry: dtype is not a string");
        const std::string dtype = v["dtype"].get<std::string>();
        if (!parse_dtype(dtype, &t.dtype))
            return invalid_argument(where + ": unknown or unsupported dtype " + quoted(dtype));
        if (!v["shape"].is_array()) return data_loss(where + ": bad header entry: shape is not an array");
        int64_t nbytes = dtype_size(t.dtype);
        for (const auto& d : v["shape"]) {
            if (!d.is_number_unsigned())
                return data_loss(where + ": bad header entry: shape " + v["shape"].dump() +
                                 " has a dimension that is not a non-negative integer");
            const uint64_t dim = d.get<uint64_t>();
            if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                (dim > 0 && nbytes > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(dim)))
                return data_loss(where + ": bad header entry: shape " + v["shape"].dump() + " is too large");
            t.shape.push_back(static_cast<int64_t>(dim));
            nbytes *= static_cast<int64_t>(dim);
        }
        const auto& off = v["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
            !off[1].is_number_unsigned())
            return data_loss(where + ": bad header entry: data_offsets is not [begin, end]");
        const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
        if (end < begin || end - begin != static_cast<uint64_t>(nbytes))
            return data_loss(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") do not hold the " + std::to_string(nbytes) + " bytes of " + dtype + " " +
                             t.shape_string());
        if (end > static_cast<uint64_t>(data_size))
            return data_loss(where + ": data [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") runs past the end of the " + std::to_string(data_size) +
                             "-byte data section: file truncated");
        t.nbytes = nbytes;
        t.file_offset = data_start + static_cast<int64_t>(begin);
        t.data = base_ + t.file_offset;
        tensors_.push_back(std::move(t));
    }

    // Payloads must tile the data section: sorted by offset, each starts where the previous ended.
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
    });
    int64_t expected = data_start;
    const TensorInfo* prev = nullptr;
    for (const TensorInfo& t : tensors_) {
        if (t.file_offset < expected)
            return data_loss(path_ + ": tensor " + t.name + " overlaps tensor " + prev->name +
                             " (data_offsets begin " + std::to_string(t.file_offset - data_start) +
                             " < previous end " + std::to_string(expected - data_start) + ")");
        if (t.file_offset > expected)
            return data_loss(path_ + ": tensor " + t.name + ": gap of " +
                             std::to_string(t.file_offset - expected) +
                             " bytes before its data (offsets must be contiguous)");
        expected = t.file_offset + t.nbytes;
        prev = &t;
    }
    if (expected != size_)
        return data_loss(path_ + ": " + std::to_string(size_ - expected) +
                         " bytes after the last tensor's data (offsets must cover the data section)");
    for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
    return Status::ok();
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::prefetch(int64_t offset, int64_t n) const {
    static const int64_t page = ::sysconf(_SC_PAGESIZE);
    const int64_t begin = std::max<int64_t>(0, offset) / page * page;
    const int64_t end = std::min(size_, offset + n);
    if (end > begin)
        ::madvise(const_cast<uint8_t*>(base_) + begin, static_cast<size_t>(end - begin), MADV_WILLNEED);
}

Status SafetensorsCheckpoint::add_file(std::unique_ptr<SafetensorsFile> file) {
    const size_t index = files_.size();
    for (const TensorInfo& t : file->tensors()) {
        auto [it, inserted] = by_name_.emplace(t.name, std::make_pair(index, &t));
        if (!inserted)
            return data_loss("tensor " + t.name + " is in two files: " + files_[it->second.first]->path() +
                             " and " + file->path());
    }
    files_.push_back(std::move(file));
    return Status::ok();
}

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open(const std::string& path) {
    std::unique_ptr<SafetensorsCheckpoint> c(new SafetensorsCheckpoint());
    c->path_ = path;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return not_found("checkpoint path " + path + " does not exist");
    if (fs::is_regular_file(st)) {
        VOLT_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(path));
        VOLT_RETURN_IF_ERROR(c->add_file(std::move(f)));
        return c;
    }
    if (!fs::is_directory(st))
        return invalid_argument("checkpoint path " + path + " is not a file or directory");

    const fs::path dir(path);
    const fs::path index_path = dir / "model.safetensors.index.json";
    if (fs::exists(index_path, ec)) {
        const std::string ip = index_path.string();
        std::ifstream in(index_path, std::ios::binary);
        if (!in) return internal_error("cannot read " + ip);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        nlohmann::json index;
        try {
            index = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            return data_loss(ip + ": not valid JSON (" + e.what() + ")");
        }
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            return data_loss(ip + ": no \"weight_map\" object");
        // shard file -> the tensors the index puts there; std::map gives a stable shard order.
        std::map<std::string, std::vector<std::string>> shards;
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                return data_loss(ip + ": weight_map entry for tensor " + it.key() + " is not a file name");
            const std::string file = it.value().get<std::string>();
            const fs::path rel(file);
            if (file.empty() || rel.is_absolute() ||
                std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }))
                return data_loss(ip + ": weight_map names " + quoted(file) + " for tensor " + it.key() +
                                 ": shard paths must stay inside the checkpoint directory");
            shards[file].push_back(it.key());
        }
        if (shards.empty()) return data_loss(ip + ": weight_map is empty");
        for (const auto& [file, names] : shards) {
            const std::string shard_path = (dir / file).string();
            if (!fs::exists(shard_path, ec))
                return not_found("shard " + shard_path + " named by " + ip + " (for tensor " + names.front() +
                                 ") is missing");
            VOLT_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(shard_path));
            for (const std::string& name : names) {
                if (f->find(name) == nullptr)
                    return data_loss(ip + " maps tensor " + name + " to " + shard_path +
                                     ", which does not hold it");
            }
            VOLT_RETURN_IF_ERROR(c->add_file(std::move(f)));
        }
        return c;
    }

    const fs::path single = dir / "model.safetensors";
    if (fs::exists(single, ec)) {
        VOLT_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(single.string()));
        VOLT_RETURN_IF_ERROR(c->add_file(std::move(f)));
        return c;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path().string());
    }
    if (found.empty())
        return not_found("no model.safetensors.index.json, model.safetensors or *.safetensors in " + path);
    std::sort(found.begin(), found.end());
    for (const std::string& p : found) {
        VOLT_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(p));
        VOLT_RETURN_IF_ERROR(c->add_file(std::move(f)));
    }
    return c;
}

const TensorInfo* SafetensorsCheckpoint::find(std::string_view name, const SafetensorsFile** file) const {
    auto it = by_name_.find(std::string(name));
    if (it == by_name_.end()) return nullptr;
    if (file != nullptr) *file = files_[it->second.first].get();
    return it->second.second;
}

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
    std::vector<std::string> names;
    names.reserve(by_name_.size());
    for (const auto& [name, _] : by_name_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
}

int64_t SafetensorsCheckpoint::total_bytes() const {
    int64_t n = 0;
    for (const auto& f : files_)
        for (const auto& t : f->tensors()) n += t.nbytes;
    return n;
}

}  // namespace volt::io
