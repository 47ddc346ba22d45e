#include "wanlab/common/system_error.hpp"

#include <cerrno>
#include <cstring>

namespace wanlab {

SystemError::SystemError(const std::string& call, const std::string& object, int err)
    : std::runtime_error((object.empty() ? call : call + " " + object) + ": " + std::strerror(err)), call_(call), err_(err) {}

template <typename T>
T check_syscall(T result, const std::string& call, const std::string& object) {
  if (result < 0) throw SystemError(call, object, errno);
  return result;
}

template int check_syscall<int>(int, const std::string&, const std::string&);
template long check_syscall<long>(long, const std::string&, const std::string&);

}  // namespace wanlab
