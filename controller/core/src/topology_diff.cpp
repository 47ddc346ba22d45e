// How two topologies differ, in words: what `up` of a different topology under a running
// lab's name, and `run` of a scenario made for another topology, tell the user.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "wanlab/common/units.hpp"
#include "wanlab/core/topology.hpp"

namespace wanlab::core {

bool same_dcs(const Topology& a, const Topology& b) {
  return std::equal(a.dcs.begin(), a.dcs.end(), b.dcs.begin(), b.dcs.end(), [](const Dc& x, const Dc& y) {
    return x.name == y.name && x.nodes == y.nodes && x.gpus_per_node == y.gpus_per_node && x.gpu == y.gpu;
  });
}

std::vector<std::string> topology_differences(const Topology& running, const Topology& other) {
  std::vector<std::string> out;
  const auto vs = [](const std::string& a, const std::string& b) { return fmt::format("{} (running) vs {}", a, b); };
  for (const auto& dc : running.dcs) {
    const auto k = other.dc_index(dc.name);
    if (!k) {
      out.push_back(fmt::format("DC {}: only in the running lab", dc.name));
      continue;
    }
    const auto& o = other.dcs[*k];
    if (dc.nodes != o.nodes) out.push_back(fmt::format("DC {}: {}", dc.name, vs(fmt::format("{} nodes", dc.nodes),
                                                                                fmt::format("{}", o.nodes))));
    if (dc.gpus_per_node != o.gpus_per_node || dc.gpu != o.gpu)
      out.push_back(fmt::format("DC {}: {}", dc.name, vs(fmt::format("{}x{} per node", dc.gpus_per_node, dc.gpu),
                                                         fmt::format("{}x{}", o.gpus_per_node, o.gpu))));
  }
  for (const auto& dc : running.dcs)
    if (const auto k = other.dc_index(dc.name); k && dc.fabric != other.dcs[*k].fabric)
      out.push_back(fmt::format("DC {}: fabric {}", dc.name, vs(to_string(dc.fabric), to_string(other.dcs[*k].fabric))));
  for (const auto& dc : other.dcs)
    if (!running.dc_index(dc.name)) out.push_back(fmt::format("DC {}: not in the running lab", dc.name));
  if (out.empty() && !same_dcs(running, other)) out.push_back("DCs: in another order");
  if (running.lan.rate != other.lan.rate)
    out.push_back(fmt::format("LAN: rate {}", vs(wanlab::to_string(running.lan.rate), wanlab::to_string(other.lan.rate))));
  if (running.lan.delay != other.lan.delay)
    out.push_back(fmt::format("LAN: delay {}", vs(wanlab::to_string(running.lan.delay), wanlab::to_string(other.lan.delay))));
  if (running.lan.mtu != other.lan.mtu)
    out.push_back(fmt::format("LAN: MTU {}", vs(std::to_string(running.lan.mtu), std::to_string(other.lan.mtu))));
  // Links by DC names (the DCs' order may differ).
  const auto find = [](const Topology& t, const std::string& src, const std::string& dst) -> const WanLink* {
    const auto s = t.dc_index(src), d = t.dc_index(dst);
    return s && d ? t.find_link(*s, *d) : nullptr;
  };
  for (const auto& l : running.links) {
    const auto& src = running.dcs[l.src].name;
    const auto& dst = running.dcs[l.dst].name;
    const auto name = fmt::format("link {}->{}", src, dst);
    const auto* o = find(other, src, dst);
    if (!o) {
      out.push_back(name + ": only in the running lab");
      continue;
    }
    const auto& a = l.params;
    const auto& b = o->params;
    const auto field = [&](const char* what, const std::string& x, const std::string& y) {
      if (x != y) out.push_back(fmt::format("{}: {} {}", name, what, vs(x, y)));
    };
    field("trace", l.trace ? l.trace->string() : "none", o->trace ? o->trace->string() : "none");
    // A replaying link's parameters move with its trace: only which trace it replays counts.
    if (l.trace || o->trace) continue;
    field("rate", wanlab::to_string(a.rate), wanlab::to_string(b.rate));
    field("delay", wanlab::to_string(a.delay), wanlab::to_string(b.delay));
    field("jitter", wanlab::to_string(a.jitter), wanlab::to_string(b.jitter));
    field("loss", wanlab::to_string(a.loss), wanlab::to_string(b.loss));
    field("loss burst", a.loss_burst ? wanlab::to_string(*a.loss_burst) : "off", b.loss_burst ? wanlab::to_string(*b.loss_burst) : "off");
    field("queue", a.queue ? wanlab::to_string(*a.queue) : "auto", b.queue ? wanlab::to_string(*b.queue) : "auto");
  }
  for (const auto& l : other.links)
    if (!find(running, other.dcs[l.src].name, other.dcs[l.dst].name))
      out.push_back(fmt::format("link {}->{}: not in the running lab", other.dcs[l.src].name, other.dcs[l.dst].name));
  return out;
}

}  // namespace wanlab::core
