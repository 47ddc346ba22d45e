// UniqueFd, open_fd and make_pipe: a descriptor closed exactly once, whoever holds it.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "wanlab/common/system_error.hpp"
#include "wanlab/common/unique_fd.hpp"

using Catch::Matchers::Contains;
using wanlab::UniqueFd;

namespace {
bool is_open(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }
int raw_fd() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }
}  // namespace

TEST_CASE("UniqueFd closes its descriptor once, when it goes", "[unit][raii]") {
  int fd = -1;
  {
    UniqueFd f(raw_fd());
    fd = f.get();
    REQUIRE(fd >= 0);
    CHECK(f.valid());
    CHECK(is_open(fd));
  }
  CHECK_FALSE(is_open(fd));

  UniqueFd none;
  CHECK_FALSE(none.valid());
  CHECK(none.get() == -1);
  CHECK_FALSE(UniqueFd(-5).valid());

  // reset: the old one closed, the new one held; reset() to nothing.
  UniqueFd f(raw_fd());
  const int first = f.get();
  const int second = raw_fd();
  f.reset(second);
  CHECK_FALSE(is_open(first));
  CHECK(f.get() == second);
  f.reset();
  CHECK_FALSE(is_open(second));
  CHECK_FALSE(f.valid());

  // release: handed out, not closed.
  UniqueFd g(raw_fd());
  const int released = g.release();
  CHECK_FALSE(g.valid());
  CHECK(is_open(released));
  ::close(released);
}

TEST_CASE("UniqueFd moves: one owner at a time", "[unit][raii]") {
  UniqueFd a(raw_fd());
  const int fd = a.get();
  UniqueFd b(std::move(a));
  CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): that is what is checked
  CHECK(b.get() == fd);
  CHECK(is_open(fd));

  // Assignment closes what the target held.
  UniqueFd c(raw_fd());
  const int held = c.get();
  c = std::move(b);
  CHECK_FALSE(is_open(held));
  CHECK(c.get() == fd);
  CHECK(is_open(fd));

  // Onto itself: nothing closed.
  auto& same = c;
  c = std::move(same);
  CHECK(c.get() == fd);
  CHECK(is_open(fd));

  { UniqueFd gone(std::move(c)); }
  CHECK_FALSE(is_open(fd));
}

TEST_CASE("open_fd and make_pipe: close-on-exec, errors that name the call", "[unit][raii]") {
  const auto f = wanlab::open_fd("/dev/null", O_RDONLY);
  CHECK((::fcntl(f.get(), F_GETFD) & FD_CLOEXEC) != 0);
  try {
    wanlab::open_fd("/no/such/file", O_RDONLY);
    FAIL("no error");
  } catch (const wanlab::SystemError& e) {
    CHECK(e.code() == ENOENT);
    CHECK(e.call() == "open");
    CHECK_THAT(e.what(), Contains("open /no/such/file: No such file or directory"));
  }
  auto p = wanlab::make_pipe("a test");
  CHECK((::fcntl(p.read.get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK((::fcntl(p.write.get(), F_GETFD) & FD_CLOEXEC) != 0);
  REQUIRE(::write(p.write.get(), "x", 1) == 1);
  p.write.reset();
  char buf[4];
  CHECK(::read(p.read.get(), buf, sizeof buf) == 1);
  CHECK(::read(p.read.get(), buf, sizeof buf) == 0);  // EOF: the write end is closed
}
