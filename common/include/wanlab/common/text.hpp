#pragma once
// Text helpers shared by the config readers.
#include <cstddef>
#include <string_view>

namespace wanlab {

/// Levenshtein distance, for "did you mean" suggestions on unknown keys.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace wanlab
