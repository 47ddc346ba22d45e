#include "wanlab/common/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "wanlab/common/system_error.hpp"

namespace wanlab {

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);  // EINTR: Linux has closed it anyway
  fd_ = fd < 0 ? -1 : fd;
}

UniqueFd open_fd(const char* path, int flags, unsigned mode) {
  const int fd = ::open(path, flags | O_CLOEXEC, mode);
  if (fd < 0) throw SystemError("open", path, errno);
  return UniqueFd(fd);
}

Pipe make_pipe(const char* what, int extra_flags) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | extra_flags) != 0) throw SystemError("pipe for", what, errno);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace wanlab
