#pragma once
// What built this program: the project's version, its git commit, and the kernel it runs on.
// Results carry them (summary.json, bench.json) so a figure can be traced to its code.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace wanlab {

/// CMake's project VERSION, e.g. "0.1.0".
std::string_view version();
/// The git commit the build was made from, 12 hex digits, "-dirty" when tracked files had
/// changes; "unknown" when built outside a git checkout.
std::string_view commit();
/// The running kernel's release (uname -r), e.g. "6.1.0-18-amd64"; "unknown" if uname fails.
std::string kernel_release();
/// "wanlab 0.1.0 (commit 48b91e8c1a2b)".
std::string version_line();
/// {"version": ..., "commit": ..., "kernel": ...}.
nlohmann::json build_info();

}  // namespace wanlab
