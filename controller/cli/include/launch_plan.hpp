#pragma once
// `wanlab launch`, the pure part: which nodes, which ranks, and each rank's command line and
// environment (the variables frameworks read: torch.distributed, torchrun, gloo, NCCL).
// launch_command.cpp starts them.
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "wanlab/core/topology.hpp"

namespace wanlab::cli::launch {

/// Bad input to launch (a node, an --env, the command): one line, exit status 2.
class LaunchError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

using Env = std::vector<std::pair<std::string, std::string>>;

/// A node of the lab as launch uses it.
struct Node {
  std::string name;     // "use-0": its host name and its name in every node's hosts file
  std::string dc;       // "use"
  std::string address;  // "198.18.4.2"
  std::string ifname;   // its lab interface, "use-0"
};

/// The nodes named by `--nodes` (comma-separated, in that order: the first is the master),
/// or every node of the lab in DC then index order with `all`. Throws LaunchError: neither or
/// both given, an empty or repeated name, a node the lab does not have (naming its nodes).
std::vector<Node> select_nodes(const core::Topology& topo, const std::optional<std::string>& nodes, bool all);

/// The variables launch sets itself; --env may not set them.
const std::vector<std::string>& reserved_names();

/// `--env K=V` entries; throws LaunchError for a missing '=', a name that is not
/// [A-Za-z_][A-Za-z0-9_]*, a repeated name, or a reserved one.
Env parse_env(const std::vector<std::string>& entries);

struct Rank {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string node;
  Env env;                        // what launch sets, then --env, in that order
  std::vector<std::string> argv;  // after substitution; with `shell`: /bin/sh -c LINE
};

struct Options {
  std::string lab;
  int per_node = 1;
  int master_port = 0;
  Env user_env;
  bool shell = false;
  /// Variables given only where neither --env nor the launching environment names them
  /// (the caller leaves out those the environment has): torchrun_defaults().
  Env defaults;
};

/// torchrun's PET_REDIRECTS and PET_TEE (its --redirects and --tee when not given) as
/// "9:0": no redirection for local ranks 0-8, which is torchrun's default, spelled so that
/// PyTorch 1.13's Std.from_str can read it on Python 3.11 (its "0" fails there with
/// "'NoneType' object has no attribute 'get'"; enum iteration no longer yields the zero flag).
Env torchrun_defaults();

/// One rank per (node, local rank): RANK = NODE_RANK x per_node + LOCAL_RANK, WORLD_SIZE,
/// LOCAL_WORLD_SIZE, NODE_RANK, NNODES, MASTER_ADDR (the first node's name), MASTER_PORT,
/// GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (the node's lab interface), WANLAB_LAB,
/// WANLAB_NODE, WANLAB_DC; then the user's, then the defaults the user did not give. Each word of `cmd` has $NAME and ${NAME} of
/// those variables substituted (others are left for the command); with `shell` the words are
/// joined with blanks and run by /bin/sh -c. Throws LaunchError for an empty command or a
/// per_node outside 1..1024.
std::vector<Rank> plan_ranks(const std::vector<Node>& nodes, const std::vector<std::string>& cmd, const Options& o);

/// `word` with $NAME and ${NAME} replaced by their values in `env`; names not in `env`, and
/// a '$' followed by anything else, are kept as they are.
std::string substitute(const std::string& word, const Env& env);

/// The program a rank's command starts, to find in PATH before anything starts: its first
/// word, or with /bin/sh -c LINE the line's first word when it is a plain command name
/// (nullopt: the shell interprets it, e.g. `cd x && ...`).
std::optional<std::string> program_of(const std::vector<std::string>& argv);

/// Where `program` is: itself when it has a '/', else the first executable file named so
/// in `path` (colon-separated, as execvp searches it). nullopt: none.
std::optional<std::string> find_in_path(const std::string& program, const std::string& path);

/// The launch's exit status from the ranks': each is an exit code, or 128 + the signal that
/// killed it; the worst is the largest (0 only when every rank exited 0).
int worst_status(const std::vector<int>& statuses);

}  // namespace wanlab::cli::launch
