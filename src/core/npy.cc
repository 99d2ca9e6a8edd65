#include "core/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

namespace volt {

int64_t NpyArray::numel() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
}

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    int64_t n = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
        if (i + 1 < shape.size()) dict += " ";
        n *= shape[i];
    }
    dict += "), }";
    // Magic (6) + version (2) + header length (2) + dict + padding + '\n' is a multiple of 64.
    size_t total = 10 + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    dict += '\n';
    std::ofstream f(path, std::ios::binary);
    if (!f) return internal_error("cannot write " + path);
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    f.write(magic, 8);
    const uint16_t hlen = static_cast<uint16_t>(dict.size());
    const char len_le[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
    f.write(len_le, 2);
    f.write(dict.data(), static_cast<std::streamsize>(dict.size()));
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
    if (!f) return internal_error("short write to " + path);
    return Status::ok();
}

Result<NpyArray> read_npy(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return not_found("cannot open " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string s = ss.str();
    if (s.size() < 10 || s.compare(0, 6, "\x93NUMPY") != 0)
        return invalid_argument(path + ": not a .npy file");
    const int major = static_cast<uint8_t>(s[6]);
    size_t hlen, off;
    if (major == 1) {
        hlen = static_cast<uint8_t>(s[8]) | (static_cast<size_t>(static_cast<uint8_t>(s[9])) << 8);
        off = 10;
    } else {
        if (s.size() < 12) return invalid_argument(path + ": truncated .npy header");
        hlen = 0;
        for (int i = 0; i < 4; ++i) hlen |= static_cast<size_t>(static_cast<uint8_t>(s[8 + i])) << (8 * i);
        off = 12;
    }
    if (off + hlen > s.size()) return invalid_argument(path + ": truncated .npy header");
    const std::string header = s.substr(off, hlen);
    std::smatch m;
    NpyArray a;
    if (!std::regex_search(header, m, std::regex("'descr':\\s*'([<|][fi]4)'")))
        return invalid_argument(path + ": only <f4 and <i4 arrays are supported: " + header);
    a.dtype = m[1];
    if (a.dtype == "|i4") a.dtype = "<i4";
    if (header.find("'fortran_order': False") == std::string::npos)
        return invalid_argument(path + ": Fortran-order arrays are not supported");
    if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
        return invalid_argument(path + ": no shape in header");
    std::string dims = m[1];
    std::regex num("[0-9]+");
    for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
        a.shape.push_back(std::stoll(it->str()));
    const size_t bytes = static_cast<size_t>(a.numel()) * 4;
    if (off + hlen + bytes != s.size())
        return invalid_argument(path + ": payload size does not match the shape");
    a.data.assign(s.begin() + static_cast<std::ptrdiff_t>(off + hlen), s.end());
    return a;
}

}  // namespace volt
