#pragma once
// "Did you mean": the known word nearest to what the user typed.
#include <optional>
#include <string>
#include <vector>

namespace wanlab::cli {

/// Edit distance (insertions, deletions, substitutions, and swaps of neighbours each count 1).
std::size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate nearest to `word`, if it is close enough to be a typo (at most 1 edit for
/// words up to 4 characters, else 2), or if `word` is a prefix of exactly one candidate.
std::optional<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace wanlab::cli
