// wanlab-agent: the process of one emulated GPU server. It connects to the controller,
// runs the stage workers it is assigned, and reports (docs/protocol.md).
#include <unistd.h>

#include <csignal>
#include <optional>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "agent.hpp"
#include "wanlab/common/secrets.hpp"
#include "wanlab/common/channel_client.hpp"
#include "wanlab/common/protocol.hpp"
#include "wanlab/gpu/gpu_compute.hpp"

int main(int argc, char** argv) {
  CLI::App app{"wanlab-agent: one emulated GPU server of a wanlab lab. Started by the controller inside the "
               "node's namespace (or by a container); connects to the controller, runs the stage workers it is "
               "assigned and reports."};
  std::string address, node, log_level = "info";
  std::string token = std::getenv("WANLAB_TOKEN") ? std::getenv("WANLAB_TOKEN") : "";
  bool once = false;
  app.add_option("--controller", address, "Controller address: unix:/run/wanlab/LAB/agents.sock or tcp:HOST:PORT")
      ->required();
  app.add_option("--node", node, "This node's name in the lab, e.g. use-0")->required();
  app.add_option("--token", token,
                 "Bearer token for a TCP controller (default: $WANLAB_TOKEN). On the command line any local user "
                 "can read it (ps) until the agent has: prefer $WANLAB_TOKEN or --token-file");
  std::optional<std::string> token_file;
  app.add_option("--token-file", token_file, "Read the bearer token from the first line of FILE (keep it mode 600)")
      ->type_name("FILE");
  app.add_flag("--once", once, "Exit after one run (agents the controller starts itself)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    wanlab::hide_argument_values(argc, argv, {"--token"});
    return app.exit(e) == 0 ? 0 : 2;
  }
  wanlab::hide_argument_values(argc, argv, {"--token"});
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [" + node + "] [%l] %v");
  if (token_file) {
    std::string warning;
    try {
      token = wanlab::read_secret_file(*token_file, warning);
    } catch (const std::runtime_error& e) {
      spdlog::error("--token-file {}", e.what());
      return 2;
    }
    if (!warning.empty()) spdlog::warn("--token-file {}", warning);
  }

  wanlab::agent::AgentOptions ao;
  ao.node = node;
  const auto gpus = wanlab::gpu::list_gpus();
  ao.gpus = static_cast<int>(gpus.size());
  if (gpus.empty()) ao.gpu_reason = wanlab::gpu::gpu_unavailable_reason();
  spdlog::info("agent for node {}: {}", node,
               gpus.empty() ? "no GPU (" + ao.gpu_reason + "): modeled compute only"
                            : fmt::format("{} GPU(s), first {}", gpus.size(), gpus.front().name));

  boost::asio::io_context ioc;
  std::unique_ptr<wanlab::protocol::ChannelClient> client;
  int exit_code = 0;
  auto stop = [&] {
    boost::asio::post(ioc, [&] {
      if (client) client->stop();
      ioc.stop();
    });
  };
  ao.once = once;
  ao.on_finished = [&](bool ok) {
    if (!ok) exit_code = 1;
    stop();
  };
  wanlab::agent::Agent agent(ao, [&](const nlohmann::json& m) {
    if (!client || !client->send(m)) spdlog::warn("not connected: {} message dropped", m.value("type", "?"));
  });

  wanlab::protocol::ChannelClientOptions co;
  co.address = address;
  co.hello = agent.hello();
  co.token = token;
  // An agent started for one run (--once) ends with its controller: it stops retrying once
  // the controller has been unreachable for three read timeouts (27 s). Agents of their own
  // (containers) wait for a controller as long as they live.
  if (once) co.give_up_after = 3 * co.channel.read_timeout;
  wanlab::protocol::ChannelClientHandlers h;
  h.on_connected = [&](auto) { spdlog::info("connected to the controller at {}", address); };
  h.on_message = [&](const nlohmann::json& m) {
    if (m.value("type", "") == "error")
      spdlog::error("controller: {}", wanlab::protocol::error_from_message(m).message);
    agent.on_message(m);
  };
  h.on_disconnected = [&](const std::string& reason) {
    spdlog::warn("controller connection: {}; retrying", reason);
    agent.on_disconnected(reason);
  };
  h.on_gave_up = [&](const std::string& reason) {
    spdlog::error("{}; this agent was started for one run and exits", reason);
    exit_code = 3;
    boost::asio::post(ioc, [&] { ioc.stop(); });
  };
  try {
    client = std::make_unique<wanlab::protocol::ChannelClient>(ioc, co, h);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
  // SIGHUP: an agent the controller started gets it when that controller dies.
  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM, SIGHUP);
  const pid_t parent = ::getppid();
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      spdlog::warn("the controller that started this agent (pid {}) is gone: stopping", parent);
      exit_code = 3;
    } else {
      spdlog::info("signal: stopping");
    }
    client->stop();
    ioc.stop();
  });
  ioc.run();
  client.reset();
  return exit_code;
}
