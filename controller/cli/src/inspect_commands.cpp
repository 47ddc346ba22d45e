// status, exec and link set: commands on a running lab.
#include <fcntl.h>
#include <cerrno>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "commands.hpp"
#include "lab_lookup.hpp"
#include "wanlab/api/lab_controller.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/printable.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/netlink/node_entry.hpp"
#include "wanlab/shaping/kernel_shaper.hpp"

namespace wanlab::cli {
namespace {

using namespace std::chrono_literals;

std::string human_bytes(std::uint64_t b) {
  if (b >= 10'000'000'000ULL) return fmt::format("{:.1f}GB", b / 1e9);
  if (b >= 10'000'000ULL) return fmt::format("{:.1f}MB", b / 1e6);
  if (b >= 10'000ULL) return fmt::format("{:.1f}kB", b / 1e3);
  return fmt::format("{}B", b);
}

// The status of one lab: from its controller when it runs, else from its state and the
// kernel directly.
// Whether this process may not open `path` (EACCES: not root, and the file or its folder
// is root's).
bool denied(const std::filesystem::path& path, int mode) {
  return ::access(path.c_str(), mode) != 0 && errno == EACCES;
}

std::string needs_root(const std::string& name) {
  return fmt::format("the status of lab {} needs root: its controller's socket and state are root's (sudo wanlab "
                     "status {})",
                     name, name);
}

nlohmann::json lab_status_json(const std::string& name) {
  const bool root = ::geteuid() == 0;
  if (lab::controller_alive(name) && !root && denied(lab::socket_path(name), R_OK | W_OK)) {
    // Not root: the configuration from the lab's state.json, as the controller last wrote it;
    // live counters need the controller's socket.
    if (denied(lab::lab_dir(name) / "state.json", R_OK)) throw std::runtime_error(needs_root(name));
    auto found = find_lab(name);
    auto s = api::lab_status(found.topology, found.state, nullptr, true);
    s["note"] = fmt::format("read from {} (not root: no live counters; sudo wanlab status {} asks the controller)",
                            (lab::lab_dir(name) / "state.json").string(), name);
    return s;
  }
  if (lab::controller_alive(name)) {
    auto r = api::call(lab::socket_path(name), "GET", "/v1/status", {}, 10s);
    if (r.status == 200) return r.body;
    throw std::runtime_error(fmt::format("controller of lab {}: {}", name, r.body.dump()));
  }
  auto found = find_lab(name);
  std::unique_ptr<shaping::LinkShaper> shaper;
  if (!root) {
    // Reading the kernel's counters in the lab's namespaces needs root: the state only.
  } else if (!found.state.router_ports.empty()) {
    if (found.state.backend == "kernel")
      shaper = std::make_unique<shaping::KernelShaper>(netlink::Socket::open(), found.state.netem,
                                                       found.state.router_ports);
  } else if (auto router = netlink::Netns::open(lab::ns_router(name))) {
    shaper = std::make_unique<shaping::KernelShaper>(netlink::Socket::open_in(*router), found.state.netem);
  }
  return api::lab_status(found.topology, found.state, shaper.get(), false);
}

// Trace replays: position, lateness of the steps so far (actual apply - scheduled time).
void print_replays(const nlohmann::json& s) {
  if (!s.contains("replays") || s["replays"].empty()) return;
  fmt::print("\n  {:<14} {:<9} {:>9} {:>6} {:>10} {:>10}  {:<24} {}\n", "replay", "state", "step", "loops", "position",
             "next in", "lateness p50/p99/max", "trace");
  for (const auto& r : s["replays"]) {
    const auto& l = r["lateness_ms"];
    const std::string position =
        r.contains("position_ms") ? fmt::format("{:.3f}s", r["position_ms"].get<double>() / 1000) : "-";
    const std::string next =
        r["next_step_in_ms"].is_null() ? "-" : fmt::format("{:.0f}ms", r["next_step_in_ms"].get<double>());
    std::string state = r["state"].get<std::string>();
    if (r["failed"].get<std::uint64_t>() > 0) state += fmt::format(" ({} failed)", r["failed"].get<std::uint64_t>());
    fmt::print("  {:<14} {:<9} {:>9} {:>6} {:>10} {:>10}  {:<24} {}{}\n",
               fmt::format("{}->{}", r["src"].get<std::string>(), r["dst"].get<std::string>()), state,
               fmt::format("{}/{}", r["step"].get<std::size_t>(), r["steps"].get<std::size_t>()),
               r["mode"] == "loop" ? std::to_string(r["loops"].get<std::uint64_t>()) : "-", position, next,
               fmt::format("{:.3f}/{:.3f}/{:.3f} ms", l["p50"].get<double>(), l["p99"].get<double>(),
                           l["max"].get<double>()),
               r["trace"].get<std::string>(),
               r.contains("last_error") ? "\n    last error: " + r["last_error"].get<std::string>() : "");
  }
}

void print_status(const nlohmann::json& s) {
  const auto& c = s["controller"];
  fmt::print("lab {}  topology {}  backend {}  controller {}\n", s["lab"].get<std::string>(),
             s["topology_file"].get<std::string>(), s["backend"].get<std::string>(),
             c["running"].get<bool>()
                 ? fmt::format("pid {} since {}", c["pid"].get<int>(), c["started_at"].get<std::string>())
                 : fmt::format("NOT RUNNING (pid {} is gone): `wanlab down {}` cleans up", c["pid"].get<int>(),
                               s["lab"].get<std::string>()));
  if (!s["delay_applied"].get<bool>())
    fmt::print("  delay, jitter and loss are not applied (no netem on this kernel); rates and queue limits are\n");
  if (s["backend"] == "userspace" && !c["running"].get<bool>())
    fmt::print("  the userspace engine ran in the controller, which is gone: DCs cannot reach each other\n");
  const bool router_only = s.value("mode", "") == "router-only";
  if (router_only)
    fmt::print("  router-only lab: this namespace is the WAN router, on {} (toward {}); nodes are containers\n\n",
               fmt::join(s["router"]["ports"].get<std::vector<std::string>>(), ", "),
               fmt::join([&] {
                 std::vector<std::string> names;
                 for (const auto& dc : s["dcs"]) names.push_back(dc["name"].get<std::string>());
                 return names;
               }(), ", "));
  else
    fmt::print("  router namespace {}\n\n", s["router"]["namespace"].get<std::string>());
  fmt::print("  {:<6} {:<16} {:>5} {:>10} {:<16} {:<14} {}\n", "DC", "region", "nodes", "GPUs", "subnet", "gateway",
             router_only ? "nodes" : "nodes (namespace <lab>.<node>)");
  for (const auto& dc : s["dcs"]) {
    std::vector<std::string> nodes;
    for (const auto& n : dc["nodes"])
      nodes.push_back(fmt::format("{}={}", n["name"].get<std::string>(), n["address"].get<std::string>()));
    if (nodes.size() > 4) {
      auto more = nodes.size() - 3;
      nodes.resize(3);
      nodes.push_back(fmt::format("... {} more", more));
    }
    fmt::print("  {:<6} {:<16} {:>5} {:>10} {:<16} {:<14} {}\n", dc["name"].get<std::string>(),
               dc["region"].get<std::string>(), dc["nodes"].size(),
               fmt::format("{}x{}", dc["gpus_per_node"].get<int>(), dc["gpu"].get<std::string>()),
               dc["subnet"].get<std::string>(), dc["gateway"]["address"].get<std::string>(), fmt::join(nodes, " "));
    if (dc.contains("rails"))
      fmt::print("  {:<6} {}: switch namespace {}, rail r at 198.19.x.(1 + node): {}\n", "",
                 dc["rails"]["fabric"].get<std::string>(), dc["rails"]["namespace"].get<std::string>(),
                 fmt::join(dc["rails"]["subnets"], " "));
  }
  fmt::print("\n  {:<14} {:>9} {:>8} {:>7} {:>10} {:>7} {:>10} {:>9} {:>8} {:>8}\n", "link", "delay", "jitter", "loss",
             "rate", "limit", "sent", "packets", "drops", "queued");
  for (const auto& l : s["links"]) {
    std::string sent = "-", packets = "-", drops = "-", queued = "-";
    if (l.contains("counters")) {
      const auto& k = l["counters"];
      sent = human_bytes(k["bytes"].get<std::uint64_t>());
      packets = std::to_string(k["packets"].get<std::uint64_t>());
      drops = std::to_string(k["drops"].get<std::uint64_t>());
      queued = fmt::format("{}p", k["queued_packets"].get<std::uint64_t>());
    }
    fmt::print("  {:<14} {:>9} {:>8} {:>7} {:>10} {:>7} {:>10} {:>9} {:>8} {:>8}\n",
               fmt::format("{}->{}", l["src"].get<std::string>(), l["dst"].get<std::string>()),
               l["delay"].get<std::string>(), l["jitter"].get<std::string>(),
               l["loss"].get<std::string>() + (l.contains("loss_burst") ? "+GE" : ""), l["rate"].get<std::string>(),
               fmt::format("{}p", l["queue_limit_packets"].get<std::uint32_t>()), sent,
               packets, drops, queued);
  }
  print_replays(s);
  if (s.contains("note")) fmt::print("\n  {}\n", s["note"].get<std::string>());
}

}  // namespace

int cmd_status(const std::optional<std::string>& lab_arg, bool json) {
  if (remote_api()) {
    // One lab: the one whose controller --api names.
    const auto remote = find_remote_lab(lab_arg);
    if (json)
      fmt::print("{}\n", remote.status.dump(2));
    else
      print_status(remote.status);
    return 0;
  }
  std::vector<std::string> labs = lab_arg ? std::vector<std::string>{*lab_arg} : lab::list_labs();
  if (lab_arg && !valid_lab_name(*lab_arg)) {
    fmt::print(stderr, "wanlab: '{}' is not a lab name\n", *lab_arg);
    return 2;
  }
  nlohmann::json all = nlohmann::json::array();
  for (const auto& name : labs) {
    const auto state = lab::read_state(name);
    // A run its dead controller left behind ends here, with an error.txt in its folder.
    if (state && state->run && !lab::controller_alive(name)) {
      try {
        if (const auto file = lab::end_orphaned_run(*state, "`wanlab status`"))
          fmt::print(stderr, "lab {}: its controller died during run {}; the run is over: {}\n", name, state->run->id,
                     file->string());
      } catch (const std::exception& e) {
        fmt::print(stderr, "wanlab: lab {}: its controller died during run {}: {}\n", name, state->run->id, e.what());
      }
    }
    if (!state) {
      if (::geteuid() != 0 && denied(lab::lab_dir(name) / "state.json", R_OK)) {
        fmt::print(stderr, "wanlab: {}\n", needs_root(name));
        return 1;
      }
      if (lab_arg) {
        fmt::print(stderr, "wanlab: lab {} is not up\n", name);
        return 1;
      }
      continue;
    }
    all.push_back(lab_status_json(name));
  }
  if (json) {
    fmt::print("{}\n", (lab_arg ? (all.empty() ? nlohmann::json{} : all[0]) : nlohmann::json{{"labs", all}}).dump(2));
    return 0;
  }
  if (all.empty()) fmt::print("no lab is up\n");
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i) fmt::print("\n");
    print_status(all[i]);
  }
  return 0;
}

int cmd_exec(const std::optional<std::string>& lab_arg, const std::string& node, const std::vector<std::string>& argv) {
  if (!check_privileges("exec")) return 1;
  const auto found = find_lab_with_node(lab_arg, node);
  if (!found.state.router_ports.empty()) {
    fmt::print(stderr, "wanlab: lab {} is a router-only lab: node {} is a container, not a namespace here "
               "(docker-compose exec {} ...)\n", found.state.lab, node, node);
    return 1;
  }
  const auto ns_name = lab::ns_node(found.state.lab, node);
  if (!netlink::Netns::open(ns_name)) {
    fmt::print(stderr, "wanlab: namespace {} of node {} is missing; the lab is broken: `wanlab down {}`\n", ns_name,
               node, found.state.lab);
    return 1;
  }
  // The node's network and UTS namespaces, /sys and its hosts file, as a launched command
  // and the agents see them (netlink/node_entry.hpp).
  const netlink::NodeEntry entry(ns_name);
  const char* failed = "";
  if (const int err = entry.enter(&failed); err != 0)
    throw std::runtime_error(fmt::format("{} {}: {}", failed, ns_name, std::strerror(err)));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  fmt::print(stderr, "wanlab: cannot run {}: {}\n", argv.front(), std::strerror(errno));
  return 127;
}

namespace {

// The control API of lab `lab` (the only lab up when not named), or the remote one of
// --api; nothing (said on stderr) when its controller is not running.
std::optional<api::Endpoint> lab_endpoint(const std::optional<std::string>& lab) {
  api::Endpoint endpoint;
  if (remote_api()) {
    (void)find_remote_lab(lab);
    return *remote_api();
  }
  const auto found = find_lab(lab);
  if (!lab::controller_alive(found.state.lab)) {
    fmt::print(stderr, "wanlab: the controller of lab {} is not running; `wanlab down {}` then `up` again\n",
               found.state.lab, found.state.lab);
    return std::nullopt;
  }
  endpoint.socket = lab::socket_path(found.state.lab);
  return endpoint;
}

bool dc_like(const std::string& name) {
  return !name.empty() && name[0] >= 'a' && name[0] <= 'z' &&
         std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
}

}  // namespace

int cmd_link_set(const LinkSetArgs& a) {
  // A DC name is [a-z][a-z0-9]* (topology files are checked so); anything else names no DC
  // and would go raw into the request's path. Named here, escaped.
  for (const auto& [arg, name] : {std::pair<const char*, const std::string*>{"SRC", &a.src}, {"DST", &a.dst}}) {
    if (!dc_like(*name)) {
      fmt::print(stderr, "wanlab: link set: {} '{}' is not a DC name (DC names are lowercase letters and digits, "
                 "[a-z][a-z0-9]*)\n", arg, printable(*name, 80));
      return 2;
    }
  }
  nlohmann::json body = nlohmann::json::object();
  // Checked here too so a bad flag is named as the flag the user typed.
  auto check = [&](const char* flag, const char* key, const std::optional<std::string>& v, auto parse) {
    if (!v) return true;
    auto p = parse(*v);
    if (!p) {
      fmt::print(stderr, "wanlab: --{}: {}\n", flag, p.error);
      return false;
    }
    body[key] = *v;
    return true;
  };
  if (!check("delay", "delay", a.delay, &parse_duration) || !check("jitter", "jitter", a.jitter, &parse_duration) ||
      !check("loss", "loss", a.loss, &parse_percent) ||
      (a.loss_burst != "off" && !check("loss-burst", "loss_burst", a.loss_burst, &parse_loss_burst)) ||
      !check("rate", "rate", a.rate, &parse_rate) ||
      !check("queue", "queue", a.queue, &parse_queue_limit))
    return 2;
  if (a.loss_burst == "off") body["loss_burst"] = "off";
  if (body.empty()) {
    fmt::print(stderr,
               "wanlab: link set: nothing to change; give --delay, --jitter, --loss, --loss-burst, --rate or --queue\n");
    return 2;
  }
  const auto endpoint = lab_endpoint(a.lab);
  if (!endpoint) return 1;
  auto r = api::call(*endpoint, "POST", fmt::format("/v1/links/{}/{}", a.src, a.dst), body.dump(), 10s);
  if (r.status != 200) {
    const auto& e = r.body["error"];
    fmt::print(stderr, "wanlab: link set {}->{}: {}\n", a.src, a.dst, e.value("message", r.body.dump()));
    return e.value("code", "") == "internal" || e.value("code", "") == "kernel" ? 1 : 2;
  }
  const auto& l = r.body;
  fmt::print("link {}->{}: delay {} jitter {} loss {}{} rate {} queue {} ({} packets)\n", l["src"].get<std::string>(),
             l["dst"].get<std::string>(), l["delay"].get<std::string>(), l["jitter"].get<std::string>(),
             l["loss"].get<std::string>(),
             l.contains("loss_burst") ? fmt::format(" burst {}", l["loss_burst"].get<std::string>()) : "",
             l["rate"].get<std::string>(), l["queue"].get<std::string>(), l["queue_limit_packets"].get<std::uint32_t>());
  if (l.contains("note")) fmt::print("note: {}\n", l["note"].get<std::string>());
  return 0;
}

int cmd_rails_set(const RailsSetArgs& a) {
  if (!dc_like(a.dc)) {
    fmt::print(stderr, "wanlab: rails set: DC '{}' is not a DC name (DC names are lowercase letters and digits, "
               "[a-z][a-z0-9]*)\n", printable(a.dc, 80));
    return 2;
  }
  if (!a.reconfiguration) {
    fmt::print(stderr, "wanlab: rails set: nothing to change; give --reconfiguration\n");
    return 2;
  }
  if (const auto p = parse_duration(*a.reconfiguration); !p) {
    fmt::print(stderr, "wanlab: --reconfiguration: {}\n", p.error);
    return 2;
  }
  const auto endpoint = lab_endpoint(a.lab);
  if (!endpoint) return 1;
  const nlohmann::json body{{"reconfiguration", *a.reconfiguration}};
  auto r = api::call(*endpoint, "POST", fmt::format("/v1/rails/{}", a.dc), body.dump(), 10s);
  if (r.status != 200) {
    const auto& e = r.body["error"];
    fmt::print(stderr, "wanlab: rails set {}: {}\n", a.dc, e.value("message", r.body.dump()));
    return e.value("code", "") == "internal" || e.value("code", "") == "kernel" ? 1 : 2;
  }
  fmt::print("rails of DC {}: {}\n", r.body.value("dc", a.dc), r.body.value("fabric", std::string{}));
  return 0;
}

}  // namespace wanlab::cli
