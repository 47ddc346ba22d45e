#pragma once
// `wanlab replay` (start or stop trace replays on a running lab) and `wanlab trace`
// (generate, import and check trace files).
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>

namespace wanlab::cli {

/// Adds the `replay` and `trace` subcommands to `app`. After app.parse(), run() runs the
/// one chosen and returns its exit status (0 done, 1 failed, 2 bad input), or nullopt if
/// none of them was chosen.
class ReplayCommands {
 public:
  explicit ReplayCommands(CLI::App& app);
  ~ReplayCommands();
  std::optional<int> run();
  /// Whether `wanlab replay` (not `trace ...`) was given.
  bool is_replay() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wanlab::cli
