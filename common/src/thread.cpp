#include "wanlab/common/thread.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace wanlab {

void name_this_thread(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

std::string set_this_thread_nice(int nice) {
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice) == 0) return {};
  return std::strerror(errno);
}

}  // namespace wanlab
