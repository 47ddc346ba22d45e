#pragma once
// Finding a lab (and a node in it) from what the user typed.
#include <optional>
#include <string>

#include "wanlab/api/server.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/lab/state.hpp"

namespace wanlab::cli {

bool valid_lab_name(const std::string& name);

struct FoundLab {
  lab::LabState state;
  core::Topology topology;
};

/// The lab named, or the only lab up. Throws std::runtime_error with a clear message.
FoundLab find_lab(const std::optional<std::string>& name);
/// The lab that has `node` (among `name` if given). Throws with the known nodes listed, or,
/// without `name`, when several labs have that node (naming them).
FoundLab find_lab_with_node(const std::optional<std::string>& name, const std::string& node);
/// The topology recorded in a lab's state.
core::Topology topology_of(const lab::LabState& state);

/// `wanlab --api HOST:PORT`: status, link set, replay and run talk to the controller there
/// (`wanlab up --api`, e.g. a swarm lab's router service) instead of a lab of this machine.
/// `workdir` is the controller's working folder (`--api-dir`, default /wanlab, the image's).
void set_remote_api(std::optional<api::Endpoint> endpoint, std::string workdir = "/wanlab");
const std::optional<api::Endpoint>& remote_api();
/// A path for the remote controller's API (which takes absolute paths only): `path` as it
/// is where absolute, else under the controller's working folder.
std::string remote_path(const std::string& path);

struct RemoteLab {
  std::string lab;      // the name the remote controller reports
  nlohmann::json status;  // its GET /v1/status
};
/// The lab behind remote_api() (which must be set), from its GET /v1/status; `name`, where
/// given, must be that lab's. Throws std::runtime_error saying what failed.
RemoteLab find_remote_lab(const std::optional<std::string>& name);

}  // namespace wanlab::cli
