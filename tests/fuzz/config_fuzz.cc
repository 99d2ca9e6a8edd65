// libFuzzer: config.json (model/config.cc): any JSON text -> parse_config gives a config or an error,
// never a crash or UB (numbers of any size and type in every field).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
    if (j.is_discarded()) return 0;
    (void)volt::model::parse_config(j, "fuzz/config.json");
    return 0;
}
