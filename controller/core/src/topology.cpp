// Topology files: reading, validation (every problem at once, each with its JSON path),
// and the canonical JSON form. The format is documented in topologies/README.md.
#include "wanlab/core/topology.hpp"
#include "wanlab/core/round_trip.hpp"

#include "wanlab/common/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/core/json_fields.hpp"

namespace wanlab::core {
namespace fs = std::filesystem;
using nlohmann::json;
__extension__ using u128 = unsigned __int128;

namespace {

using Keys = std::span<const std::string_view>;
constexpr std::string_view kTopKeys[] = {"name", "description", "lan", "node", "dcs", "wan"};
constexpr std::string_view kNodeKeys[] = {"tcp_congestion", "sysctls"};
constexpr std::string_view kLanKeys[] = {"rate", "delay", "mtu"};
constexpr std::string_view kDcKeys[] = {"name", "region", "nodes", "gpus_per_node", "gpu", "free_gpus", "fabric"};
constexpr std::string_view kFabricKeys[] = {"type", "switching", "rails", "port_rate", "reconfiguration",
                                            "during_reconfiguration"};
constexpr std::string_view kFabricTypes[] = {"packet", "rails"};
constexpr std::string_view kSwitchings[] = {"packet", "ocs"};
constexpr std::string_view kDuringReconfiguration[] = {"hold"};
constexpr std::string_view kWanKeys[] = {"between", "from", "to",         "delay", "rtt",  "rate",
                                         "jitter",  "loss", "loss_burst", "queue", "trace"};

constexpr std::string_view kRateText = "a string with a unit such as \"4Gbit\"";
constexpr std::string_view kDurationText = "a string with a unit such as \"68ms\"";
constexpr std::string_view kPercentText = "a percentage string such as \"0.1%\"";
constexpr std::string_view kLossBurstText = "a string of percentages \"P R [BAD]\" such as \"0.5% 25%\"";
constexpr std::string_view kQueueText = "a string such as \"1000p\" (packets) or \"4MB\" (bytes)";

constexpr int kMinMtu = 576;  // the smallest MTU every IPv4 host must accept
constexpr int kMaxMtu = 9000;
constexpr int kMaxGpusPerNode = 16;
// A DC's free GPUs for planning: far beyond any one site today, small enough for int sums.
constexpr int kMaxFreeGpus = 10'000'000;

// --- typed field access ---------------------------------------------------------------------

using fields::as_string;
using fields::check_keys;
using fields::child;
using fields::describe;
using fields::find;
using fields::is_object;
using fields::join;

std::optional<std::int64_t> as_integer(const json& v, const std::string& path, Diagnostics& d) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    return u > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  d.add(path, fmt::format("expected an integer, got {}", describe(v)));
  return std::nullopt;
}

template <class T>
std::optional<T> as_unit(const json& v, const std::string& path, Parsed<T> (*parse)(std::string_view),
                         std::string_view what, Diagnostics& d) {
  if (!v.is_string()) {
    d.add(path, fmt::format("expected {}, got {}", what, describe(v)));
    return std::nullopt;
  }
  auto parsed = parse(v.get_ref<const std::string&>());
  if (!parsed) {
    d.add(path, parsed.error);
    return std::nullopt;
  }
  return parsed.value;
}

// --- names ----------------------------------------------------------------------------------

bool lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

void check_lab_name(const std::string& name, const std::string& path, Diagnostics& d) {
  constexpr std::string_view why =
      "the lab name prefixes kernel object names and paths, and '.' separates the parts of namespace names";
  const bool chars_ok = !name.empty() && lower_alnum(name.front()) &&
                        std::all_of(name.begin(), name.end(), [](char c) { return lower_alnum(c) || c == '-'; });
  if (!chars_ok)
    d.add(path, fmt::format("'{}': use lowercase letters, digits and '-', starting with a letter or digit "
                            "([a-z0-9][a-z0-9-]*): {}",
                            name, why));
  else if (name.size() > kMaxLabName)
    d.add(path, fmt::format("'{}' is {} characters, at most {} allowed: {}", name, name.size(), kMaxLabName, why));
}

void check_dc_name(const std::string& name, const std::string& path, Diagnostics& d) {
  constexpr std::string_view why =
      "DC names build interface names such as \"<dc>-1020-p\", which Linux limits to 15 characters";
  const bool chars_ok =
      !name.empty() && name.front() >= 'a' && name.front() <= 'z' && std::all_of(name.begin(), name.end(), lower_alnum);
  if (!chars_ok)
    d.add(path, fmt::format("'{}': use lowercase letters and digits, starting with a letter ([a-z][a-z0-9]*): {}", name,
                            why));
  else if (name.size() > kMaxDcName)
    d.add(path, fmt::format("'{}' is {} characters, at most {} allowed: {}", name, name.size(), kMaxDcName, why));
}

// --- sections -------------------------------------------------------------------------------

// A congestion control's name as the kernel knows it (TCP_CA_NAME_MAX is 16 with the NUL).
bool valid_congestion_name(const std::string& s) {
  return !s.empty() && s.size() < 16 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; });
}

