#pragma once
// The error of a failed system call: names the call, the object it was made on and errno
// ("open /run/wanlab/x/state.json: Permission denied").
#include <stdexcept>
#include <string>

namespace wanlab {

class SystemError : public std::runtime_error {
 public:
  /// `call` and `object` as the message shows them: "{call} {object}: {strerror(err)}"
  /// (no object: "{call}: {strerror(err)}").
  SystemError(const std::string& call, const std::string& object, int err);
  /// The call as given ("open", "exec", "chdir to").
  const std::string& call() const noexcept { return call_; }
  int code() const noexcept { return err_; }

 private:
  std::string call_;
  int err_;
};

/// Throws SystemError(call, object, errno) when `result` is negative; returns it otherwise.
template <typename T>
T check_syscall(T result, const std::string& call, const std::string& object = {});

}  // namespace wanlab
