#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace volt {

void init_logging(std::string_view level) {
    auto logger = spdlog::stderr_color_mt("voltllm");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("%^%L%$ %Y-%m-%d %H:%M:%S.%e %v");
    auto lvl = spdlog::level::from_str(std::string(level == "warning" ? "warn" : level));
    spdlog::set_level(lvl == spdlog::level::off && level != "off" ? spdlog::level::info : lvl);
}

}  // namespace volt
