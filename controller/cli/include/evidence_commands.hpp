#pragma once
// Evidence around run folders: the workload card and launch.sh every run folder gets
// (controller/evidence/card.hpp), `wanlab analyze` and `wanlab import-trace`.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/evidence/card.hpp"

namespace wanlab::cli {

/// Records how wanlab was invoked (main, once the command line is parsed): `command` is
/// the subcommand's name.
void set_invocation(int argc, char** argv, const std::string& command);
const evidence::Invocation& invocation();
/// The subcommand being run ("run", "bench", ...).
const std::string& invoked_command();

/// Writes card.yaml and launch.sh into a run folder; a failure is a warning (the run's
/// results stand). `in.invocation` and `in.command` are filled in from set_invocation().
void write_run_card(const std::filesystem::path& dir, evidence::CardInputs in);
/// The same for a lab run folder (run, bench): the plan from its scenario.json.
void write_lab_run_card(const std::filesystem::path& dir, const nlohmann::json& summary);

struct AnalyzeArgs {
  std::vector<std::string> paths;
  std::optional<std::string> out;  // folder for analysis.md and analysis.json
  bool json = false;               // print JSON instead of Markdown
};
int cmd_analyze(const AnalyzeArgs& a);

struct ImportTraceArgs {
  std::vector<std::string> traces;
  std::string topology;
  std::vector<std::string> placement;  // DC per rank
  std::string gpu = "H100";
  double mfu = 0.4;
  std::optional<std::uint64_t> message_bytes;  // where the trace gives no sizes
  std::optional<std::string> out;
  bool no_simulate = false;
};
int cmd_import_trace(const ImportTraceArgs& a);

}  // namespace wanlab::cli
