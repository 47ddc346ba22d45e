#include "launch_plan.hpp"

#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/lab/naming.hpp"

namespace wanlab::cli::launch {
namespace {

bool valid_env_name(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

const std::string* lookup(const Env& env, const std::string& name) {
  for (const auto& [k, v] : env)
    if (k == name) return &v;
  return nullptr;
}

}  // namespace

std::vector<Node> select_nodes(const core::Topology& topo, const std::optional<std::string>& nodes, bool all) {
  if (all == nodes.has_value())
    throw LaunchError("name the nodes to start on: --nodes use-0,euw-0 or --all");
  std::vector<Node> every;
  for (std::size_t k = 0; k < topo.dcs.size(); ++k)
    for (int i = 0; i < topo.dcs[k].nodes; ++i)
      every.push_back({core::node_name(topo.dcs[k], i), topo.dcs[k].name,
                       core::node_address(static_cast<int>(k), i).to_string(), lab::if_node(topo.dcs[k].name, i)});
  if (all) return every;
  std::vector<Node> out;
  std::set<std::string> seen;
  std::size_t start = 0;
  const std::string& list = *nodes;
  while (start <= list.size()) {
    const auto end = std::min(list.find(',', start), list.size());
    const auto name = list.substr(start, end - start);
    start = end + 1;
    if (name.empty()) throw LaunchError(fmt::format("--nodes '{}': an empty node name", list));
    if (!seen.insert(name).second) throw LaunchError(fmt::format("--nodes: node {} is named twice", name));
    auto it = std::find_if(every.begin(), every.end(), [&](const Node& n) { return n.name == name; });
    if (it == every.end()) {
      std::vector<std::string> known;
      for (const auto& n : every) {
        if (known.size() == 12) {
          known.push_back("...");
          break;
        }
        known.push_back(n.name);
      }
      throw LaunchError(fmt::format("lab {} has no node '{}' (its nodes: {})", topo.name, name, fmt::join(known, ", ")));
    }
    out.push_back(*it);
  }
  return out;
}

const std::vector<std::string>& reserved_names() {
  static const std::vector<std::string> names = {
      "RANK",        "WORLD_SIZE",         "LOCAL_RANK",         "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES",
      "MASTER_ADDR", "MASTER_PORT",        "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "WANLAB_LAB",
      "WANLAB_NODE", "WANLAB_DC"};
  return names;
}

Env parse_env(const std::vector<std::string>& entries) {
  Env env;
  for (const auto& e : entries) {
    const auto eq = e.find('=');
    if (eq == std::string::npos) throw LaunchError(fmt::format("--env '{}': expected NAME=VALUE", e));
    const auto name = e.substr(0, eq);
    if (!valid_env_name(name))
      throw LaunchError(fmt::format("--env '{}': '{}' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", e, name));
    const auto& reserved = reserved_names();
    if (std::find(reserved.begin(), reserved.end(), name) != reserved.end())
      throw LaunchError(fmt::format("--env '{}': launch sets {} itself (per rank)", e, name));
    if (lookup(env, name)) throw LaunchError(fmt::format("--env: {} is given twice", name));
    env.emplace_back(name, e.substr(eq + 1));
  }
  return env;
}

std::string substitute(const std::string& word, const Env& env) {
  std::string out;
  for (std::size_t i = 0; i < word.size();) {
    if (word[i] != '$' || i + 1 == word.size()) {
      out += word[i++];
      continue;
    }
    std::size_t start = i + 1, end = start;
    const bool braced = word[start] == '{';
    if (braced) {
      end = word.find('}', start + 1);
      if (end == std::string::npos) {
        out += word[i++];
        continue;
      }
      const auto name = word.substr(start + 1, end - start - 1);
      if (const auto* v = lookup(env, name)) {
        out += *v;
        i = end + 1;
      } else {
        out += word[i++];
      }
      continue;
    }
    while (end < word.size() && name_char(word[end])) ++end;
    const auto name = word.substr(start, end - start);
    if (const auto* v = name.empty() ? nullptr : lookup(env, name)) {
      out += *v;
      i = end;
    } else {
      out += word[i++];
    }
  }
  return out;
}

Env torchrun_defaults() { return {{"PET_REDIRECTS", "9:0"}, {"PET_TEE", "9:0"}}; }

std::vector<Rank> plan_ranks(const std::vector<Node>& nodes, const std::vector<std::string>& cmd, const Options& o) {
  if (cmd.empty()) throw LaunchError("no command given (wanlab launch --nodes A,B -- CMD...)");
  if (o.per_node < 1 || o.per_node > 1024) throw LaunchError(fmt::format("--per-node {}: expected 1 to 1024", o.per_node));
  if (nodes.empty()) throw LaunchError("no node to start on");
  std::vector<Rank> ranks;
  const int world = static_cast<int>(nodes.size()) * o.per_node;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    for (int l = 0; l < o.per_node; ++l) {
      Rank r;
      r.node_rank = static_cast<int>(n);
      r.local_rank = l;
      r.rank = r.node_rank * o.per_node + l;
      r.node = nodes[n].name;
      r.env = {{"RANK", std::to_string(r.rank)},
               {"WORLD_SIZE", std::to_string(world)},
               {"LOCAL_RANK", std::to_string(l)},
               {"LOCAL_WORLD_SIZE", std::to_string(o.per_node)},
               {"NODE_RANK", std::to_string(r.node_rank)},
               {"NNODES", std::to_string(nodes.size())},
               {"MASTER_ADDR", nodes.front().name},
               {"MASTER_PORT", std::to_string(o.master_port)},
               {"GLOO_SOCKET_IFNAME", nodes[n].ifname},
               {"NCCL_SOCKET_IFNAME", nodes[n].ifname},
               {"WANLAB_LAB", o.lab},
               {"WANLAB_NODE", nodes[n].name},
               {"WANLAB_DC", nodes[n].dc}};
      r.env.insert(r.env.end(), o.user_env.begin(), o.user_env.end());
      for (const auto& [k, v] : o.defaults)
        if (!lookup(o.user_env, k)) r.env.emplace_back(k, v);
      std::vector<std::string> words;
      for (const auto& w : cmd) words.push_back(substitute(w, r.env));
      if (o.shell) {
        std::string line;
        for (const auto& w : words) line += (line.empty() ? "" : " ") + w;
        r.argv = {"/bin/sh", "-c", line};
      } else {
        r.argv = std::move(words);
      }
      ranks.push_back(std::move(r));
    }
  }
  return ranks;
}

std::optional<std::string> program_of(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  if (argv.size() == 3 && argv[0] == "/bin/sh" && argv[1] == "-c") {
    const auto& line = argv[2];
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos) return std::nullopt;
    const auto end = std::min(line.find_first_of(" \t", start), line.size());
    const auto word = line.substr(start, end - start);
    const bool plain = std::all_of(word.begin(), word.end(), [](char c) {
      return name_char(c) || c == '.' || c == '/' || c == '-' || c == '+';
    });
    // Anything else (assignments, quotes, redirections, shell words) is the shell's to read.
    static const std::set<std::string> keywords = {"if", "for", "while", "until", "case", "exec", "cd", "export",
                                                   "set", "test", "[", "{", "(", "!", "time", "true", "false",
                                                   "echo", "printf", "exit", "."};
    if (!plain || word.empty() || keywords.count(word)) return std::nullopt;
    return word;
  }
  return argv.front();
}

std::optional<std::string> find_in_path(const std::string& program, const std::string& path) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos) {
    if (runnable(program)) return program;
    return std::nullopt;
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto end = std::min(path.find(':', start), path.size());
    // An empty entry is the current folder, as execvp reads it.
    const auto candidate = (end == start ? std::string(".") : path.substr(start, end - start)) + "/" + program;
    start = end + 1;
    if (runnable(candidate)) return candidate;
  }
  return std::nullopt;
}

int worst_status(const std::vector<int>& statuses) {
  int worst = 0;
  for (int s : statuses) worst = std::max(worst, s);
  return worst;
}

}  // namespace wanlab::cli::launch
