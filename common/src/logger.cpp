#include "wanlab/common/logger.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace wanlab {

spdlog::logger& named_logger(const std::string& name) {
  if (auto existing = spdlog::get(name)) return *existing;
  try {
    return *spdlog::stderr_color_mt(name);
  } catch (const spdlog::spdlog_ex&) {
    return *spdlog::get(name);  // registered by another thread meanwhile
  }
}

}  // namespace wanlab
