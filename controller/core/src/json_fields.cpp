#include "wanlab/core/json_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "wanlab/common/printable.hpp"
#include "wanlab/common/text.hpp"

namespace wanlab::core::fields {
using nlohmann::json;

std::string child(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string child(const std::string& path, std::size_t index) {
  return fmt::format("{}/{}", path, index);
}

namespace {
template <class Range>
std::string join_range(const Range& items, std::string_view sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}
}  // namespace

std::string join(std::span<const std::string> items, std::string_view sep) {
  return join_range(items, sep);
}
std::string join(Keys items, std::string_view sep) {
  return join_range(items, sep);
}

std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return fmt::format("boolean {}", v.dump());
    case json::value_t::string: {
      auto s = v.dump();
      if (s.size() > 40) s = s.substr(0, 36) + "...\"";
      return "string " + s;
    }
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return "number " + v.dump();
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return fmt::format("an array of {} element{}", v.size(), v.size() == 1 ? "" : "s");
    default:
      return "a binary value";
  }
}

std::string_view closest(std::string_view word, Keys known) {
  auto word_prefix = [](std::string_view longer, std::string_view shorter) {
    return shorter.size() >= 3 && longer.size() > shorter.size() && longer.starts_with(shorter) &&
           !std::isalnum(static_cast<unsigned char>(longer[shorter.size()]));
  };
  std::string_view best;
  std::size_t best_distance = 0;
  for (auto k : known) {
    // A word prefix ("seq" for "seq_len") counts as one edit; otherwise a typo of at most 2
    // edits (1 for short words, where 2 edits would match almost anything).
    const std::size_t dist = word_prefix(word, k) || word_prefix(k, word) ? 1 : edit_distance(word, k);
    const std::size_t limit = std::min(word.size(), k.size()) >= 4 ? 2 : 1;
    if (dist <= limit && (best.empty() || dist < best_distance)) {
      best = k;
      best_distance = dist;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, Keys known) {
  const auto guess = closest(word, known);
  return guess.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", guess);
}

const json* find(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

void check_keys(const json& obj, const std::string& path, Keys known, core::Diagnostics& d) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    d.add(child(path, key),
          fmt::format("unknown key \"{}\"{}; known keys: {}", key, did_you_mean(key, known), join(known)));
  }
}

bool is_object(const json& v, const std::string& path, std::string_view what, core::Diagnostics& d) {
  if (v.is_object()) return true;
  d.add(path, fmt::format("expected {}, got {}", what, describe(v)));
  return false;
}

std::optional<std::string> as_string(const json& v, const std::string& path, std::string_view what,
                                     core::Diagnostics& d) {
  if (v.is_string()) return v.get<std::string>();
  d.add(path, fmt::format("expected {}, got {}", what, describe(v)));
  return std::nullopt;
}

std::optional<bool> as_bool(const json& v, const std::string& path, core::Diagnostics& d) {
  if (v.is_boolean()) return v.get<bool>();
  d.add(path, fmt::format("expected true or false, got {}", describe(v)));
  return std::nullopt;
}

std::optional<std::int64_t> as_integer(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi,
                                       std::string_view why, core::Diagnostics& d) {
  std::int64_t i = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    i = u > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    i = v.get<std::int64_t>();
  } else {
    d.add(path, fmt::format("expected an integer, got {}", describe(v)));
    return std::nullopt;
  }
  if (i < lo || i > hi) {
    d.add(path, fmt::format("{} is outside {}..{}{}{}", v.dump(), lo, hi, why.empty() ? "" : ": ", why));
    return std::nullopt;
  }
  return i;
}

std::optional<std::uint64_t> as_unsigned(const json& v, const std::string& path, core::Diagnostics& d) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  d.add(path, fmt::format("expected an integer >= 0, got {}", describe(v)));
  return std::nullopt;
}

std::optional<double> as_fraction(const json& v, const std::string& path, std::string_view why, core::Diagnostics& d) {
  if (!v.is_number()) {
    d.add(path, fmt::format("expected a number in (0, 1], got {}", describe(v)));
    return std::nullopt;
  }
  const double x = v.get<double>();
  if (!(x > 0 && x <= 1)) {
    d.add(path, fmt::format("{} is outside (0, 1]{}{}", v.dump(), why.empty() ? "" : ": ", why));
    return std::nullopt;
  }
  return x;
}

std::optional<double> as_number(const json& v, const std::string& path, double lo, double hi, std::string_view why,
                                core::Diagnostics& d) {
  if (!v.is_number()) {
    d.add(path, fmt::format("expected a number, got {}", describe(v)));
    return std::nullopt;
  }
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) {
    d.add(path, fmt::format("{} is outside {}..{}{}{}", v.dump(), lo, hi, why.empty() ? "" : ": ", why));
    return std::nullopt;
  }
  return x;
}

std::optional<std::string> as_choice(const json& v, const std::string& path, std::string_view what, Keys known,
                                     core::Diagnostics& d) {
  auto s = as_string(v, path, what, d);
  if (!s) return std::nullopt;
  if (std::find(known.begin(), known.end(), *s) != known.end()) return s;
  d.add(path, fmt::format("unknown value \"{}\"{}; choose one of: {}", *s, did_you_mean(*s, known), join(known)));
  return std::nullopt;
}

namespace {
// "invalid JSON at line 3, column 7 (byte 42): syntax error while parsing ...".
std::string json_error_reason(const std::string& text, const json::parse_error& e) {
  // e.byte counts the characters read, the offending one included (end of input counts as one).
  const std::size_t pos = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  // nlohmann's message is "[json.exception.parse_error.101] parse error at line L, column C: <detail>".
  std::string_view detail = e.what();
  if (auto col = detail.find(", column "); col != std::string_view::npos) {
    if (auto colon = detail.find(": ", col); colon != std::string_view::npos) detail.remove_prefix(colon + 2);
  } else if (auto bracket = detail.find("] "); bracket != std::string_view::npos) {
    detail.remove_prefix(bracket + 2);
  }
  // The detail ends with the bytes last read ("last read: '...'"), which need not be text:
  // escaped, and cut short (the file may be one the reader was not meant to see).
  return fmt::format("invalid JSON at line {}, column {} (byte {}): {}", line, pos - line_start + 1, e.byte,
                     printable(detail, 160));
}
}  // namespace

json read_document(const std::string& file, core::Diagnostics& d) {
  std::string text;
  if (auto err = read_file(file, text); !err.empty()) {
    d.add("", fmt::format("cannot read the file: {}", err));
    d.throw_if_any();
  }
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    d.add("", json_error_reason(text, e));
    d.throw_if_any();
  } catch (const json::out_of_range& e) {
    // A number beyond a double (1e999): nlohmann says which, not where.
    std::string_view detail = e.what();
    if (auto bracket = detail.find("] "); bracket != std::string_view::npos) detail.remove_prefix(bracket + 2);
    d.add("", fmt::format("invalid JSON: {}", detail));
    d.throw_if_any();
  }
  return {};
}

}  // namespace wanlab::core::fields
