// Named network namespaces, made and removed as iproute2's `ip netns` does, and
// entering one on the calling thread.
#include <dirent.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "wanlab/netlink/internal.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

namespace {

constexpr const char* kRunDir = "/run/netns";
// The calling thread's namespace (/proc/self is the thread group leader's).
constexpr const char* kThreadNetns = "/proc/thread-self/ns/net";

std::string netns_path(const std::string& name) {
  return std::string(kRunDir) + "/" + name;
}

// As iproute2's is_valid_netns_name: one path component.
void check_name(const std::string& operation, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.size() > NAME_MAX) {
    throw Error(operation, "'" + name + "'", EINVAL, "not a valid namespace name");
  }
}

Fd open_thread_netns(const std::string& operation, const std::string& object) {
  Fd fd(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  if (!fd) throw Error(operation, object, errno, std::string("open ") + kThreadNetns);
  return fd;
}

// Makes /run/netns a shared mount point so that mounts (and unmounts) of namespace files
// propagate between mount namespaces, as `ip netns add` does.
void make_run_dir_shared(const std::string& name) {
  // Two threads creating the first namespace at once must not both turn the directory
  // into a mount point (that would stack two bind mounts).
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  if (::mkdir(kRunDir, S_IRWXU | S_IRGRP | S_IXGRP | S_IROTH | S_IXOTH) != 0 && errno != EEXIST) {
    throw Error("create netns", name, errno, "mkdir /run/netns");
  }
  if (::mount("", kRunDir, "none", MS_SHARED | MS_REC, nullptr) == 0) return;
  if (errno != EINVAL) throw Error("create netns", name, errno, "mount --make-rshared /run/netns");
  // EINVAL: not a mount point yet; make it one by bind-mounting it onto itself.
  if (::mount(kRunDir, kRunDir, "none", MS_BIND | MS_REC, nullptr) != 0) {
    throw Error("create netns", name, errno, "mount --rbind /run/netns /run/netns");
  }
  if (::mount("", kRunDir, "none", MS_SHARED | MS_REC, nullptr) != 0) {
    throw Error("create netns", name, errno, "mount --make-rshared /run/netns");
  }
}

// Returning a thread to its namespace cannot be allowed to fail: everything it did next
// would act on the wrong namespace.
void restore_or_abort(const Fd& previous, const std::string& context) {
  if (::setns(previous.get(), CLONE_NEWNET) == 0) return;
  const int err = errno;
  log().critical("cannot return thread to its network namespace after {}: {}", context,
                 std::generic_category().message(err));
  log().flush();
  std::abort();
}

}  // namespace

std::optional<Netns> Netns::create(const std::string& name) {
  check_name("create netns", name);
  make_run_dir_shared(name);
  const std::string path = netns_path(name);
  {
    Fd file(::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0));
    if (!file) {
      if (errno == EEXIST) return std::nullopt;
      throw Error("create netns", name, errno, "create " + path);
    }
  }
  auto fail = [&](int err, const std::string& detail) -> Error {
    ::unlink(path.c_str());
    return Error("create netns", name, err, detail);
  };

  Fd previous(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  if (!previous) throw fail(errno, std::string("open ") + kThreadNetns);
  // unshare moves only the calling thread (its nsproxy) into the new namespace.
  if (::unshare(CLONE_NEWNET) != 0) throw fail(errno, "unshare(CLONE_NEWNET)");
  int mount_err = 0;
  if (::mount(kThreadNetns, path.c_str(), "none", MS_BIND, nullptr) != 0) mount_err = errno;
  Fd created(::open(kThreadNetns, O_RDONLY | O_CLOEXEC));
  const int open_err = created ? 0 : errno;
  restore_or_abort(previous, "creating namespace " + name);

  if (mount_err != 0) throw fail(mount_err, "bind-mount " + path);
  if (open_err != 0) {
    ::umount2(path.c_str(), MNT_DETACH);
    throw fail(open_err, std::string("open ") + kThreadNetns);
  }
  return Netns(name, std::move(created));
}

std::optional<Netns> Netns::open(const std::string& name) {
  check_name("open netns", name);
  Fd fd(::open(netns_path(name).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::nullopt;
    throw Error("open netns", name, errno);
  }
  // A file that is not (or no longer) a namespace bind mount, e.g. left by a crash.
  if (::ioctl(fd.get(), NS_GET_NSTYPE) != CLONE_NEWNET) {
    throw Error("open netns", name, EINVAL, netns_path(name) + " is not a network namespace");
  }
  return Netns(name, std::move(fd));
}

Netns Netns::current() {
  return Netns("", open_thread_netns("open netns", "of the calling thread"));
}

bool Netns::remove(const std::string& name) {
  check_name("remove netns", name);
  const std::string path = netns_path(name);
  // Errors ignored as iproute2 does: a file that was never mounted is still unlinked.
  ::umount2(path.c_str(), MNT_DETACH);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    throw Error("remove netns", name, errno, "unlink " + path);
  }
  return true;
}

std::vector<std::string> sorted_dir_entries(const char* dir_path, const char* operation) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(dir_path);
  if (dir == nullptr) {
    if (errno == ENOENT) return names;
    throw Error(operation, dir_path, errno);
  }
  const std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, ::closedir);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> Netns::list() { return sorted_dir_entries(kRunDir, "list netns"); }

ino_t Netns::inode() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) throw Error("stat netns", name_, errno);
  return st.st_ino;
}

ScopedNetns::ScopedNetns(const Netns& target) : previous_(open_thread_netns("enter netns", target.name())) {
  // Already there (a router-only lab works in its own namespace): nothing to enter, and no
  // setns, which would need CAP_SYS_ADMIN even for the same namespace (containers lack it).
  struct stat here {}, there {};
  if (::fstat(previous_.get(), &here) == 0 && ::fstat(target.fd(), &there) == 0 && here.st_ino == there.st_ino &&
      here.st_dev == there.st_dev) {
    previous_ = Fd();
    return;
  }
  if (::setns(target.fd(), CLONE_NEWNET) != 0) throw Error("enter netns", target.name(), errno);
}

ScopedNetns::~ScopedNetns() {
  if (previous_) restore_or_abort(previous_, "a scoped stay");
}

void write_sysctl(const Netns& ns, const std::string& key, const std::string& value) {
  const std::string object = key + (ns.name().empty() ? "" : " in " + ns.name());
  if (key.empty() || key.front() == '/' || key == ".." || key.starts_with("../") || key.ends_with("/..") ||
      key.find("/../") != std::string::npos) {
    throw Error("write sysctl", object, EINVAL, "expected a key such as net/ipv4/ip_forward");
  }
  // /proc/sys/net resolves to the namespace of the thread that opens the file.
  const ScopedNetns inside(ns);
  const std::string path = "/proc/sys/" + key;
  const Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) throw Error("write sysctl", object, errno);
  const ssize_t written = ::write(fd.get(), value.data(), value.size());
  if (written < 0) throw Error("write sysctl", object, errno);
  if (static_cast<std::size_t>(written) != value.size()) throw Error("write sysctl", object, EIO, "short write");
}

}  // namespace wanlab::netlink
