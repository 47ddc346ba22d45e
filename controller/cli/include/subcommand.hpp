#pragma once
// The subcommands of `wanlab`. Each add_*() registers one on the app (its options and help
// text) and returns it; after parsing, main() runs the one the user chose. main.cpp adds
// them in the order `wanlab --help` lists them.
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace wanlab::cli {

/// What a subcommand's run may need of the command line.
struct Invocation {
  int argc = 0;
  char** argv = nullptr;
  bool token_in_argv = false;  // --token was on the command line (hidden from ps since)
};

class Subcommand {
 public:
  Subcommand(CLI::App* cmd, bool remote, std::function<int(const Invocation&)> run)
      : cmd_(cmd), remote_(remote), run_(std::move(run)) {}
  /// After parsing: whether the user chose it.
  bool chosen() const { return static_cast<bool>(*cmd_); }
  /// Whether `--api HOST:PORT` may send it to another host's controller.
  bool remote() const { return remote_; }
  /// Runs it: 0 done, 1 failed, 2 bad input (some commands have more; their --help says).
  int run(const Invocation& inv) const { return run_(inv); }

 private:
  CLI::App* cmd_;
  bool remote_;
  std::function<int(const Invocation&)> run_;
};

/// The secret in `file`, for `flag` (--token-file, --api-token-file); nullopt when it cannot
/// be read (said why on stderr, after `context`, e.g. "up: "). A file that group or others
/// may read is warned about (cli_lab.cpp).
std::optional<std::string> read_token_file(const std::string& file, const std::string& context,
                                           const std::string& flag);

// Lab commands (cli_lab.cpp).
std::unique_ptr<Subcommand> add_up(CLI::App& app);
std::unique_ptr<Subcommand> add_down(CLI::App& app);
std::unique_ptr<Subcommand> add_status(CLI::App& app);
std::unique_ptr<Subcommand> add_exec(CLI::App& app);
std::unique_ptr<Subcommand> add_link(CLI::App& app);
std::unique_ptr<Subcommand> add_rails(CLI::App& app);
std::unique_ptr<Subcommand> add_capture(CLI::App& app);
std::unique_ptr<Subcommand> add_dashboard(CLI::App& app);
std::unique_ptr<Subcommand> add_node_setup(CLI::App& app);
std::unique_ptr<Subcommand> add_compose(CLI::App& app);

// Jobs on a lab, in the simulator or from traces (cli_jobs.cpp).
std::unique_ptr<Subcommand> add_run(CLI::App& app);
std::unique_ptr<Subcommand> add_bench(CLI::App& app);
std::unique_ptr<Subcommand> add_simulate(CLI::App& app);
std::unique_ptr<Subcommand> add_plan(CLI::App& app);
std::unique_ptr<Subcommand> add_memory(CLI::App& app);
std::unique_ptr<Subcommand> add_launch(CLI::App& app);
std::unique_ptr<Subcommand> add_analyze(CLI::App& app);
std::unique_ptr<Subcommand> add_import_trace(CLI::App& app);

}  // namespace wanlab::cli
