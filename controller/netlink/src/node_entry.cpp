#include "wanlab/netlink/node_entry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <system_error>

#include "wanlab/netlink/internal.hpp"

namespace wanlab::netlink {
namespace {

constexpr const char* kUtsDir = "/run/utsns";
constexpr const char* kEtcDir = "/etc/netns";
constexpr const char* kThreadUts = "/proc/thread-self/ns/uts";

void check_name(const std::string& operation, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.size() > NAME_MAX)
    throw Error(operation, "'" + name + "'", EINVAL, "not a valid namespace name");
}

// As for /run/netns (netns.cpp): a shared mount point, so the bind mounts in it show in
// (and leave) every mount namespace.
void make_uts_dir_shared(const std::string& name) {
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  if (::mkdir(kUtsDir, 0755) != 0 && errno != EEXIST) throw Error("create utsns", name, errno, "mkdir /run/utsns");
  if (::mount("", kUtsDir, "none", MS_SHARED | MS_REC, nullptr) == 0) return;
  if (errno != EINVAL) throw Error("create utsns", name, errno, "mount --make-rshared /run/utsns");
  if (::mount(kUtsDir, kUtsDir, "none", MS_BIND | MS_REC, nullptr) != 0)
    throw Error("create utsns", name, errno, "mount --rbind /run/utsns /run/utsns");
  if (::mount("", kUtsDir, "none", MS_SHARED | MS_REC, nullptr) != 0)
    throw Error("create utsns", name, errno, "mount --make-rshared /run/utsns");
}

}  // namespace

bool Utsns::create(const std::string& name, const std::string& hostname) {
  check_name("create utsns", name);
  make_uts_dir_shared(name);
  const std::string path = std::string(kUtsDir) + "/" + name;
  {
    const Fd file(::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0));
    if (!file) {
      if (errno == EEXIST) return false;
      throw Error("create utsns", name, errno, "create " + path);
    }
  }
  auto fail = [&](int err, const std::string& detail) -> Error {
    ::unlink(path.c_str());
    return Error("create utsns", name, err, detail);
  };
  const Fd previous(::open(kThreadUts, O_RDONLY | O_CLOEXEC));
  if (!previous) throw fail(errno, std::string("open ") + kThreadUts);
  // Only the calling thread moves (its nsproxy), as for network namespaces.
  if (::unshare(CLONE_NEWUTS) != 0) throw fail(errno, "unshare(CLONE_NEWUTS)");
  int err = 0;
  std::string step;
  if (::sethostname(hostname.data(), hostname.size()) != 0) {
    err = errno;
    step = "sethostname " + hostname;
  } else if (::mount(kThreadUts, path.c_str(), "none", MS_BIND, nullptr) != 0) {
    err = errno;
    step = "bind-mount " + path;
  }
  if (::setns(previous.get(), CLONE_NEWUTS) != 0) {
    log().critical("cannot return thread to its UTS namespace after creating {}: {}", name,
                   std::generic_category().message(errno));
    log().flush();
    std::abort();
  }
  if (err != 0) throw fail(err, step);
  return true;
}

bool Utsns::remove(const std::string& name) {
  check_name("remove utsns", name);
  const std::string path = std::string(kUtsDir) + "/" + name;
  ::umount2(path.c_str(), MNT_DETACH);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    throw Error("remove utsns", name, errno, "unlink " + path);
  }
  return true;
}

std::vector<std::string> Utsns::list() { return sorted_dir_entries(kUtsDir, "list"); }

std::string netns_etc_dir(const std::string& name) { return std::string(kEtcDir) + "/" + name; }

std::vector<std::string> netns_etc_list() { return sorted_dir_entries(kEtcDir, "list"); }

bool remove_netns_etc(const std::string& name) {
  check_name("remove /etc/netns entry", name);
  std::error_code ec;
  const auto n = std::filesystem::remove_all(netns_etc_dir(name), ec);
  if (ec) throw Error("remove", netns_etc_dir(name), ec.value());
  return n > 0;
}

NodeEntry::NodeEntry(const std::string& name) : name_(name) {
  check_name("enter node", name);
  const std::string net = "/run/netns/" + name;
  net_ = Fd(::open(net.c_str(), O_RDONLY | O_CLOEXEC));
  if (!net_) throw Error("enter node", name, errno, "open " + net);
  uts_ = Fd(::open((std::string(kUtsDir) + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
  const auto dir = netns_etc_dir(name);
  for (const auto& f : sorted_dir_entries(dir.c_str(), "list")) binds_.emplace_back(dir + "/" + f, "/etc/" + f);
}

int NodeEntry::enter(const char** failed) const noexcept {
  if (::setns(net_.get(), CLONE_NEWNET) != 0) {
    *failed = "setns(CLONE_NEWNET)";
    return errno;
  }
  if (uts_ && ::setns(uts_.get(), CLONE_NEWUTS) != 0) {
    *failed = "setns(CLONE_NEWUTS)";
    return errno;
  }
  // As `ip netns exec`: mounts stay in this process's own mount namespace.
  if (::unshare(CLONE_NEWNS) != 0 || ::mount("", "/", "none", MS_SLAVE | MS_REC, nullptr) != 0) return 0;
  ::umount2("/sys", MNT_DETACH);
  ::mount(name_.c_str(), "/sys", "sysfs", 0, nullptr);
  for (const auto& [source, target] : binds_) ::mount(source.c_str(), target.c_str(), "none", MS_BIND, nullptr);
  return 0;
}

}  // namespace wanlab::netlink
