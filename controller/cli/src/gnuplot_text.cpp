#include "gnuplot_text.hpp"

#include "wanlab/common/printable.hpp"

namespace wanlab::cli {

std::string gnuplot_string(std::string_view text) {
  // Pieces joined with gnuplot's '.': runs of text in single quotes, and a quote or a line
  // break alone in a double-quoted string ("'" and "\n"). Quotes are not doubled inside the
  // single quotes: gnuplot reads a string that starts with three quotes as an empty one.
  std::string out, run;
  auto piece = [&](std::string_view p) {
    if (!out.empty()) out += " . ";
    out += p;
  };
  auto flush = [&] {
    if (run.empty()) return;
    piece("'" + run + "'");
    run.clear();
  };
  std::size_t start = 0;
  for (;;) {
    const auto nl = text.find('\n', start);
    const auto line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    for (char c : printable(line)) {
      if (c == '\'' || c == '`') {
        flush();
        piece("\"'\"");
      } else {
        run += c;
      }
    }
    flush();
    if (nl == std::string_view::npos) break;
    piece("\"\\n\"");
    start = nl + 1;
  }
  return out.empty() ? "''" : out;
}

std::string gnuplot_file_part(std::string_view name) {
  std::string out;
  for (char c : name) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_' || (c == '.' && !out.empty());
    out += safe ? c : '_';
  }
  return out.empty() ? "_" : out;
}

}  // namespace wanlab::cli
