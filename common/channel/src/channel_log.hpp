#pragma once
// The "channel" logger, shared by the channel, its server and its client.
#include <spdlog/spdlog.h>

namespace wanlab::protocol::detail {

spdlog::logger& channel_log();

}  // namespace wanlab::protocol::detail
