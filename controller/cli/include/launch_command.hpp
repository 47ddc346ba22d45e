#pragma once
// `wanlab launch`: starts a command on lab nodes as ranks of one job (a framework's own
// processes, e.g. torchrun), inside each node's namespaces, with the variables frameworks
// read; prefixes their output, stops them on Ctrl-C, and records the links while they run.
#include <optional>
#include <string>
#include <vector>

namespace wanlab::cli {

struct LaunchArgs {
  std::optional<std::string> lab;
  std::optional<std::string> nodes;
  bool all = false;
  int per_node = 1;
  std::vector<std::string> env;  // K=V
  std::optional<std::string> out;
  bool shell = false;
  std::vector<std::string> cmd;
};
/// 0 every rank exited 0; otherwise the worst rank's status (exit code, 128 + signal);
/// 130 when interrupted; 2 bad input (nothing started); 1 launch itself failed.
int cmd_launch(const LaunchArgs& a);

}  // namespace wanlab::cli
