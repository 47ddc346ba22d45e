#pragma once
// Text helpers shared by the config readers.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace wanlab {

/// Levenshtein distance, for "did you mean" suggestions on unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// Appends a whole file to `out`. Returns "" on success, else the OS reason (a folder is
/// refused as "Is a directory (a folder, not a file)").
std::string read_file(const std::filesystem::path& file, std::string& out);

/// The time now in ISO 8601 UTC: "2026-11-21T08:36:28Z", or with milliseconds
/// "2026-11-21T08:36:28.125Z".
std::string utc_timestamp(bool milliseconds = false);

}  // namespace wanlab
