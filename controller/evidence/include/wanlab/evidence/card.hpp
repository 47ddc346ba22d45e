#pragma once
// A run's evidence beside its results: the workload card (card.yaml: what ran, on what,
// through which network, built from which wanlab) and launch.sh (the commands that
// reproduce it). `run`, `bench`, `simulate` and `launch` write both into every run folder;
// `wanlab analyze` reads the card back (docs/evidence.md has the format).
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/core/topology.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::evidence {

/// Bad evidence (a card, a trace): what() is one line naming the file, the line or JSON path,
/// and the reason, e.g. "runs/a/card.yaml:4:3: network.wan: must be a sequence".
class EvidenceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The card format's version (card.yaml `card`).
inline constexpr int kCardVersion = 1;

/// How the command that made a run folder was invoked.
struct Invocation {
  std::vector<std::string> argv;  // as given, argv[0] included
  std::string cwd;                // the directory it ran in
};

struct CardInputs {
  std::string command;                  // run, bench, simulate, launch
  const workload::Plan* plan = nullptr;  // the scenario as run (none for launch)
  const core::Topology* topology = nullptr;
  nlohmann::json summary;  // the run's summary.json (backend, policy, scale, timings)
  /// What ran on the GPUs: "wanlab agents", "wanlab simulator", or the launched command.
  std::string framework;
  std::vector<std::string> launched;  // launch: the command each rank ran
  Invocation invocation;
  std::string variant;  // bench/simulate: the variant's name
};

/// The card as JSON (the YAML file's tree): model, parallelism, schedule, placement,
/// hardware, network, framework, bandwidth_policy, wanlab, host, invocation, results.
nlohmann::json make_card(const CardInputs& in);
/// YAML text of a card (yaml-cpp's emitter), with a header comment.
std::string card_yaml(const nlohmann::json& card);
/// launch.sh: a POSIX shell script that reruns the invocation from its directory; for a
/// variant of a bench, also the command that runs that variant alone (commented).
std::string launch_script(const CardInputs& in);
/// Writes card.yaml and launch.sh (mode 755) into `dir`; throws std::runtime_error.
void write_card(const std::filesystem::path& dir, const CardInputs& in);

/// Reads and checks a card.yaml: YAML syntax and the fields analyze relies on. Throws
/// EvidenceError naming the file, the line and column, and the reason.
nlohmann::json load_card(const std::filesystem::path& file);
/// The same for text already read; `file` names it in errors.
nlohmann::json parse_card(const std::string& text, const std::string& file);

/// The lines of a shell script: `words` quoted for sh ('...').
std::string shell_quote(const std::string& word);

}  // namespace wanlab::evidence
