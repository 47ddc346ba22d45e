// wanlab: builds, shapes, inspects and tears down multi-DC labs. The subcommands are in
// cli_lab.cpp and cli_jobs.cpp (subcommand.hpp), replay and trace in replay_commands.cpp.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <spdlog/spdlog.h>
#include <vector>

#include "commands.hpp"
#include "evidence_commands.hpp"
#include "lab_lookup.hpp"
#include "replay_commands.hpp"
#include "subcommand.hpp"
#include "suggest.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/secrets.hpp"
#include "wanlab/common/version.hpp"

namespace {

using namespace wanlab::cli;

// A command line CLI11 refused: a mistyped subcommand gets its nearest name (CLI11 would say
// only "A subcommand is required"); anything else CLI11's own message. The exit status.
int explain_parse_error(CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  wanlab::hide_argument_values(argc, argv, {"--token"});
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--log-level") {
      ++i;
      continue;
    }
    if (word.starts_with("-")) continue;
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), word) != names.end()) break;
    const auto guess = nearest(word, names);
    fmt::print(stderr, "wanlab: '{}' is not a wanlab command{}; `wanlab --help` lists them\n", word,
               guess ? fmt::format(" (did you mean '{}'?)", *guess) : "");
    return 2;
  }
  return app.exit(e) == 0 ? 0 : 2;
}

// --api HOST:PORT (or $WANLAB_API) for a command that may talk to another host's controller:
// checks it and its token and sets the remote endpoint. An exit status when it must stop.
std::optional<int> use_remote_api(std::optional<std::string> api_at, const std::optional<std::string>& api_token_file,
                                  const std::string& api_dir, bool api_command) {
  if (const char* env = std::getenv("WANLAB_API"); !api_at && env && *env && api_command) api_at = env;
  if (api_at) {
    if (!api_command) {
      fmt::print(stderr, "wanlab: --api HOST:PORT is for status, link set, replay and run\n");
      return 2;
    }
    wanlab::api::Endpoint endpoint;
    endpoint.tcp = *api_at;
    try {
      (void)wanlab::api::parse_host_port(*api_at);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "wanlab: --api: {}\n", e.what());
      return 2;
    }
    if (api_token_file) {
      const auto token = read_token_file(*api_token_file, "", "--api-token-file");
      if (!token) return 2;
      endpoint.token = *token;
    } else if (const char* t = std::getenv("WANLAB_TOKEN"); t && *t) {
      endpoint.token = t;
    } else {
      fmt::print(stderr, "wanlab: --api {}: give the lab's token in $WANLAB_TOKEN or --api-token-file FILE\n",
                 *api_at);
      return 2;
    }
    if (!std::filesystem::path(api_dir).is_absolute()) {
      fmt::print(stderr, "wanlab: --api-dir {}: not an absolute path\n", api_dir);
      return 2;
    }
    set_remote_api(std::move(endpoint), api_dir);
  } else if (api_token_file) {
    fmt::print(stderr, "wanlab: --api-token-file goes with --api HOST:PORT\n");
    return 2;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wanlab: a testbed for geo-distributed LLM training.\n"
               "Builds a lab of datacenters joined by an emulated WAN inside network namespaces."};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.set_version_flag("--version", wanlab::version_line());
  std::optional<std::string> api_at;
  std::optional<std::string> api_token_file;
  app.add_option("--api", api_at,
                 "status, link set, replay and run talk to the controller whose API `wanlab up --api` serves at "
                 "HOST:PORT (another host's lab, e.g. a swarm lab's router service) instead of a lab on this "
                 "machine; its token from $WANLAB_TOKEN or --api-token-file. Paths a request names (scenario, "
                 "trace, --out) are the controller's: relative ones are taken from its working folder (docs/docker.md). "
                 "Default for those commands: $WANLAB_API")
      ->type_name("HOST:PORT");
  std::string api_dir = "/wanlab";
  app.add_option("--api-dir", api_dir,
                 "With --api: the controller's working folder, under which relative scenario, trace and --out paths "
                 "are sent (the API takes absolute paths; default /wanlab, the containers' working folder)")
      ->type_name("DIR");
  app.add_option("--api-token-file", api_token_file,
                 "With --api: read the token from the first line of FILE (keep it mode 600) instead of $WANLAB_TOKEN")
      ->type_name("FILE");

  // In the order `wanlab --help` lists them.
  std::vector<std::unique_ptr<Subcommand>> commands;
  for (auto* add : {add_up, add_run, add_bench, add_simulate, add_plan, add_memory, add_down, add_status, add_exec,
                    add_launch, add_link, add_rails, add_capture, add_dashboard, add_node_setup, add_compose})
    commands.push_back(add(app));
  ReplayCommands replay_commands(app);
  for (auto* add : {add_analyze, add_import_trace}) commands.push_back(add(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return explain_parse_error(app, argc, argv, e);
  }
  // The token leaves argv now (CLI11 has its copy): the controller daemon, forked from this
  // process without exec, shows this argv in `ps` for as long as the lab is up.
  const bool token_in_argv = wanlab::hide_argument_values(argc, argv, {"--token"}) > 0;
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %v");
  set_invocation(argc, argv, app.get_subcommands().empty() ? std::string() : app.get_subcommands().front()->get_name());

  bool api_command = replay_commands.is_replay();
  for (const auto& c : commands) api_command = api_command || (c->chosen() && c->remote());
  if (const auto rc = use_remote_api(api_at, api_token_file, api_dir, api_command)) return *rc;

  const Invocation inv{argc, argv, token_in_argv};
  try {
    for (const auto& c : commands)
      if (c->chosen()) return c->run(inv);
    if (auto rc = replay_commands.run()) return *rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 1;
  }
  return 2;
}
