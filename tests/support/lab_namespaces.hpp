#pragma once
// The network namespaces a lab has on this host now: every one with its "<lab>." prefix
// (test code only; what `down` must leave empty).
#include <string>
#include <vector>

#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"

namespace wanlab::test {

inline std::vector<std::string> namespaces_of(const std::string& lab) {
  std::vector<std::string> out;
  for (const auto& n : netlink::Netns::list())
    if (n.starts_with(lab::ns_prefix(lab))) out.push_back(n);
  return out;
}

}  // namespace wanlab::test
