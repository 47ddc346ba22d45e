#include "wanlab/lab/teardown.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <spdlog/spdlog.h>
#include <thread>

#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/netlink/node_entry.hpp"

namespace wanlab::lab {
namespace fs = std::filesystem;

std::vector<std::string> lab_namespaces(const std::string& lab, const std::vector<std::string>& planned) {
  const auto prefix = ns_prefix(lab);
  std::set<std::string> present;
  for (const auto& name : netlink::Netns::list()) {
    if (name.starts_with(prefix) || std::find(planned.begin(), planned.end(), name) != planned.end())
      present.insert(name);
  }
  return {present.begin(), present.end()};
}

bool leftovers_present(const std::string& lab, const std::vector<std::string>& planned) {
  if (!lab_namespaces(lab, planned).empty()) return true;
  auto ours = [&](const std::string& name) {
    return name.starts_with(ns_prefix(lab)) || std::find(planned.begin(), planned.end(), name) != planned.end();
  };
  const auto uts = netlink::Utsns::list();
  const auto etc = netlink::netns_etc_list();
  return std::any_of(uts.begin(), uts.end(), ours) || std::any_of(etc.begin(), etc.end(), ours);
}

namespace {

// PIDs of processes whose network namespace is one of `inodes`.
std::vector<pid_t> processes_in(const std::set<ino_t>& inodes) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const auto name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    struct stat st{};
    if (::stat((e.path() / "ns/net").c_str(), &st) != 0) continue;
    if (inodes.count(st.st_ino)) pids.push_back(pid);
  }
  return pids;
}

}  // namespace

TeardownReport teardown(const std::string& lab, const std::vector<std::string>& planned) {
  TeardownReport report;
  const auto names = lab_namespaces(lab, planned);
  std::set<ino_t> inodes;
  for (const auto& n : names) {
    try {
      if (auto ns = netlink::Netns::open(n)) inodes.insert(ns->inode());
    } catch (const std::exception& e) {
      // A name whose bind mount was never made (killed between the two steps) holds no
      // namespace and so no process; it is still removed below.
      spdlog::debug("{}: {}", n, e.what());
    }
  }

  if (!inodes.empty()) {
    auto pids = processes_in(inodes);
    for (pid_t p : pids) ::kill(p, SIGKILL);
    report.killed_processes = static_cast<int>(pids.size());
    // Wait (bounded) until they are gone, so their namespaces can be freed.
    for (int i = 0; i < 100 && !pids.empty(); ++i) {
      pids = processes_in(inodes);
      if (!pids.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!pids.empty()) spdlog::warn("{} process(es) in lab {} did not exit after SIGKILL", pids.size(), lab);
  }
  for (const auto& n : names)
    if (netlink::Netns::remove(n)) report.removed.push_back(n);
  // The nodes' identities (plan.hpp, CreateUtsns and WriteHosts): by the same names.
  auto ours = [&](const std::string& name) {
    return name.starts_with(ns_prefix(lab)) || std::find(planned.begin(), planned.end(), name) != planned.end();
  };
  for (const auto& n : netlink::Utsns::list())
    if (ours(n)) netlink::Utsns::remove(n);
  for (const auto& n : netlink::netns_etc_list())
    if (ours(n)) netlink::remove_netns_etc(n);
  return report;
}

}  // namespace wanlab::lab
