#include "wanlab/common/version.hpp"

#include <sys/utsname.h>

#include <fmt/format.h>

namespace wanlab {
namespace detail {
extern const char* const kVersion;  // generated: cmake/version_info.cmake
extern const char* const kCommit;
}  // namespace detail

std::string_view version() { return detail::kVersion; }
std::string_view commit() { return detail::kCommit; }

std::string kernel_release() {
  utsname u{};
  if (::uname(&u) != 0) return "unknown";
  return u.release;
}

std::string version_line() { return fmt::format("wanlab {} (commit {})", version(), commit()); }

nlohmann::json build_info() {
  return {{"version", std::string(version())}, {"commit", std::string(commit())}, {"kernel", kernel_release()}};
}

}  // namespace wanlab
