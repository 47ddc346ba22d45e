#include "wanlab/lab/apply.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "wanlab/netlink/node_entry.hpp"
#include "wanlab/netlink/offloads.hpp"
#include "wanlab/netlink/rps.hpp"
#include <stdexcept>

namespace wanlab::lab {
namespace {

// /etc/netns/<ns>/hosts, written whole under a temporary name and renamed into place.
void write_hosts(const std::string& ns, const std::string& text) {
  const std::filesystem::path dir = netlink::netns_etc_dir(ns);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("create {}: {}", dir.string(), ec.message()));
  const auto tmp = dir / "hosts.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw std::runtime_error(fmt::format("write {}: {}", tmp.string(), std::strerror(errno)));
  }
  std::filesystem::rename(tmp, dir / "hosts", ec);
  if (ec) throw std::runtime_error(fmt::format("rename {}: {}", tmp.string(), ec.message()));
}

}  // namespace

struct NetlinkKernel::Entry {
  netlink::Netns ns;
  std::optional<netlink::Socket> sock;
};

NetlinkKernel::NetlinkKernel() = default;
NetlinkKernel::~NetlinkKernel() = default;

void NetlinkKernel::release() { entries_.clear(); }

const netlink::Netns& NetlinkKernel::netns(const std::string& ns) {
  auto it = entries_.find(ns);
  if (it != entries_.end()) return it->second->ns;
  if (ns == kOwnNetns) {
    auto [pos, _] = entries_.emplace(ns, std::make_unique<Entry>(Entry{netlink::Netns::current(), std::nullopt}));
    return pos->second->ns;
  }
  auto opened = netlink::Netns::open(ns);
  if (!opened) throw std::runtime_error(fmt::format("network namespace {} does not exist", ns));
  auto [pos, _] = entries_.emplace(ns, std::make_unique<Entry>(Entry{std::move(*opened), std::nullopt}));
  return pos->second->ns;
}

netlink::Socket& NetlinkKernel::socket(const std::string& ns) {
  netns(ns);
  auto& e = *entries_.at(ns);
  if (!e.sock) e.sock.emplace(netlink::Socket::open_in(e.ns));
  return *e.sock;
}

void NetlinkKernel::execute(const Op& op) {
  std::visit(
      [this](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, CreateNetns>) {
          auto created = netlink::Netns::create(o.ns);
          if (!created)
            throw std::runtime_error(fmt::format("network namespace {} already exists", o.ns));
          entries_.emplace(o.ns, std::make_unique<Entry>(Entry{std::move(*created), std::nullopt}));
        } else if constexpr (std::is_same_v<T, SetSysctl>) {
          netlink::write_sysctl(netns(o.ns), o.key, o.value);
        } else if constexpr (std::is_same_v<T, CreateVeth>) {
          socket(o.ns).add_veth(o.name, o.peer, netns(o.peer_ns), o.mtu);
        } else if constexpr (std::is_same_v<T, CreateBridge>) {
          socket(o.ns).add_bridge(o.name, o.mtu);
        } else if constexpr (std::is_same_v<T, SetMaster>) {
          socket(o.ns).set_master(o.ifname, o.master);
        } else if constexpr (std::is_same_v<T, SetUp>) {
          socket(o.ns).set_up(o.ifname);
        } else if constexpr (std::is_same_v<T, SetAlias>) {
          socket(o.ns).set_alias(o.ifname, o.alias);
        } else if constexpr (std::is_same_v<T, AddAddress>) {
          socket(o.ns).add_address(o.ifname, o.prefix.address.value, o.prefix.length);
        } else if constexpr (std::is_same_v<T, AddRoute>) {
          socket(o.ns).add_route(o.dst.address.value, o.dst.length, o.via.value, o.ifname);
        } else if constexpr (std::is_same_v<T, AddHtbQdisc>) {
          socket(o.ns).add_htb_qdisc(o.ifname, o.handle, o.default_minor);
        } else if constexpr (std::is_same_v<T, AddHtbClass>) {
          socket(o.ns).add_htb_class(o.ifname, o.parent, o.classid, o.params);
        } else if constexpr (std::is_same_v<T, AddNetem>) {
          socket(o.ns).add_netem(o.ifname, o.parent, o.handle, o.params);
        } else if constexpr (std::is_same_v<T, AddPfifo>) {
          socket(o.ns).add_pfifo(o.ifname, o.parent, o.handle, o.limit);
        } else if constexpr (std::is_same_v<T, DisableOffloads>) {
          netlink::disable_offloads(netns(o.ns), o.ifname);
        } else if constexpr (std::is_same_v<T, DelRoute>) {
          socket(o.ns).delete_route(o.dst.address.value, o.dst.length);
        } else if constexpr (std::is_same_v<T, SetMac>) {
          socket(o.ns).set_mac(o.ifname, o.mac);
        } else if constexpr (std::is_same_v<T, SetForwarding>) {
          socket(o.ns).set_ipv4_forwarding(o.ifname, o.on);
        } else if constexpr (std::is_same_v<T, CreateUtsns>) {
          if (!netlink::Utsns::create(o.ns, o.hostname))
            throw std::runtime_error(fmt::format("UTS namespace /run/utsns/{} already exists", o.ns));
        } else if constexpr (std::is_same_v<T, SetRps>) {
          // Best effort: steering is a speed-up of the userspace engine, not a part of the
          // lab's behaviour; a host that refuses it (no sysfs mount allowed) still gets a lab.
          try {
            netlink::set_rps_cpus(netns(o.ns), o.ifname, o.mask);
          } catch (const netlink::Error& e) {
            if (!rps_warned_) spdlog::warn("receive steering off: {}", e.what());
            rps_warned_ = true;
          }
        } else if constexpr (std::is_same_v<T, WriteHosts>) {
          write_hosts(o.ns, o.text);
        } else if constexpr (std::is_same_v<T, AddSrcFilter>) {
          socket(o.ns).add_u32_src_filter(o.ifname, o.parent, o.prio, o.src.address.value, o.src.length, o.flowid);
        }
      },
      op);
}

void apply(const Plan& plan, Kernel& kernel, const std::function<void(std::size_t done)>& progress) {
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    try {
      kernel.execute(plan.ops[i]);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("step {}/{} ({}) failed: {}", i + 1, plan.ops.size(),
                                           to_string(plan.ops[i]), e.what()));
    }
    if (progress) progress(i + 1);
  }
}

}  // namespace wanlab::lab
