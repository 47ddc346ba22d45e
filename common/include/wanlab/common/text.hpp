#pragma once
// Text helpers shared by the config readers.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace wanlab {

/// Levenshtein distance, for "did you mean" suggestions on unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The most read_file reads: config files and traces are far smaller.
inline constexpr std::size_t kMaxReadFile = std::size_t{512} << 20;

/// Appends a whole file to `out`. Returns "" on success, else the reason: the OS's, a folder
/// ("Is a directory (a folder, not a file)"), a file that is not a regular one (a device or
/// a pipe, which could be read forever) or one over kMaxReadFile.
std::string read_file(const std::filesystem::path& file, std::string& out);

/// The time now in ISO 8601 UTC: "2026-11-21T08:36:28Z", or with milliseconds
/// "2026-11-21T08:36:28.125Z".
std::string utc_timestamp(bool milliseconds = false);

}  // namespace wanlab
