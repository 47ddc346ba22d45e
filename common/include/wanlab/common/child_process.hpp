#pragma once
// A child process owned by a value: started by fork (and exec), waited for, and killed and
// reaped by the destructor unless it was waited for or detached (Mahimahi's ChildProcess).
// Everything a child needs is prepared before fork: between fork and exec the child makes
// system calls only, so spawn() is safe from a process with threads. Not thread-safe: one
// thread owns a ChildProcess.
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace wanlab {

/// How a child ended.
struct ExitStatus {
  int code = 0;    // its exit status, when no signal ended it
  int signal = 0;  // the signal that killed it; 0 when it exited

  bool exited() const { return signal == 0; }
  bool success() const { return signal == 0 && code == 0; }
  /// The shell's number: the exit status, or 128 + the signal.
  int shell_code() const { return signal != 0 ? 128 + signal : code; }
  /// "exited with status 3", "was killed by signal 9".
  std::string describe() const;
  /// From waitpid's status word.
  static ExitStatus from_wait(int wstatus);
};

/// What spawn() runs and how.
struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: the program, unless `program` names it
  std::string program;            // the file exec'ed; empty: argv[0]
  bool search_path = false;       // execvp: a program name without '/' is looked up in PATH
  std::optional<std::vector<std::string>> env;  // NAME=VALUE each; none: this process's
  // Made the child's 0, 1 and 2 (dup2); -1: inherited.
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  std::string cwd;                  // the child's folder; empty: this process's
  bool new_process_group = false;   // the child leads a group of its own (set on both sides)
  std::vector<int> default_signals; // set to SIG_DFL in the child
  bool unblock_signals = false;     // the child starts with no signal blocked
  bool close_other_fds = false;     // every descriptor above 2 closed before exec
  /// Runs in the child first (after the process group is made): async-signal-safe calls only.
  /// A non-zero result ends the child with that exit status at once (it may have said why
  /// where it wanted); spawn() does not see it as its own failure: wait() returns it.
  std::function<int()> in_child;
};

class ChildProcess {
 public:
  ChildProcess() noexcept = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  /// A child still owned and not reaped is killed (SIGKILL) and reaped. Never throws.
  ~ChildProcess();

  /// fork and exec. Returns once the program runs. A step that fails before exec, or exec
  /// itself, is thrown as SystemError naming the step and the program ("exec /no/such:
  /// No such file or directory"; call(): "exec", "chdir to", "dup2 onto stdout for",
  /// "setpgid for"); that child has been reaped. fork's failure: SystemError "fork for PROGRAM".
  static ChildProcess spawn(const SpawnOptions& options);

  /// fork, then `body` in the child, its result the child's exit status (_exit: no
  /// destructors, no atexit handlers; an exception out of `body` is exit status 1). For a
  /// child that goes on as this program (a daemon) or makes system calls only: from a process
  /// with threads, `body` may call async-signal-safe functions only. fork's failure:
  /// SystemError "fork for WHAT".
  static ChildProcess fork_call(const std::string& what, const std::function<int()>& body);

  /// Its pid (kept after it was reaped, for its process group); -1 when there is none.
  pid_t pid() const noexcept { return pid_; }
  /// Started, owned and not reaped yet (it may have exited: try_wait() says).
  bool running() const noexcept { return pid_ > 0 && !reaped_; }

  /// Waits for it to end (EINTR retried) and reaps it. Throws std::logic_error when it is not
  /// running(), SystemError ("waitpid for PID") when waitpid fails.
  ExitStatus wait();
  /// Its status when it has ended (and reaps it), else nothing. Same errors as wait().
  std::optional<ExitStatus> try_wait();
  /// kill(pid, sig) while running(); false when not running or kill failed.
  bool signal(int sig) const noexcept;
  /// kill(-pid, sig): its process group, which may outlive it; false on failure.
  bool signal_group(int sig) const noexcept;
  /// It is no longer owned: not killed or reaped by this object. Returns its pid.
  pid_t detach() noexcept;

 private:
  explicit ChildProcess(pid_t pid) noexcept : pid_(pid) {}
  void kill_and_reap() noexcept;

  pid_t pid_ = -1;
  bool reaped_ = false;
};

}  // namespace wanlab
