// ChildProcess: exec failures with their errno, exit statuses, signal deaths, redirection,
// and a destructor that kills and reaps what it still owns.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "wanlab/common/child_process.hpp"
#include "wanlab/common/system_error.hpp"
#include "wanlab/common/unique_fd.hpp"

using Catch::Matchers::Contains;
using wanlab::ChildProcess;
using wanlab::SpawnOptions;

namespace {

SpawnOptions sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  return o;
}

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

// Gone from the process table: killed and reaped (a zombie would still answer kill 0).
bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

TEST_CASE("spawn of a missing program reports exec's errno", "[unit][raii]") {
  SpawnOptions o;
  o.argv = {"/no/such/program", "x"};
  try {
    ChildProcess::spawn(o);
    FAIL("no error");
  } catch (const wanlab::SystemError& e) {
    CHECK(e.code() == ENOENT);
    CHECK(e.call() == "exec");
    CHECK_THAT(e.what(), Contains("exec /no/such/program: No such file or directory"));
  }
  // Looked up in PATH.
  o.argv = {"wanlab-no-such-program"};
  o.search_path = true;
  CHECK_THROWS_WITH(ChildProcess::spawn(o), Contains("exec wanlab-no-such-program: No such file or directory"));
  // Found in PATH.
  o.argv = {"true"};
  CHECK(ChildProcess::spawn(o).wait().success());
  // Not executable.
  o.argv = {"/dev/null"};
  o.search_path = false;
  try {
    ChildProcess::spawn(o);
    FAIL("no error");
  } catch (const wanlab::SystemError& e) {
    CHECK(e.code() == EACCES);
  }
  // A step before exec: the folder.
  auto c = sh("true");
  c.cwd = "/no/such/folder";
  CHECK_THROWS_WITH(ChildProcess::spawn(c), Contains("chdir to /bin/sh: No such file or directory"));
  CHECK_THROWS_AS(ChildProcess::spawn(SpawnOptions{}), std::invalid_argument);
}

TEST_CASE("wait gives the exit status or the signal", "[unit][raii]") {
  auto c = ChildProcess::spawn(sh("exit 3"));
  CHECK(c.running());
  const auto st = c.wait();
  CHECK(st.exited());
  CHECK(st.code == 3);
  CHECK(st.shell_code() == 3);
  CHECK_FALSE(st.success());
  CHECK(st.describe() == "exited with status 3");
  CHECK_FALSE(c.running());
  CHECK(c.pid() > 0);  // kept for its process group
  CHECK_THROWS_AS(c.wait(), std::logic_error);

  auto k = ChildProcess::spawn(sh("kill -KILL $$"));
  const auto ks = k.wait();
  CHECK_FALSE(ks.exited());
  CHECK(ks.signal == SIGKILL);
  CHECK(ks.shell_code() == 128 + SIGKILL);
  CHECK(ks.describe() == "was killed by signal 9");

  // try_wait: nothing while it runs; then its status; signal() to a running child.
  auto s = ChildProcess::spawn(sh("exec sleep 30"));
  CHECK_FALSE(s.try_wait().has_value());
  CHECK(s.signal(SIGTERM));
  const auto ts = s.wait();
  CHECK(ts.signal == SIGTERM);
  CHECK_FALSE(s.signal(SIGTERM));  // reaped: its pid may be another process's now
}

TEST_CASE("the destructor kills and reaps; detach leaves it running", "[unit][raii]") {
  pid_t pid = -1;
  {
    auto c = ChildProcess::spawn(sh("exec sleep 30"));
    pid = c.pid();
    REQUIRE(pid > 0);
    CHECK(::kill(pid, 0) == 0);
  }
  CHECK(gone(pid));
  CHECK(::waitpid(pid, nullptr, WNOHANG) < 0);  // nothing left to reap
  CHECK(errno == ECHILD);

  // Moves: one owner; assignment kills what the target owned.
  auto a = ChildProcess::spawn(sh("exec sleep 30"));
  const pid_t first = a.pid();
  ChildProcess b(std::move(a));
  CHECK_FALSE(a.running());  // NOLINT(bugprone-use-after-move): that is what is checked
  CHECK(a.pid() == -1);
  CHECK(b.pid() == first);
  b = ChildProcess::spawn(sh("exec sleep 30"));
  CHECK(gone(first));
  const pid_t second = b.pid();
  b = ChildProcess();
  CHECK(gone(second));

  pid_t kept = -1;
  {
    auto d = ChildProcess::spawn(sh("exec sleep 30"));
    kept = d.detach();
    CHECK_FALSE(d.running());
  }
  CHECK(::kill(kept, 0) == 0);
  ::kill(kept, SIGKILL);
  int st = 0;
  CHECK(::waitpid(kept, &st, 0) == kept);
}

TEST_CASE("spawn redirects, sets the folder, the environment and the group", "[unit][raii]") {
  auto out = wanlab::make_pipe("stdout");
  auto o = sh("pwd; echo \"$X\"; echo err >&2");
  o.cwd = "/tmp";
  o.env = std::vector<std::string>{"X=from env", "PATH=/usr/bin:/bin"};
  o.stdout_fd = out.write.get();
  o.stderr_fd = out.write.get();
  const auto devnull = wanlab::open_fd("/dev/null", O_RDONLY);
  o.stdin_fd = devnull.get();
  auto c = ChildProcess::spawn(o);
  out.write.reset();
  const auto text = read_all(out.read.get());
  CHECK(c.wait().success());
  CHECK_THAT(text, Contains("/tmp\nfrom env\nerr\n"));

  auto g = sh("exec sleep 30");
  g.new_process_group = true;
  auto leader = ChildProcess::spawn(g);
  CHECK(::getpgid(leader.pid()) == leader.pid());
  CHECK(leader.signal_group(SIGKILL));
  CHECK(leader.wait().signal == SIGKILL);

  // in_child: a non-zero result is the child's status, not spawn's error.
  auto h = sh("exit 0");
  h.in_child = [] { return 42; };
  CHECK(ChildProcess::spawn(h).wait().code == 42);
}

TEST_CASE("close_other_fds closes inherited descriptors above 2", "[unit][raii]") {
  const auto f = wanlab::open_fd("/dev/null", O_RDONLY);
  const wanlab::UniqueFd inherited(::dup(f.get()));  // no close-on-exec
  REQUIRE(inherited.valid());
  const auto script = "test -e /proc/self/fd/" + std::to_string(inherited.get());
  CHECK(ChildProcess::spawn(sh(script)).wait().code == 0);
  auto o = sh(script);
  o.close_other_fds = true;
  CHECK(ChildProcess::spawn(o).wait().code == 1);
}

TEST_CASE("fork_call runs a function in the child", "[unit][raii]") {
  auto p = wanlab::make_pipe("fork_call");
  const int w = p.write.get();
  auto c = ChildProcess::fork_call("a test", [w] { return ::write(w, "hi", 2) == 2 ? 7 : 1; });
  p.write.reset();
  CHECK(read_all(p.read.get()) == "hi");
  CHECK(c.wait().code == 7);
  // An exception out of the body: status 1, nothing unwinds into the caller's frames.
  auto t = ChildProcess::fork_call("a test", []() -> int { throw std::runtime_error("no"); });
  CHECK(t.wait().code == 1);
}
