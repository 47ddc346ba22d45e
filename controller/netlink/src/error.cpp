// netlink::Error, the translation of libnl error codes, and the module's logger.
#include <spdlog/spdlog.h>

#include <cerrno>
#include <system_error>

#include "wanlab/common/logger.hpp"
#include "wanlab/netlink/internal.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

namespace {
std::string error_text(const std::string& operation, const std::string& object, int err, const std::string& detail) {
  std::string text = operation;
  if (!object.empty()) text += " " + object;
  text += ": " + std::generic_category().message(err);
  if (!detail.empty()) text += " (" + detail + ")";
  return text;
}
}  // namespace

Error::Error(std::string operation, std::string object, int err, std::string detail)
    : std::runtime_error(error_text(operation, object, err, detail)), code_(err) {}

spdlog::logger& log() {
  static spdlog::logger& logger = named_logger("netlink");
  return logger;
}

namespace libnl {

int to_errno(int nl_error) {
  switch (nl_error < 0 ? -nl_error : nl_error) {
    case NLE_EXIST:
      return EEXIST;
    case NLE_OBJ_NOTFOUND:
    case NLE_NODEV:
      return ENODEV;
    case NLE_INVAL:
      return EINVAL;
    case NLE_PERM:
      return EPERM;
    case NLE_NOACCESS:
      return EACCES;
    case NLE_NOMEM:
      return ENOMEM;
    case NLE_BUSY:
      return EBUSY;
    case NLE_OPNOTSUPP:
      return EOPNOTSUPP;
    case NLE_RANGE:
      return ERANGE;
    case NLE_MSGSIZE:
      return EMSGSIZE;
    case NLE_AGAIN:
      return EAGAIN;
    case NLE_INTR:
      return EINTR;
    case NLE_NOADDR:
      return EADDRNOTAVAIL;
    case NLE_AF_NOSUPPORT:
      return EAFNOSUPPORT;
    default:
      return EIO;
  }
}

std::string describe(int nl_error) {
  return nl_geterror(nl_error);
}

}  // namespace libnl
}  // namespace wanlab::netlink
