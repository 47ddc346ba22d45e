#pragma once
// Typed access to JSON config fields that records every problem in core::Diagnostics with
// its JSON pointer: what the topology and scenario readers share.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wanlab/core/diagnostics.hpp"

namespace wanlab::core::fields {

using Keys = std::span<const std::string_view>;

/// RFC 6901 child pointers: "/model" + "layers" -> "/model/layers".
std::string child(const std::string& path, std::string_view key);
std::string child(const std::string& path, std::size_t index);

std::string join(std::span<const std::string> items, std::string_view sep = ", ");
std::string join(Keys items, std::string_view sep = ", ");

/// What a value is, for "expected X, got Y": "number 68", "string \"x\"", "an object".
std::string describe(const nlohmann::json& v);

/// The known word an unknown one was probably meant to be ("micro_batch" ->
/// "micro_batches"), or "".
std::string_view closest(std::string_view word, Keys known);
/// " (did you mean \"x\"?)" or "".
std::string did_you_mean(std::string_view word, Keys known);

const nlohmann::json* find(const nlohmann::json& obj, std::string_view key);

/// Reports every key of `obj` not in `known`, with a suggestion.
void check_keys(const nlohmann::json& obj, const std::string& path, Keys known, core::Diagnostics& d);

bool is_object(const nlohmann::json& v, const std::string& path, std::string_view what, core::Diagnostics& d);
std::optional<std::string> as_string(const nlohmann::json& v, const std::string& path, std::string_view what,
                                     core::Diagnostics& d);
std::optional<bool> as_bool(const nlohmann::json& v, const std::string& path, core::Diagnostics& d);
/// An integer in lo..hi; reports "expected an integer" or "N is outside lo..hi: why".
std::optional<std::int64_t> as_integer(const nlohmann::json& v, const std::string& path, std::int64_t lo,
                                       std::int64_t hi, std::string_view why, core::Diagnostics& d);
std::optional<std::uint64_t> as_unsigned(const nlohmann::json& v, const std::string& path, core::Diagnostics& d);
/// A number in (0, 1].
std::optional<double> as_fraction(const nlohmann::json& v, const std::string& path, std::string_view why,
                                  core::Diagnostics& d);
/// A number in [lo, hi]; reports "expected a number" or "X is outside lo..hi: why".
std::optional<double> as_number(const nlohmann::json& v, const std::string& path, double lo, double hi,
                                std::string_view why, core::Diagnostics& d);
/// One of `known`; reports the choices and a suggestion otherwise.
std::optional<std::string> as_choice(const nlohmann::json& v, const std::string& path, std::string_view what,
                                     Keys known, core::Diagnostics& d);

/// Reads and parses a JSON file; on failure records "cannot read the file: ..." or
/// "invalid JSON at line L, column C (byte B): ..." and throws the ConfigError.
nlohmann::json read_document(const std::string& file, core::Diagnostics& d);

}  // namespace wanlab::core::fields
