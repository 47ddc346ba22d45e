#include "wanlab/netlink/rps.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>

#include <fmt/format.h>

#include "wanlab/common/child_process.hpp"
#include "wanlab/common/system_error.hpp"
#include "wanlab/common/unique_fd.hpp"

namespace wanlab::netlink {

std::string rps_mask(const std::vector<int>& cpus) {
  int top = -1;
  for (int c : cpus) top = std::max(top, c);
  if (top < 0) return "0";
  std::vector<std::uint32_t> words(static_cast<std::size_t>(top / 32 + 1), 0);
  for (int c : cpus)
    if (c >= 0) words[static_cast<std::size_t>(c / 32)] |= 1U << (c % 32);
  std::string out = fmt::format("{:x}", words.back());
  for (std::size_t i = words.size() - 1; i-- > 0;) out += fmt::format(",{:08x}", words[i]);
  return out;
}

std::vector<int> allowed_cpus_except(int excluded) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set) && c != excluded) out.push_back(c);
  return out;
}

namespace {

// What the child reports through its pipe: the step that failed (0: none) and its errno,
// then, for a read, the file's text.
struct Report {
  int step;
  int err;
};

constexpr std::array<const char*, 6> kSteps{"", "enter the network namespace", "unshare the mount namespace",
                                            "make mounts private", "mount sysfs", "open rps_cpus"};
constexpr int kMaxQueues = 64;

// In the child: only system calls (async-signal-safe), everything else prepared before fork.
[[noreturn]] void child(int netns_fd, int out_fd, const std::vector<std::string>& paths, const std::string* value) {
  auto fail = [&](int step) {
    const Report r{step, errno};
    (void)!::write(out_fd, &r, sizeof r);
    ::_exit(1);
  };
  if (::setns(netns_fd, CLONE_NEWNET) != 0) fail(1);
  if (::unshare(CLONE_NEWNS) != 0) fail(2);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(3);
  ::umount2("/sys", MNT_DETACH);
  if (::mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) fail(4);
  char text[256];
  ssize_t got = 0;
  for (std::size_t q = 0; q < paths.size(); ++q) {
    const UniqueFd fd(::open(paths[q].c_str(), value ? O_WRONLY | O_CLOEXEC : O_RDONLY | O_CLOEXEC));
    if (!fd) {
      if (q > 0 && errno == ENOENT) break;  // past the last queue
      fail(5);
    }
    if (value) {
      const ssize_t w = ::write(fd.get(), value->data(), value->size());
      if (w < 0) {
        const Report r{6, errno};
        (void)!::write(out_fd, &r, sizeof r);
        ::_exit(1);
      }
    } else {
      got = ::read(fd.get(), text, sizeof text);
      if (got < 0) got = 0;
    }
    if (!value) break;  // rx-0 only
  }
  const Report ok{0, 0};
  (void)!::write(out_fd, &ok, sizeof ok);
  if (got > 0) (void)!::write(out_fd, text, static_cast<std::size_t>(got));
  ::_exit(0);
}

std::string in_child(const Netns& ns, const std::string& ifname, const std::string* value) {
  const std::string object = fmt::format("rps_cpus of {} in {}", ifname, ns.name());
  if (ifname.empty() || ifname.find('/') != std::string::npos || ifname == "." || ifname == "..")
    throw Error(value ? "write" : "read", object, EINVAL, "not an interface name");
  std::vector<std::string> paths;
  for (int q = 0; q < (value ? kMaxQueues : 1); ++q)
    paths.push_back(fmt::format("/sys/class/net/{}/queues/rx-{}/rps_cpus", ifname, q));
  Pipe report;
  ChildProcess helper;
  try {
    report = make_pipe(object.c_str());
    const int out_fd = report.write.get();
    helper = ChildProcess::fork_call(object, [&]() -> int { child(ns.fd(), out_fd, paths, value); });
  } catch (const SystemError& e) {
    throw Error(e.call(), object, e.code());
  }
  report.write.reset();
  std::string data;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(report.read.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  report.read.reset();
  try {
    helper.wait();
  } catch (const SystemError&) {
    // Its report (or the lack of one) says how it went.
  }
  if (data.size() < sizeof(Report)) throw Error(value ? "write" : "read", object, EIO, "the helper process died");
  Report r{};
  std::copy_n(data.data(), sizeof r, reinterpret_cast<char*>(&r));
  if (r.step != 0) {
    const char* what = r.step == 6 ? "write value" : kSteps[static_cast<std::size_t>(r.step)];
    throw Error(value ? "write" : "read", object, r.err, what);
  }
  std::string text = data.substr(sizeof r);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

void set_rps_cpus(const Netns& ns, const std::string& ifname, const std::string& mask) {
  in_child(ns, ifname, &mask);
}

std::string rps_cpus(const Netns& ns, const std::string& ifname) { return in_child(ns, ifname, nullptr); }

}  // namespace wanlab::netlink
