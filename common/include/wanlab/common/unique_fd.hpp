#pragma once
// A file descriptor owned by a value: closed exactly once, by the destructor or reset(),
// never copied, handed on by move (Mahimahi's FileDescriptor). No thread-safety of its own.
#include <utility>

namespace wanlab {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  /// Takes ownership of `fd` (negative: none).
  explicit UniqueFd(int fd) noexcept : fd_(fd < 0 ? -1 : fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  /// Gives the descriptor up without closing it.
  int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the descriptor held (if any; close's errors are not reported: the descriptor is
  /// gone either way) and takes `fd`.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// open(2) with O_CLOEXEC added. Throws SystemError ("open PATH: ...") on failure.
UniqueFd open_fd(const char* path, int flags, unsigned mode = 0);

/// Both ends of a pipe, close-on-exec.
struct Pipe {
  UniqueFd read, write;
};
/// pipe2(O_CLOEXEC | extra_flags). Throws SystemError ("pipe for WHAT: ...").
Pipe make_pipe(const char* what, int extra_flags = 0);

}  // namespace wanlab
