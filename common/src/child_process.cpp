#include "wanlab/common/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "wanlab/common/system_error.hpp"
#include "wanlab/common/unique_fd.hpp"

extern char** environ;

namespace wanlab {
namespace {

// What a child that failed before or at exec writes on its error pipe.
struct Failure {
  int step;
  int err;
};

enum Step : int { kSetpgid, kChdir, kStdin, kStdout, kStderr, kSignals, kExec };
constexpr const char* kStepCalls[] = {"setpgid for", "chdir to", "dup2 onto stdin for", "dup2 onto stdout for",
                                      "dup2 onto stderr for", "sigprocmask for", "exec"};

[[noreturn]] void fail(int pipe_fd, int step) {
  const Failure f{step, errno};
  [[maybe_unused]] const auto n = ::write(pipe_fd, &f, sizeof f);
  ::_exit(127);
}

// Makes `fd` the child's `target` (0, 1, 2). An fd already there only loses close-on-exec.
bool redirect(int fd, int target) {
  if (fd < 0) return true;
  if (fd == target) {
    const int flags = ::fcntl(fd, F_GETFD);
    return flags >= 0 && ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) == 0;
  }
  return ::dup2(fd, target) == target;
}

// The child, between fork and exec: system calls only.
[[noreturn]] void exec_child(const SpawnOptions& o, int err_fd, const char* file, char* const* argv,
                             char* const* envp) {
  if (o.new_process_group && ::setpgid(0, 0) != 0) fail(err_fd, kSetpgid);
  if (o.in_child) {
    if (const int rc = o.in_child(); rc != 0) ::_exit(rc);
  }
  if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) fail(err_fd, kChdir);
  if (!redirect(o.stdin_fd, 0)) fail(err_fd, kStdin);
  if (!redirect(o.stdout_fd, 1)) fail(err_fd, kStdout);
  if (!redirect(o.stderr_fd, 2)) fail(err_fd, kStderr);
  for (const int sig : o.default_signals) ::signal(sig, SIG_DFL);
  if (o.unblock_signals) {
    sigset_t none;
    sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(err_fd, kSignals);
  }
  if (o.close_other_fds) {
    // All but the error pipe (>= 3, close-on-exec: exec closes it).
    if (err_fd > 3) ::close_range(3, static_cast<unsigned>(err_fd) - 1, 0);
    ::close_range(static_cast<unsigned>(err_fd) + 1, ~0U, 0);
  }
  if (o.search_path)
    ::execvpe(file, argv, envp);
  else
    ::execve(file, argv, envp);
  fail(err_fd, kExec);
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string ExitStatus::describe() const {
  return signal != 0 ? fmt::format("was killed by signal {}", signal) : fmt::format("exited with status {}", code);
}

ExitStatus ExitStatus::from_wait(int wstatus) {
  if (WIFSIGNALED(wstatus)) return {0, WTERMSIG(wstatus)};
  return {WEXITSTATUS(wstatus), 0};
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), reaped_(std::exchange(other.reaped_, false)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    reaped_ = std::exchange(other.reaped_, false);
  }
  return *this;
}

ChildProcess::~ChildProcess() { kill_and_reap(); }

void ChildProcess::kill_and_reap() noexcept {
  if (running()) {
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  reaped_ = false;
}

ChildProcess ChildProcess::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) throw std::invalid_argument("spawn: no program");
  const std::string& program = o.program.empty() ? o.argv.front() : o.program;
  // Built before fork: the child only reads them.
  auto args = o.argv;
  const auto argv = pointers(args);
  std::vector<std::string> env_strings;
  if (o.env) {
    env_strings = *o.env;
  } else {
    for (char** e = environ; e && *e; ++e) env_strings.emplace_back(*e);
  }
  const auto envp = pointers(env_strings);
  Pipe errors = make_pipe(program.c_str());
  // Above 0..2, so that no redirection lands on it.
  if (errors.write.get() <= 2) {
    const int moved = ::fcntl(errors.write.get(), F_DUPFD_CLOEXEC, 3);
    if (moved < 0) throw SystemError("fcntl for", program, errno);
    errors.write.reset(moved);
  }
  const pid_t pid = ::fork();
  if (pid < 0) throw SystemError("fork for", program, errno);
  if (pid == 0) exec_child(o, errors.write.get(), program.c_str(), argv.data(), envp.data());
  ChildProcess child(pid);
  // The parent's setpgid too: no signal may reach the group before the child made it (either
  // may come first; EACCES once the child has exec'ed is fine, it made the group itself).
  if (o.new_process_group) ::setpgid(pid, pid);
  errors.write.reset();
  Failure f{};
  std::size_t got = 0;
  while (got < sizeof f) {
    const auto n = ::read(errors.read.get(), reinterpret_cast<char*>(&f) + got, sizeof f - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got == sizeof f && f.step >= 0 && f.step <= kExec) {
    child.wait();
    throw SystemError(kStepCalls[f.step], program, f.err);
  }
  return child;  // exec'ed, or ended by in_child (its status is for wait())
}

ChildProcess ChildProcess::fork_call(const std::string& what, const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid < 0) throw SystemError("fork for", what, errno);
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (...) {
    }
    ::_exit(rc);
  }
  return ChildProcess(pid);
}

ExitStatus ChildProcess::wait() {
  if (!running()) throw std::logic_error("ChildProcess::wait: no child running");
  int st = 0;
  for (;;) {
    if (::waitpid(pid_, &st, 0) == pid_) break;
    if (errno != EINTR) throw SystemError("waitpid for", std::to_string(pid_), errno);
  }
  reaped_ = true;
  return ExitStatus::from_wait(st);
}

std::optional<ExitStatus> ChildProcess::try_wait() {
  if (!running()) throw std::logic_error("ChildProcess::try_wait: no child running");
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == 0) return std::nullopt;
    if (r == pid_) break;
    if (errno != EINTR) throw SystemError("waitpid for", std::to_string(pid_), errno);
  }
  reaped_ = true;
  return ExitStatus::from_wait(st);
}

bool ChildProcess::signal(int sig) const noexcept { return running() && ::kill(pid_, sig) == 0; }

bool ChildProcess::signal_group(int sig) const noexcept { return pid_ > 0 && ::kill(-pid_, sig) == 0; }

pid_t ChildProcess::detach() noexcept {
  const pid_t p = pid_;
  pid_ = -1;
  reaped_ = false;
  return p;
}

}  // namespace wanlab
