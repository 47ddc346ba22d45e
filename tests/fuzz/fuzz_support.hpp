#pragma once
// What the harnesses share: a check that stops the run with the reason (libFuzzer then
// saves the input), and a scratch file for parsers that read from a path.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace wanlab::fuzz {

/// An invariant of the code under test did not hold: report and abort (a finding).
[[noreturn]] inline void fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "fuzz check failed: %s\n%.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}
#define WANLAB_FUZZ_CHECK(cond, detail) \
  do {                                  \
    if (!(cond)) ::wanlab::fuzz::fail(#cond, detail); \
  } while (0)

/// A file of this process's own (TMPDIR, else /tmp) rewritten with each input, for the
/// readers that take a path; removed when the process exits.
inline const std::filesystem::path& scratch_file(const char* name) {
  struct Scratch {
    std::filesystem::path path;
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  };
  static const Scratch scratch{[&] {
    const char* dir = std::getenv("TMPDIR");
    return std::filesystem::path(dir != nullptr && *dir != '\0' ? dir : "/tmp") /
           ("wanlab-fuzz-" + std::to_string(::getpid()) + "-" + name);
  }()};
  return scratch.path;
}
inline void write_file(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace wanlab::fuzz
