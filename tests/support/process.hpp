#pragma once
// Test helpers: run a shell command line and capture its output (test code only; the
// product never runs a shell).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace wanlab::test {

struct Run {
  int code = -1;
  std::string out;  // stdout and stderr together
};

inline Run run(const std::string& cmd) {
  Run r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline std::string wanlab() { return WANLAB_BINARY; }

}  // namespace wanlab::test
