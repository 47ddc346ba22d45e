#include "wanlab/core/diagnostics.hpp"

#include <fmt/format.h>

namespace wanlab::core {
namespace {
std::string join(const std::vector<Diagnostic>& ds) {
  std::string out = fmt::format("{} problem{} found:", ds.size(), ds.size() == 1 ? "" : "s");
  for (const auto& d : ds) out += "\n  " + d.to_string();
  return out;
}
}  // namespace

std::string Diagnostic::to_string() const {
  if (path.empty()) return fmt::format("{}: {}", file, reason);
  return fmt::format("{}: {}: {}", file, path, reason);
}

void Diagnostics::throw_if_any() const {
  if (!items_.empty()) throw ConfigError(items_);
}

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : std::runtime_error(join(diagnostics)), diagnostics_(std::move(diagnostics)) {}

}  // namespace wanlab::core
