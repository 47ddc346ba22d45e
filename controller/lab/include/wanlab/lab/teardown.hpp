#pragma once
// Removing a lab: every namespace it planned, plus any namespace carrying its prefix
// (objects made before a crash that the state file did not yet name). Processes still
// running inside those namespaces (iperf3 servers, agents) are killed first, since a
// namespace with a process in it outlives its name.
#include <string>
#include <vector>

namespace wanlab::lab {

struct TeardownReport {
  std::vector<std::string> removed;  // namespaces that existed and were removed
  int killed_processes = 0;
};

/// The lab's namespaces present now: those named in `planned` or starting with "<lab>.".
std::vector<std::string> lab_namespaces(const std::string& lab, const std::vector<std::string>& planned);

/// Whether anything of the lab is present: a namespace (as above), a node's UTS namespace
/// (/run/utsns) or its files (/etc/netns).
bool leftovers_present(const std::string& lab, const std::vector<std::string>& planned);

TeardownReport teardown(const std::string& lab, const std::vector<std::string>& planned);

}  // namespace wanlab::lab
