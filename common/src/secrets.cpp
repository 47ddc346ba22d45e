#include "wanlab/common/secrets.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "wanlab/common/unique_fd.hpp"

namespace wanlab {

int hide_argument_values(int argc, char** argv, std::initializer_list<std::string_view> names) {
  int hidden = 0;
  auto blank = [&](char* p) {
    if (*p == '\0') return;
    for (; *p; ++p) *p = '*';
    ++hidden;
  };
  for (int i = 1; i < argc && argv[i]; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;  // what follows is another command's
    for (const auto name : names) {
      if (arg == name && i + 1 < argc && argv[i + 1]) {
        blank(argv[++i]);
        break;
      }
      if (arg.size() > name.size() && arg.starts_with(name) && arg[name.size()] == '=') {
        blank(argv[i] + name.size() + 1);
        break;
      }
    }
  }
  return hidden;
}

std::string read_secret_file(const std::filesystem::path& file, std::string& warning) {
  warning.clear();
  const UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw std::runtime_error(fmt::format("{}: {}", file.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw std::runtime_error(fmt::format("{}: not a regular file", file.string()));
  std::string text;
  char buf[4096];
  for (;;) {
    const auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > 64 * 1024) break;
  }
  const auto eol = text.find('\n');
  std::string line = text.substr(0, eol);
  const auto blank = " \t\r";
  const auto first = line.find_first_not_of(blank);
  if (first == std::string::npos) throw std::runtime_error(fmt::format("{}: empty (the token is its first line)", file.string()));
  line = line.substr(first, line.find_last_not_of(blank) - first + 1);
  if ((st.st_mode & (S_IRGRP | S_IROTH)) != 0)
    warning = fmt::format("{} may be read by other users (mode {:04o}); chmod 600 it", file.string(), st.st_mode & 07777);
  return line;
}

}  // namespace wanlab
