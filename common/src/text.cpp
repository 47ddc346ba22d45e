#include "wanlab/common/text.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <system_error>
#include <vector>

#include <sys/stat.h>

#include <fmt/format.h>

namespace wanlab {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string read_file(const std::filesystem::path& file, std::string& out) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    return std::error_code(EISDIR, std::generic_category()).message() + " (a folder, not a file)";
  errno = 0;
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> f(std::fopen(file.c_str(), "rb"));
  if (!f) return std::error_code(errno, std::generic_category()).message();
  // A device or a pipe (/dev/zero, a FIFO) could be read forever: only regular files.
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) != 0) return std::error_code(errno, std::generic_category()).message();
  if (!S_ISREG(st.st_mode)) return "not a regular file (a device, pipe or socket)";
  char buf[1 << 16];
  std::size_t n = 0;
  const std::size_t start = out.size();
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    if (out.size() - start + n > kMaxReadFile)
      return fmt::format("larger than {} MiB, more than any topology, scenario or trace needs", kMaxReadFile >> 20);
    out.append(buf, n);
  }
  if (std::ferror(f.get())) return std::error_code(errno, std::generic_category()).message();
  return {};
}

std::string utc_timestamp(bool milliseconds) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!milliseconds) return std::string(buf) + "Z";
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03dZ", static_cast<int>(ms));
  return std::string(buf) + frac;
}

}  // namespace wanlab
