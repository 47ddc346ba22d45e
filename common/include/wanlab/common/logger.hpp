#pragma once
// A named logger for one part of the code ("netlink", "channel", "gpu"): registered once
// with spdlog (stderr, colour where it is a terminal) and shared by every caller, so
// `spdlog::get(name)->set_level(...)` tunes that part alone.
#include <spdlog/spdlog.h>

#include <string>

namespace wanlab {

/// The logger called `name`, made on first use; safe from several threads at once.
spdlog::logger& named_logger(const std::string& name);

}  // namespace wanlab
