#pragma once
// The controller daemon's main loop (`wanlab up`, in the background or with --foreground):
// the lab, the API and metrics servers, the run manager, the state-file flush, `--then`,
// signals, and the teardown at the end. `wanlab up` (cli/src/lab_commands.cpp) forks the daemon.
#include <optional>
#include <string>

#include "wanlab/api/lab_controller.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/core/topology.hpp"

namespace wanlab::daemon {

/// Builds the lab, serves the API until a shutdown request or SIGINT/SIGTERM, then tears
/// the lab down. Reports "ready {json}" or "error <text>" on `report_to` (if any) and
/// closes it. `then` (`up --then`): a command started once the lab is up. Returns the
/// process's exit status.
int run_controller(const core::Topology& topo, const api::UpOptions& options, UniqueFd report_to,
                   const std::optional<std::string>& then);

}  // namespace wanlab::daemon
