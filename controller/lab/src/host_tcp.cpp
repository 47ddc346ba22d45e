#include "wanlab/lab/host_tcp.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace wanlab::lab {
namespace {

constexpr const char* kAllowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
constexpr const char* kAvailable = "/proc/sys/net/ipv4/tcp_available_congestion_control";

std::optional<std::string> read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// Writes the host's allowed list; 0 or errno.
int write_allowed(const std::string& list) {
  std::FILE* f = std::fopen(kAllowed, "w");
  if (f == nullptr) return errno;
  const bool ok = std::fputs(list.c_str(), f) >= 0;
  const int err = ok ? 0 : errno;
  if (std::fclose(f) != 0) return errno != 0 ? errno : EIO;
  return err;
}

}  // namespace

std::optional<std::string> allowed_list_with(const std::string& allowed, const std::string& name) {
  std::istringstream in(allowed);
  std::string out;
  for (std::string w; in >> w;) {
    if (w == name) return std::nullopt;
    out += (out.empty() ? "" : " ") + w;
  }
  return out + (out.empty() ? "" : " ") + name;
}

std::string allow_tcp_congestion(const std::string& name) {
  const auto allowed = read_line(kAllowed);
  if (!allowed) return fmt::format("cannot read {}", kAllowed);
  const auto wanted = allowed_list_with(*allowed, name);
  if (!wanted) return "";
  if (const int err = write_allowed(*wanted); err != 0)
    return fmt::format("the host allows namespaces only \"{}\" and this process cannot add {} ({}): as root on the "
                       "host, run: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{}\"",
                       *allowed, name, std::strerror(err), *wanted);
  return "";
}

CongestionChoice choose_tcp_congestion(const core::Topology& topo) {
  const bool named = topo.node.tcp_congestion.has_value();
  const std::string name = named ? *topo.node.tcp_congestion : core::kDefaultTcpCongestion;
  const auto allowed = read_line(kAllowed);
  if (!allowed) {
    const auto why = fmt::format("cannot read {}: the lab's nodes keep the host's congestion control", kAllowed);
    if (named) throw std::runtime_error(fmt::format("node.tcp_congestion {}: {}", name, why));
    return {std::nullopt, why};
  }
  const auto wanted = allowed_list_with(*allowed, name);
  if (!wanted) return {name, ""};
  if (const int err = write_allowed(*wanted); err != 0) {
    const auto available = read_line(kAvailable).value_or("?");
    const auto why =
        err == ENOENT || err == EINVAL
            ? fmt::format("this kernel has no TCP congestion control '{}' (available: {})", name, available)
            : fmt::format("the host allows namespaces only \"{}\" and this process cannot add {} ({}): as root on "
                          "the host, run: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{}\"",
                          *allowed, name, std::strerror(err), *wanted);
    if (named) throw std::runtime_error(fmt::format("node.tcp_congestion {}: {}", name, why));
    return {std::nullopt, fmt::format("the lab's nodes keep the host's congestion control, not {}: {}", name, why)};
  }
  return {name, fmt::format("added {} to the host's net.ipv4.tcp_allowed_congestion_control (now \"{}\"): a "
                            "namespace may only use congestion controls the host allows",
                            name, *wanted)};
}

}  // namespace wanlab::lab
