#pragma once
// Text that goes into a gnuplot script (bench plots). A bench folder may come from
// elsewhere (`bench --plots-only DIR` needs no root), so its names and titles are data,
// never script: gnuplot runs the command in `backquotes` inside a double-quoted string, and
// a quote that ended a string early would let the rest run as commands.
#include <string>
#include <string_view>

namespace wanlab::cli {

/// `text` as a gnuplot string expression that gnuplot takes as is: its text in single
/// quotes (where gnuplot substitutes nothing), joined with '.' to "'" for a quote or a
/// backquote and to "\n" for a line break; other control characters and bytes that are
/// not UTF-8 escaped as text ("\x1b"). it's -> 'it' . "'" . 's'
std::string gnuplot_string(std::string_view text);

/// `name` as part of a file name in a plot folder and its scripts: letters, digits, '.',
/// '-' and '_' are kept, anything else becomes '_' (no '/', no quote, no leading '.').
std::string gnuplot_file_part(std::string_view name);

}  // namespace wanlab::cli
