#include "lab_lookup.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <regex>
#include <stdexcept>

namespace wanlab::cli {

bool valid_lab_name(const std::string& name) {
  static const std::regex re("[a-z0-9][a-z0-9-]*");
  return name.size() <= core::kMaxLabName && std::regex_match(name, re);
}

core::Topology topology_of(const lab::LabState& state) {
  return core::parse_topology(state.topology, (lab::lab_dir(state.lab) / "state.json").string(), "/");
}

FoundLab find_lab(const std::optional<std::string>& name) {
  std::string lab_name;
  if (name) {
    lab_name = *name;
  } else {
    const auto labs = lab::list_labs();
    if (labs.empty()) throw std::runtime_error("no lab is up (start one with `wanlab up TOPOLOGY`)");
    if (labs.size() > 1)
      throw std::runtime_error(fmt::format("several labs are up ({}); name one with --lab", fmt::join(labs, ", ")));
    lab_name = labs.front();
  }
  if (!valid_lab_name(lab_name)) throw std::runtime_error(fmt::format("'{}' is not a lab name", lab_name));
  auto state = lab::read_state(lab_name);
  if (!state) throw std::runtime_error(fmt::format("lab {} is not up", lab_name));
  auto topo = topology_of(*state);
  return {std::move(*state), std::move(topo)};
}

FoundLab find_lab_with_node(const std::optional<std::string>& name, const std::string& node) {
  std::vector<std::string> candidates = name ? std::vector<std::string>{*name} : lab::list_labs();
  if (candidates.empty()) throw std::runtime_error("no lab is up (start one with `wanlab up TOPOLOGY`)");
  std::vector<std::string> known;
  std::vector<FoundLab> having;
  for (const auto& c : candidates) {
    // Without --lab, a lab whose state is gone or unreadable (taken down meanwhile) is not a candidate.
    std::optional<FoundLab> found;
    if (name) {
      found = find_lab(c);
    } else {
      try {
        found = find_lab(c);
      } catch (const std::exception&) {
        continue;
      }
    }
    bool has = false;
    for (const auto& dc : found->topology.dcs)
      for (int i = 0; i < dc.nodes; ++i) {
        const auto n = core::node_name(dc, i);
        if (n == node) has = true;
        if (known.size() < 12) known.push_back(n);
      }
    if (has) having.push_back(std::move(*found));
  }
  if (having.size() == 1) return std::move(having.front());
  if (having.size() > 1) {
    // Labs have the same node names: which one the command runs in must not depend on
    // which lab sorts first.
    std::vector<std::string> labs;
    for (const auto& f : having) labs.push_back(f.state.lab);
    throw std::runtime_error(fmt::format("{} is in labs {}: name one with --lab", node, fmt::join(labs, ", ")));
  }
  throw std::runtime_error(fmt::format("no node '{}' in {}; nodes are named <dc>-<index>, e.g. {}", node,
                                       name ? "lab " + *name : "any lab that is up", fmt::join(known, ", ")));
}

namespace {
std::optional<api::Endpoint>& remote() {
  static std::optional<api::Endpoint> endpoint;
  return endpoint;
}
}  // namespace

std::string& remote_workdir() {
  static std::string dir = "/wanlab";
  return dir;
}

void set_remote_api(std::optional<api::Endpoint> endpoint, std::string workdir) {
  remote() = std::move(endpoint);
  remote_workdir() = std::move(workdir);
}

std::string remote_path(const std::string& path) {
  const std::filesystem::path p(path);
  return p.is_absolute() ? path : (std::filesystem::path(remote_workdir()) / p).lexically_normal().string();
}

const std::optional<api::Endpoint>& remote_api() { return remote(); }

RemoteLab find_remote_lab(const std::optional<std::string>& name) {
  const auto& endpoint = remote_api();
  if (!endpoint) throw std::logic_error("find_remote_lab without --api");
  const auto r = api::call(*endpoint, "GET", "/v1/status", {}, std::chrono::seconds(10));
  if (r.status == 401)
    throw std::runtime_error(fmt::format("{} refused the token (401): give the lab's token in $WANLAB_TOKEN or "
                                         "--api-token-file FILE",
                                         endpoint->describe()));
  if (r.status != 200 || !r.body.is_object() || !r.body.contains("lab") || !r.body["lab"].is_string())
    throw std::runtime_error(fmt::format("{} answered GET /v1/status with {}: {}", endpoint->describe(), r.status,
                                         r.body.dump()));
  RemoteLab found{r.body["lab"].get<std::string>(), r.body};
  if (name && *name != found.lab)
    throw std::runtime_error(
        fmt::format("{} is lab {}'s, not lab {}'s", endpoint->describe(), found.lab, *name));
  return found;
}

}  // namespace wanlab::cli
