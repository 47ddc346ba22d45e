#pragma once
// Text from outside (a request's path, a file's bytes, a command-line argument) made safe
// to show: in an error message, a log line, a JSON string, a terminal.
#include <cstddef>
#include <string>
#include <string_view>

namespace wanlab {

/// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points
/// above U+10FFFF): what a JSON string may carry.
bool valid_utf8(std::string_view text);

/// `text` as valid, printable UTF-8: well-formed characters pass unchanged, except control
/// characters (C0, DEL, C1), which become "\n", "\t", "\r" or "\xNN" ("\u0085" for C1);
/// every byte that is not part of a well-formed character becomes "\xNN". At most
/// `max_bytes` of the input are shown; longer text ends with "..." (never inside a
/// character). The result is always safe for nlohmann::json's strict dump().
std::string printable(std::string_view text, std::size_t max_bytes = std::string_view::npos);

}  // namespace wanlab
