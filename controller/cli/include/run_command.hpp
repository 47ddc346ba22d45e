#pragma once
// `wanlab run SCENARIO`: runs a training scenario on its lab (bringing the lab up first
// when it is not, and down again afterwards unless --keep-lab), follows its progress and
// prints a short summary; the run folder holds summary.json, timeline.json and links.csv.
#include <optional>
#include <string>

namespace wanlab::cli {

struct RunArgs {
  std::string scenario;
  std::optional<std::string> out;
  std::optional<int> connections;
  std::string backend = "auto";
  bool keep_lab = false;
  bool quiet = false;
};
int cmd_run(const RunArgs& a);

}  // namespace wanlab::cli
