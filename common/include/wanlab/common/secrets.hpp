#pragma once
// Secrets on the command line: a bearer token given as `--token T` is in the process's argv,
// which every local user reads (`ps`, /proc/PID/cmdline), as does any process forked from it
// without exec (the controller daemon). These keep it out: the value is overwritten in argv
// once parsed, and a token can come from a file instead (or the environment, which only the
// process's user and root can read).
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

namespace wanlab {

/// Overwrites, in place, the value of every `NAME VALUE` and `NAME=VALUE` in argv (NAME e.g.
/// "--token") with '*', so /proc/PID/cmdline of this process, and of every process it forks
/// from now on without exec, no longer holds it. Call after parsing (the parser keeps copies).
/// Returns the number of values hidden.
int hide_argument_values(int argc, char** argv, std::initializer_list<std::string_view> names);

/// A secret kept in `file`: its first line, without surrounding blanks. Throws
/// std::runtime_error naming the file when it cannot be read or holds no secret. Sets
/// `warning` (else leaves it empty) when group or others may read the file.
std::string read_secret_file(const std::filesystem::path& file, std::string& warning);

}  // namespace wanlab
