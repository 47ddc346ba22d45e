#pragma once
// A node's identity beside its network namespace, and entering a node as a process.
//  - UTS namespaces, named and kept as network namespaces are: a bind mount at
//    /run/utsns/NAME (/run/utsns a shared mount point), so a node keeps its host name with
//    no process in it, and removing the file frees it.
//  - Per-namespace files under /etc/netns/NAME/ (the lab's hosts file), shown over /etc/*
//    to whatever runs in the node, as `ip netns exec` shows them.
//  - NodeEntry: everything a child process needs to become a process of the node, opened
//    before fork(), entered after it with system calls only (the parent may have threads).
#include <string>
#include <utility>
#include <vector>

#include "wanlab/netlink/netlink.hpp"

namespace wanlab::netlink {

class Utsns {
 public:
  /// Creates /run/utsns/NAME with host name `hostname`. False if one of that name exists.
  static bool create(const std::string& name, const std::string& hostname);
  /// Unmounts and unlinks /run/utsns/NAME. False if it did not exist.
  static bool remove(const std::string& name);
  /// Names under /run/utsns.
  static std::vector<std::string> list();
};

/// /etc/netns/NAME: the files a node's processes see over /etc.
std::string netns_etc_dir(const std::string& name);
/// Names under /etc/netns.
std::vector<std::string> netns_etc_list();
/// Removes /etc/netns/NAME and what it holds. False if it did not exist.
bool remove_netns_etc(const std::string& name);

class NodeEntry {
 public:
  /// Opens /run/netns/NAME (throws Error when it cannot), /run/utsns/NAME when present (a
  /// lab made by an older wanlab has none) and lists /etc/netns/NAME/.
  explicit NodeEntry(const std::string& name);

  /// In a child between fork and exec, or in a single-threaded process about to exec:
  /// joins the network and UTS namespaces (errors returned: errno, and `*failed` names the
  /// call), then, best effort as `ip netns exec` does, a private mount namespace with /sys
  /// showing the node's interfaces and each /etc/netns/NAME/FILE bound over /etc/FILE.
  /// System calls only.
  int enter(const char** failed) const noexcept;

  const std::string& name() const { return name_; }
  bool has_uts() const { return static_cast<bool>(uts_); }

 private:
  std::string name_;
  Fd net_, uts_;
  std::vector<std::pair<std::string, std::string>> binds_;  // source, target
};

}  // namespace wanlab::netlink
