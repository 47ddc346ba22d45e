#include "wanlab/common/printable.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace wanlab {
namespace {

// The length of the well-formed UTF-8 character at the start of `s` (1..4), or 0 when its
// first byte does not start one; `cp` gets its code point.
std::size_t utf8_char(std::string_view s, char32_t& cp) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  std::size_t n = 0;
  char32_t min = 0;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void append_hex(std::string& out, unsigned char c) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

}  // namespace

bool valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const auto n = utf8_char(text.substr(i), cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 8);
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    std::size_t n = utf8_char(text.substr(i), cp);
    if (i + std::max<std::size_t>(n, 1) > max_bytes) break;
    if (n == 0) {
      append_hex(out, static_cast<unsigned char>(text[i]));
      n = 1;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      append_hex(out, static_cast<unsigned char>(cp));
    } else if (cp >= 0x80 && cp < 0xA0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  if (i < text.size()) out += "...";
  return out;
}

}  // namespace wanlab
