// Logging goes through spdlog (Debian libspdlog-dev): `spdlog::info("loaded {} tensors", n)`.
// init_logging sets the process-wide format and level once, from tools/ only.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace volt {

// level: "trace", "debug", "info", "warning", "error"; unknown names mean "info".
void init_logging(std::string_view level);

}  // namespace volt