// A per-namespace sysctl: net.* only (other trees are the host's, shared by every
// namespace), dotted, no empty or parent components.
bool valid_node_sysctl(const std::string& key) {
  if (!key.starts_with("net.") || key.size() > 200) return false;
  std::size_t start = 0;
  while (start <= key.size()) {
    const auto end = std::min(key.find('.', start), key.size());
    const auto part = key.substr(start, end - start);
    if (part.empty() || part == ".." ||
        !std::all_of(part.begin(), part.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-'; }))
      return false;
    start = end + 1;
  }
  return true;
}

void parse_node(const json& v, NodeSettings& node, Diagnostics& d) {
  const std::string path = "/node";
  if (!is_object(v, path, "an object with \"tcp_congestion\" and/or \"sysctls\"", d)) return;
  check_keys(v, path, kNodeKeys, d);
  if (const auto* cc = find(v, "tcp_congestion")) {
    if (auto name = as_string(*cc, child(path, "tcp_congestion"), "a congestion control such as \"cubic\"", d)) {
      if (valid_congestion_name(*name))
        node.tcp_congestion = *name;
      else
        d.add(child(path, "tcp_congestion"),
              fmt::format("'{}' is not a congestion control name (lower-case letters, digits, '_', at most 15 "
                          "characters, e.g. \"cubic\", \"bbr\", \"reno\")",
                          *name));
    }
  }
  if (const auto* s = find(v, "sysctls")) {
    const auto at = child(path, "sysctls");
    if (!is_object(*s, at, "an object of sysctls, e.g. {\"net.ipv4.tcp_rmem\": \"4096 131072 6291456\"}", d)) return;
    for (const auto& [key, value] : s->items()) {
      const auto here = child(at, key);
      if (!valid_node_sysctl(key)) {
        d.add(here, "not a per-namespace sysctl: give a dotted net.* key such as \"net.ipv4.tcp_rmem\" (other "
                    "trees belong to the host and every namespace shares them)");
        continue;
      }
      if (key == "net.ipv4.tcp_congestion_control") {
        d.add(here, "set it with \"tcp_congestion\" (the host's allowed list is checked for it)");
        continue;
      }
      if (value.is_string())
        node.sysctls.emplace_back(key, value.get<std::string>());
      else if (value.is_number_integer())
        node.sysctls.emplace_back(key, value.dump());
      else
        d.add(here, fmt::format("expected a string or an integer, got {}", describe(value)));
    }
  }
}

void parse_lan(const json& v, Lan& lan, Diagnostics& d) {
  const std::string path = "/lan";
  if (!is_object(v, path, "an object with \"rate\", \"delay\" and \"mtu\"", d)) return;
  check_keys(v, path, kLanKeys, d);
  if (const auto* r = find(v, "rate")) {
    if (auto rate = as_unit(*r, child(path, "rate"), parse_rate, kRateText, d)) {
      if (rate->bps == 0)
        d.add(child(path, "rate"), "must be positive; leave \"rate\" out for an unshaped LAN");
      else
        lan.rate = *rate;
    }
  }
  if (const auto* delay = find(v, "delay"))
    if (auto t = as_unit(*delay, child(path, "delay"), parse_duration, kDurationText, d)) lan.delay = *t;
  if (const auto* m = find(v, "mtu")) {
    if (auto mtu = as_integer(*m, child(path, "mtu"), d)) {
      if (*mtu < kMinMtu || *mtu > kMaxMtu)
        d.add(child(path, "mtu"),
              fmt::format("{} is outside {}..{} (the IPv4 minimum to jumbo frames)", *mtu, kMinMtu, kMaxMtu));
      else
        lan.mtu = static_cast<int>(*mtu);
    }
  }
}

// A DC's "fabric": "packet", or an object (docs/rails.md). Checked after gpus_per_node.
void parse_fabric(const json& v, const std::string& at, Dc& dc, Diagnostics& d) {
  Fabric f;
  if (v.is_string()) {
    if (auto type = fields::as_choice(v, at, "a fabric type", kFabricTypes, d)) {
      if (*type == "rails")
        d.add(at, "rails need their port rate: give an object such as {\"type\": \"rails\", \"switching\": "
                  "\"ocs\", \"port_rate\": \"400Gbit\", \"reconfiguration\": \"10ms\"}");
    }
    dc.fabric = f;
    return;
  }
  if (!is_object(v, at, "\"packet\" or an object such as {\"type\": \"rails\", \"switching\": \"ocs\", ...}", d))
    return;
  check_keys(v, at, kFabricKeys, d);
  const auto* type = find(v, "type");
  if (type == nullptr) {
    d.add(child(at, "type"), "missing: give \"packet\" (one LAN) or \"rails\" (one rail per GPU of a node)");
    return;
  }
  const auto kind = fields::as_choice(*type, child(at, "type"), "a fabric type", kFabricTypes, d);
  if (!kind) return;
  if (*kind == "packet") {
    for (const auto key : {"switching", "rails", "port_rate", "reconfiguration", "during_reconfiguration"})
      if (find(v, key) != nullptr)
        d.add(child(at, key), "only a \"rails\" fabric has it; a \"packet\" DC is one LAN (the topology's \"lan\")");
    dc.fabric = f;
    return;
  }
  f.kind = Fabric::Kind::rails;
  bool switching_known = false;  // else the settings that depend on it are not checked
  if (const auto* sw = find(v, "switching")) {
    if (auto name = fields::as_choice(*sw, child(at, "switching"), "a switching kind", kSwitchings, d)) {
      f.switching = *name == "ocs" ? Fabric::Switching::ocs : Fabric::Switching::packet;
      switching_known = true;
    }
  } else {
    d.add(child(at, "switching"), "missing: give \"packet\" (electrical rail switches) or \"ocs\" (optical circuit "
                                  "switches)");
  }
  f.rails = dc.gpus_per_node;
  if (const auto* r = find(v, "rails")) {
    if (auto rails = as_integer(*r, child(at, "rails"), d)) {
      if (*rails != dc.gpus_per_node)
        d.add(child(at, "rails"),
              fmt::format("{} rails in a DC of {} GPUs per node: rail k joins GPU k of every node, so a DC has "
                          "as many rails as GPUs per node",
                          *rails, dc.gpus_per_node));
    }
  }
  if (dc.gpus_per_node < 1)
    d.add(child(at, "rails"), "a DC without GPUs has no rails (rail k joins GPU k of every node)");
  if (const auto* r = find(v, "port_rate")) {
    if (auto rate = as_unit(*r, child(at, "port_rate"), parse_rate, kRateText, d)) {
      if (rate->bps == 0)
        d.add(child(at, "port_rate"), "must be positive: each GPU's port on its rail, e.g. \"400Gbit\"");
      else
        f.port_rate = *rate;
    }
  } else {
    d.add(child(at, "port_rate"), "missing: give each GPU's port rate on its rail, e.g. \"400Gbit\"");
  }
  const auto* rc = switching_known ? find(v, "reconfiguration") : nullptr;
  if (switching_known && f.switching == Fabric::Switching::ocs && rc == nullptr)
    d.add(child(at, "reconfiguration"),
          "missing: give the OCS reconfiguration latency, e.g. \"10us\" (fast switches) to \"25ms\" (MEMS)");
  if (rc != nullptr && f.switching != Fabric::Switching::ocs) {
    d.add(child(at, "reconfiguration"), "only an OCS (\"switching\": \"ocs\") reconfigures; packet rails have none");
  } else if (rc != nullptr) {
    const auto rpath = child(at, "reconfiguration");
    if (rc->is_string() && rc->get_ref<const std::string&>().starts_with("-")) {
      d.add(rpath, fmt::format("'{}': a reconfiguration latency must not be negative (OCS switch in about 10us to "
                               "25ms)",
                               rc->get<std::string>()));
    } else if (auto t = as_unit(*rc, rpath, parse_duration, kDurationText, d)) {
      if (*t > kMaxReconfiguration)
        d.add(rpath, fmt::format("{} is longer than {}: no optical circuit switch takes that long (MEMS: about 10 "
                                 "to 25 ms)",
                                 wanlab::to_string(*t), wanlab::to_string(kMaxReconfiguration)));
      else
        f.reconfiguration = *t;
    }
  }
  if (const auto* h = switching_known ? find(v, "during_reconfiguration") : nullptr) {
    const auto hp = child(at, "during_reconfiguration");
    if (f.switching != Fabric::Switching::ocs)
      d.add(hp, "only an OCS (\"switching\": \"ocs\") reconfigures; packet rails have none");
    else
      fields::as_choice(*h, hp, "what happens to traffic during a reconfiguration", kDuringReconfiguration, d);
  }
  dc.fabric = f;
}

// The DCs, one Dc per entry (a default one for a broken entry) so indices match /dcs/<i>.
// `names` maps each name given as a string (valid or not) to its index, for the WAN section.
void parse_dcs(const json* dcs, Topology& t, std::map<std::string, std::size_t>& names, Diagnostics& d) {
  const std::string path = "/dcs";
  if (dcs == nullptr) {
    d.add(path, "missing: list the lab's DCs, e.g. [{\"name\": \"use\", \"nodes\": 2}]");
    return;
  }
  if (!dcs->is_array()) {
    d.add(path, fmt::format("expected an array of DCs, got {}", describe(*dcs)));
    return;
  }
  if (dcs->empty()) d.add(path, "empty: a lab needs at least one DC");
  if (dcs->size() > static_cast<std::size_t>(kMaxDcs))
    d.add(path, fmt::format("{} DCs are too many for the address plan (at most {}: each has a /22 in 198.18.0.0/16)",
                            dcs->size(), kMaxDcs));
  std::map<std::string, std::string> first_path;  // name -> path of its first declaration
  for (std::size_t i = 0; i < dcs->size(); ++i) {
    const auto& v = (*dcs)[i];
    const std::string at = child(path, i);
    Dc& dc = t.dcs.emplace_back();
    if (!is_object(v, at, "an object such as {\"name\": \"use\", \"nodes\": 2}", d)) continue;
    check_keys(v, at, kDcKeys, d);

    if (const auto* n = find(v, "name")) {
      if (auto name = as_string(*n, child(at, "name"), "a DC name such as \"use\"", d)) {
        check_dc_name(*name, child(at, "name"), d);
        if (auto [it, fresh] = first_path.try_emplace(*name, child(at, "name")); !fresh)
          d.add(child(at, "name"), fmt::format("duplicate DC name \"{}\" (also at {})", *name, it->second));
        else
          names.emplace(*name, i);
        dc.name = *name;
      }
    } else {
      d.add(child(at, "name"), "missing: every DC needs a name such as \"use\"");
    }

    if (const auto* r = find(v, "region"))
      if (auto region = as_string(*r, child(at, "region"), "a string such as \"aws:us-east-1\"", d))
        dc.region = *region;

    if (const auto* n = find(v, "nodes")) {
      if (auto nodes = as_integer(*n, child(at, "nodes"), d)) {
        if (*nodes < 1)
          d.add(child(at, "nodes"), fmt::format("{}: a DC needs at least 1 node", *nodes));
        else if (*nodes > kMaxNodesPerDc)
          d.add(child(at, "nodes"),
                fmt::format("{}: too many nodes for the address plan (a DC has a /22: at most {} nodes)", *nodes,
                            kMaxNodesPerDc));
        else
          dc.nodes = static_cast<int>(*nodes);
      }
    } else {
      d.add(child(at, "nodes"), "missing: give the number of nodes (servers) in this DC, at least 1");
    }

    if (const auto* g = find(v, "gpus_per_node")) {
      if (auto gpus = as_integer(*g, child(at, "gpus_per_node"), d)) {
        if (*gpus < 0 || *gpus > kMaxGpusPerNode)
          d.add(child(at, "gpus_per_node"), fmt::format("{} is outside 0..{}", *gpus, kMaxGpusPerNode));
        else
          dc.gpus_per_node = static_cast<int>(*gpus);
      }
    }

    // Read by `wanlab plan` only (planner::topology_offers); the lab builds `nodes` nodes.
    if (const auto* f = find(v, "free_gpus")) {
      if (auto gpus = as_integer(*f, child(at, "free_gpus"), d)) {
        if (*gpus < 0 || *gpus > kMaxFreeGpus)
          d.add(child(at, "free_gpus"), fmt::format("{} is outside 0..{} (the GPUs this DC has free for a job, "
                                                    "for wanlab plan)", *gpus, kMaxFreeGpus));
      }
    }

    if (const auto* g = find(v, "gpu")) {
      if (auto gpu = as_string(*g, child(at, "gpu"), "a GPU kind such as \"H100\"", d)) {
        const auto& kinds = known_gpu_kinds();
        if (std::find(kinds.begin(), kinds.end(), *gpu) == kinds.end())
          d.add(child(at, "gpu"), fmt::format("unknown GPU kind \"{}\"; known kinds: {}", *gpu, join(kinds)));
        else
          dc.gpu = *gpu;
      }
    }

    if (const auto* f = find(v, "fabric")) parse_fabric(*f, child(at, "fabric"), dc, d);
  }
}

class WanParser {
 public:
  WanParser(Topology& t, const std::map<std::string, std::size_t>& names, const fs::path& base_dir, Diagnostics& d)
      : t_(t), names_(names), base_dir_(base_dir), d_(d) {}

  void parse(const json* wan) {
    const std::string path = "/wan";
    const std::size_t dc_count = t_.dcs.size();
    if (wan == nullptr) {
      if (dc_count > 1) d_.add(path, fmt::format("missing: a lab of {} DCs needs WAN links between them", dc_count));
      return;
    }
    if (!wan->is_array()) {
      d_.add(path, fmt::format("expected an array of links, got {}", describe(*wan)));
      return;
    }
    if (wan->empty() && dc_count > 1)
      d_.add(path, fmt::format("empty: a lab of {} DCs needs WAN links between them", dc_count));
    for (std::size_t i = 0; i < wan->size(); ++i) entry((*wan)[i], child(path, i));
    check_reverse_links();
  }

 private:
  struct Endpoints {
    std::size_t a = 0;
    std::size_t b = 0;
    bool both_ways = false;
  };

  std::string link_name(std::size_t src, std::size_t dst) const {
    return fmt::format("{}->{}", t_.dcs[src].name, t_.dcs[dst].name);
  }

  void entry(const json& v, const std::string& at) {
    if (!is_object(v, at,
                   "an object such as {\"between\": [\"use\", \"euw\"], \"rtt\": \"84.9ms\", \"rate\": \"4.31Gbit\"}",
                   d_))
      return;
    check_keys(v, at, kWanKeys, d_);
    auto ends = endpoints(v, at);
    LinkParams params;
    std::optional<fs::path> trace;
    link_params(v, at, params, trace);
    // Links are registered even when their parameters are wrong, so that the duplicate and
    // reverse-link checks do not add noise to the real error.
    if (ends) add_links(*ends, params, trace, at);
  }

  std::optional<std::size_t> dc(const json& v, const std::string& at) {
    auto name = as_string(v, at, "a DC name", d_);
    if (!name) return std::nullopt;
    if (auto it = names_.find(*name); it != names_.end()) return it->second;
    std::vector<std::string> known;
    for (const auto& dc : t_.dcs)
      if (!dc.name.empty() && std::find(known.begin(), known.end(), dc.name) == known.end()) known.push_back(dc.name);
    d_.add(at, fmt::format("unknown DC \"{}\"; known DCs: {}", *name, known.empty() ? "(none)" : join(known)));
    return std::nullopt;
  }

  std::optional<Endpoints> endpoints(const json& v, const std::string& at) {
    const json* between = find(v, "between");
    const json* from = find(v, "from");
    const json* to = find(v, "to");
    if (between != nullptr && (from != nullptr || to != nullptr)) {
      d_.add(at, "give either \"between\" (both directions) or \"from\" and \"to\" (one direction), not both");
      return std::nullopt;
    }
    if (between != nullptr) {
      const std::string bp = child(at, "between");
      if (!between->is_array() || between->size() != 2) {
        d_.add(bp, fmt::format("expected an array of two DC names, got {}", describe(*between)));
        return std::nullopt;
      }
      auto a = dc((*between)[0], child(bp, 0));
      auto b = dc((*between)[1], child(bp, 1));
      if (!a || !b) return std::nullopt;
      if (*a == *b) {
        d_.add(bp, fmt::format("links DC \"{}\" to itself; a WAN link joins two different DCs", t_.dcs[*a].name));
        return std::nullopt;
      }
      return Endpoints{*a, *b, true};
    }
    if (from == nullptr && to == nullptr) {
      d_.add(at,
             "give the DCs the link joins: \"between\": [\"a\", \"b\"] for both directions, or \"from\" and \"to\"");
      return std::nullopt;
    }
    if (from == nullptr) d_.add(child(at, "from"), "missing: a directed link needs \"from\" as well as \"to\"");
    if (to == nullptr) d_.add(child(at, "to"), "missing: a directed link needs \"to\" as well as \"from\"");
    std::optional<std::size_t> a, b;
    if (from != nullptr) a = dc(*from, child(at, "from"));
    if (to != nullptr) b = dc(*to, child(at, "to"));
    if (!a || !b) return std::nullopt;
    if (*a == *b) {
      d_.add(child(at, "to"),
             fmt::format("links DC \"{}\" to itself; a WAN link joins two different DCs", t_.dcs[*a].name));
      return std::nullopt;
    }
    return Endpoints{*a, *b, false};
  }

  void link_params(const json& v, const std::string& at, LinkParams& p, std::optional<fs::path>& trace) {
    const json* delay = find(v, "delay");
    const json* rtt = find(v, "rtt");
    std::optional<Duration> one_way;
    if (delay != nullptr && rtt != nullptr) {
      d_.add(at, "give either the one-way \"delay\" or the \"rtt\", not both");
    } else if (delay == nullptr && rtt == nullptr) {
      d_.add(at, "give the one-way delay or the rtt; \"0ms\" for none");
    } else if (delay != nullptr) {
      one_way = as_unit(*delay, child(at, "delay"), parse_duration, kDurationText, d_);
    } else if (auto r = as_unit(*rtt, child(at, "rtt"), parse_duration, kDurationText, d_)) {
      one_way = *r / 2;  // each direction carries half the round trip
    }
    if (one_way) p.delay = *one_way;

    const std::string rate_path = child(at, "rate");
    if (const json* r = find(v, "rate")) {
      if (auto rate = as_unit(*r, rate_path, parse_rate, kRateText, d_)) {
        if (rate->bps == 0)
          d_.add(rate_path, "missing or non-positive rate; give the link's bandwidth, e.g. \"4Gbit\"");
        else
          p.rate = *rate;
      }
    } else {
      d_.add(rate_path, "missing or non-positive rate; give the link's bandwidth, e.g. \"4Gbit\"");
    }

    if (const json* j = find(v, "jitter")) {
      if (auto jitter = as_unit(*j, child(at, "jitter"), parse_duration, kDurationText, d_)) {
        if (one_way && *jitter > *one_way)
          d_.add(child(at, "jitter"),
                 fmt::format("jitter {} exceeds the one-way delay {}; a packet cannot arrive before it was sent",
                             wanlab::to_string(*jitter), wanlab::to_string(*one_way)));
        else
          p.jitter = *jitter;
      }
    }

    if (const json* l = find(v, "loss"))
      if (auto loss = as_unit(*l, child(at, "loss"), parse_percent, kPercentText, d_)) p.loss = *loss;
    if (const json* b = find(v, "loss_burst"))
      if (auto burst = as_unit(*b, child(at, "loss_burst"), parse_loss_burst, kLossBurstText, d_)) p.loss_burst = *burst;

    if (const json* q = find(v, "queue"))
      if (auto queue = as_unit(*q, child(at, "queue"), parse_queue_limit, kQueueText, d_)) p.queue = *queue;

    if (const json* tr = find(v, "trace")) {
      const std::string tp = child(at, "trace");
      if (auto given = as_string(*tr, tp, "a path to a trace file", d_)) {
        if (given->empty()) {
          d_.add(tp, "empty path; give the trace file relative to the topology file's folder");
        } else {
          fs::path resolved = base_dir_ / *given;
          std::error_code ec;
          if (auto abs = fs::absolute(resolved, ec); !ec) resolved = abs;
          resolved = resolved.lexically_normal();
          if (!fs::exists(resolved, ec))
            d_.add(tp, fmt::format("trace file not found: {}", resolved.string()));
          else if (fs::is_directory(resolved, ec))
            d_.add(tp, fmt::format("trace path is a folder, not a file: {}", resolved.string()));
          else
            trace = resolved;
        }
      }
    }
  }

  void add_links(const Endpoints& e, const LinkParams& p, const std::optional<fs::path>& trace, const std::string& at) {
    std::vector<std::pair<std::size_t, std::size_t>> directed{{e.a, e.b}};
    if (e.both_ways) directed.emplace_back(e.b, e.a);
    std::map<std::string, std::vector<std::string>> duplicates;  // other declaration -> links
    for (auto [src, dst] : directed) {
      if (auto [it, fresh] = declared_.try_emplace({src, dst}, at); !fresh) {
        duplicates[it->second].push_back(link_name(src, dst));
        continue;
      }
      t_.links.push_back(WanLink{src, dst, p, trace, at});
    }
    for (const auto& [other, links] : duplicates)
      d_.add(at, fmt::format("link{} {} already declared at {}", links.size() == 1 ? "" : "s", join(links, " and "),
                             other));
  }

  void check_reverse_links() {
    for (const auto& l : t_.links) {
      if (declared_.contains({l.dst, l.src})) continue;
      d_.add(l.json_path,
             fmt::format("link {} has no reverse link {}: TCP needs a return path; declare one or use \"between\"",
                         link_name(l.src, l.dst), link_name(l.dst, l.src)));
    }
  }

  Topology& t_;
  const std::map<std::string, std::size_t>& names_;
  const fs::path& base_dir_;
  Diagnostics& d_;
  std::map<std::pair<std::size_t, std::size_t>, std::string> declared_;  // directed link -> where
};

}  // namespace

// --- the model ------------------------------------------------------------------------------

std::optional<std::size_t> Topology::dc_index(std::string_view dc_name) const {
  for (std::size_t i = 0; i < dcs.size(); ++i)
    if (dcs[i].name == dc_name) return i;
  return std::nullopt;
}

const WanLink* Topology::find_link(std::size_t src, std::size_t dst) const {
  for (const auto& l : links)
    if (l.src == src && l.dst == dst) return &l;
  return nullptr;
}

WanLink* Topology::find_link(std::size_t src, std::size_t dst) {
  return const_cast<WanLink*>(std::as_const(*this).find_link(src, dst));
}

std::size_t Topology::node_count() const {
  std::size_t n = 0;
  for (const auto& dc : dcs) n += static_cast<std::size_t>(dc.nodes);
  return n;
}

std::string to_string(const Fabric& f) {
  if (f.kind == Fabric::Kind::packet) return "packet";
  if (!f.ocs()) return fmt::format("rails (packet, {} x {})", f.rails, wanlab::to_string(f.port_rate));
  return fmt::format("rails (ocs, {} x {}, {})", f.rails, wanlab::to_string(f.port_rate),
                     wanlab::to_string(f.reconfiguration));
}

const std::vector<std::string>& known_gpu_kinds() {
  static const std::vector<std::string> kinds{"A100", "H100", "H200"};
  return kinds;
}

bool has_rails(const Topology& topo) {
  return std::any_of(topo.dcs.begin(), topo.dcs.end(), [](const Dc& dc) { return dc.fabric.kind == Fabric::Kind::rails; });
}

std::string node_name(const Dc& dc, int index) {
  return fmt::format("{}-{}", dc.name, index);
}

Topology parse_topology(const json& doc, const std::string& file, const fs::path& base_dir) {
  Diagnostics d(file);
  Topology t;
  t.source_file = file;
  if (!is_object(doc, "", "a JSON object with \"name\", \"dcs\" and \"wan\"", d)) d.throw_if_any();
  check_keys(doc, "", kTopKeys, d);

  if (const auto* n = find(doc, "name")) {
    if (auto name = as_string(*n, "/name", "a lab name such as \"three-dc\"", d)) {
      check_lab_name(*name, "/name", d);
      t.name = *name;
    }
  } else {
    d.add("/name", "missing: every lab needs a name such as \"three-dc\"");
  }
  if (const auto* desc = find(doc, "description")) as_string(*desc, "/description", "a string", d);
  if (const auto* lan = find(doc, "lan")) parse_lan(*lan, t.lan, d);
  if (const auto* node = find(doc, "node")) parse_node(*node, t.node, d);

  std::map<std::string, std::size_t> names;
  parse_dcs(find(doc, "dcs"), t, names, d);
  WanParser(t, names, base_dir, d).parse(find(doc, "wan"));

  d.throw_if_any();
  return t;
}

Topology load_topology(const fs::path& file) {
  Diagnostics d(file.string());
  const json doc = fields::read_document(file.string(), d);
  return parse_topology(doc, file.string(), file.parent_path());
}

json to_json(const Topology& topo) {
  json lan = json::object();
  if (topo.lan.rate.bps > 0) lan["rate"] = wanlab::to_string(topo.lan.rate);
  lan["delay"] = wanlab::to_string(topo.lan.delay);
  lan["mtu"] = topo.lan.mtu;

  json dcs = json::array();
  for (const auto& dc : topo.dcs) {
    json j{{"name", dc.name}, {"nodes", dc.nodes}, {"gpus_per_node", dc.gpus_per_node}, {"gpu", dc.gpu}};
    if (!dc.region.empty()) j["region"] = dc.region;
    if (dc.fabric.kind == Fabric::Kind::rails) {
      json f{{"type", "rails"},
             {"switching", dc.fabric.ocs() ? "ocs" : "packet"},
             {"rails", dc.fabric.rails},
             {"port_rate", wanlab::to_string(dc.fabric.port_rate)}};
      if (dc.fabric.ocs()) f["reconfiguration"] = wanlab::to_string(dc.fabric.reconfiguration);
      j["fabric"] = std::move(f);
    }
    dcs.push_back(std::move(j));
  }

  json wan = json::array();
  for (const auto& l : topo.links) {
    json j{{"from", topo.dcs.at(l.src).name},
           {"to", topo.dcs.at(l.dst).name},
           {"delay", wanlab::to_string(l.params.delay)},
           {"jitter", wanlab::to_string(l.params.jitter)},
           {"loss", wanlab::to_string(l.params.loss)},
           {"rate", wanlab::to_string(l.params.rate)}};
    if (l.params.loss_burst) j["loss_burst"] = wanlab::to_string(*l.params.loss_burst);
    if (l.params.queue) j["queue"] = wanlab::to_string(*l.params.queue);
    if (l.trace) j["trace"] = l.trace->string();  // absolute once parsed, so any base_dir reads it back
    wan.push_back(std::move(j));
  }
  json out{{"name", topo.name}, {"lan", std::move(lan)}, {"dcs", std::move(dcs)}, {"wan", std::move(wan)}};
  if (topo.node.tcp_congestion || !topo.node.sysctls.empty()) {
    json node = json::object();
    if (topo.node.tcp_congestion) node["tcp_congestion"] = *topo.node.tcp_congestion;
    if (!topo.node.sysctls.empty()) {
      json sysctls = json::object();
      for (const auto& [k, v] : topo.node.sysctls) sysctls[k] = v;
      node["sysctls"] = std::move(sysctls);
    }
    out["node"] = std::move(node);
  }
  return out;
}

Duration round_trip(const Topology& topo, const WanLink& link) {
  const WanLink* back = topo.find_link(link.dst, link.src);
  return link.params.delay + (back != nullptr ? back->params.delay : link.params.delay);
}

std::uint64_t default_queue_packets(const Topology& topo, const WanLink& link) {
  // A hand-built topology may lack the reverse link; assume it mirrors this one then.
  const WanLink* rev = topo.find_link(link.dst, link.src);
  const LinkParams& back = rev != nullptr ? rev->params : link.params;
  const auto ns = static_cast<u128>(
      std::max<std::int64_t>(0, (link.params.delay + back.delay + link.params.jitter + back.jitter).count()));
  // ceil(1.5 * bps/8 * ns/1e9 / (mtu + 14)) in integers: 3 * bps * ns / (16e9 * (mtu + 14)).
  const auto num = 3 * static_cast<u128>(link.params.rate.bps) * ns;
  const auto den = static_cast<u128>(16'000'000'000ULL) * static_cast<unsigned>(topo.lan.mtu + 14);
  const auto packets = static_cast<std::uint64_t>((num + den - 1) / den);
  return std::max<std::uint64_t>(packets, 64);
}

}  // namespace wanlab::core
