// replay and trace: trace replay on a running lab, and making trace files.
#include "replay_commands.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "lab_lookup.hpp"
#include "wanlab/api/handler.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/printable.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/lab/state.hpp"
#include "wanlab/replay/generator.hpp"
#include "wanlab/replay/mahimahi.hpp"
#include "wanlab/replay/trace.hpp"

namespace wanlab::cli {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kDefaultData = "traces/data/wan_pairs_skyplane_2022.csv";

// --- flag values ------------------------------------------------------------------------------

// Each parse_* prints "wanlab: --flag: reason" and returns false on a bad value.
bool parse_time_flag(const char* flag, const std::optional<std::string>& text, Duration& out) {
  if (!text) return true;
  auto p = replay::parse_trace_time(*text);
  if (!p) {
    fmt::print(stderr, "wanlab: --{}: {}\n", flag, p.error);
    return false;
  }
  out = p.value;
  return true;
}

bool parse_duration_flag(const char* flag, const std::optional<std::string>& text, Duration& out) {
  if (!text) return true;
  auto p = parse_duration(*text);
  if (!p) {
    fmt::print(stderr, "wanlab: --{}: {}\n", flag, p.error);
    return false;
  }
  out = p.value;
  return true;
}

std::string rate_range(const replay::TraceSummary& s) {
  if (!s.min_rate) return "rate unchanged";
  if (*s.min_rate == *s.max_rate) return fmt::format("rate {}", to_string(*s.min_rate));
  return fmt::format("rate {} .. {}", to_string(*s.min_rate), to_string(*s.max_rate));
}

std::string describe(const replay::Trace& t) {
  const auto s = replay::summarize(t);
  return fmt::format("{} step{} over {} ({}), {}{}", s.steps, s.steps == 1 ? "" : "s",
                     replay::human_trace_time(s.length), replay::to_string(t.mode), rate_range(s),
                     s.outages ? fmt::format(", {} outage step{}", s.outages, s.outages == 1 ? "" : "s") : "");
}

// Writes to `out` (a file) or stdout.
bool write_output(const std::optional<std::string>& out, const std::string& text) {
  if (!out || *out == "-") {
    std::cout << text;
    return true;
  }
  std::ofstream f(*out, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) {
    fmt::print(stderr, "wanlab: cannot write {}: {}\n", *out, std::strerror(errno));
    return false;
  }
  return true;
}

std::string lateness_text(const nlohmann::json& r) {
  const auto& l = r["lateness_ms"];
  return fmt::format("lateness p50 {:.3f} ms, p99 {:.3f} ms, max {:.3f} ms", l["p50"].get<double>(),
                     l["p99"].get<double>(), l["max"].get<double>());
}

std::string api_error(const api::Response& r) {
  if (r.body.contains("error")) return r.body["error"].value("message", r.body.dump());
  return r.body.dump();
}

}  // namespace

struct ReplayCommands::Impl {
  // replay
  CLI::App* replay = nullptr;
  std::optional<std::string> trace, link, lab_name, window;
  bool stop = false, loop = false, hold = false;
  std::string format = "csv";

  // trace generate
  CLI::App* trace_cmd = nullptr;
  CLI::App* generate = nullptr;
  std::string pair;
  std::string data = kDefaultData;
  std::optional<std::string> out, duration, step, diurnal_delay, diurnal_period, delay_noise, noise_correlation,
      outage_mean, brownout_mean;
  replay::GeneratorOptions gen;
  bool gen_loop = false;

  // trace import-mahimahi
  CLI::App* import = nullptr;
  std::string mahimahi_file;
  std::optional<std::string> import_window, import_out;
  std::uint32_t packet_bytes = 1500;

  // trace check
  CLI::App* check = nullptr;
  std::string check_file;
  std::string check_format = "csv";
  std::optional<std::string> check_window;

  int run_replay();
  int run_stop(const std::string& lab, const api::Endpoint& endpoint);
  int run_generate();
  int run_import();
  int run_check();
  std::optional<replay::Trace> load_local(const std::string& file, const std::string& fmt_name,
                                          const std::optional<std::string>& window_text);
};

ReplayCommands::ReplayCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.replay = app.add_subcommand(
      "replay",
      "Replay a WAN trace on a link of a running lab (the controller applies each step in place, at 1 ms "
      "granularity), or stop replays");
  m.replay->add_option("trace", m.trace,
                       "Trace file: CSV (traces/README.md) or, with --format mahimahi, a Mahimahi link trace");
  m.replay->add_option("--link", m.link,
                       "Directed link SRC:DST, e.g. use:euw (required to start; with --stop, only that link)");
  m.replay->add_option("--lab", m.lab_name, "Lab name (default: the only lab up)");
  auto* loop =
      m.replay->add_flag("--loop", m.loop, "Loop the trace (it needs an end: #@ end=...), whatever its #@ mode says");
  auto* hold =
      m.replay->add_flag("--hold", m.hold, "Play the trace once and keep its last values, whatever its #@ mode says");
  loop->excludes(hold);
  m.replay
      ->add_option("--format", m.format, "Trace format: csv (default) or mahimahi (imported into rate steps; loops)")
      ->check(CLI::IsMember({"csv", "mahimahi"}));
  m.replay->add_option("--window", m.window,
                       "Mahimahi only: window the delivery opportunities are counted in (default 100ms)");
  auto* stop = m.replay->add_flag("--stop", m.stop, "Stop the replay on --link, or every replay of the lab");
  stop->excludes(loop)->excludes(hold);
  m.replay->footer(
      "Examples:\n"
      "  wanlab replay traces/steps-50-10-30.csv --link use:euw\n"
      "  wanlab replay traces/mahimahi/lte-synthetic.mahi --format mahimahi --link euw:use --loop\n"
      "  wanlab replay --stop --link use:euw\n"
      "A replayed link's position and step lateness show in `wanlab status`. A `link set` on it applies at once;\n"
      "the replay's next step sets the parameters it names again.");

  m.trace_cmd =
      app.add_subcommand("trace", "Make and check trace files: generate from measurements, import Mahimahi, check");
  m.trace_cmd->require_subcommand(1);

  m.generate = m.trace_cmd->add_subcommand(
      "generate",
      "Generate a realistic inter-DC WAN trace for one direction of a measured region pair: the measured level, a "
      "diurnal swing, slow noise, rare brownouts and outages, all from a seeded random stream (same seed, same trace)");
  m.generate
      ->add_option("--pair", m.pair, "Region pair SRC,DST as in the measurements, e.g. aws:us-east-1,aws:eu-west-1")
      ->required();
  m.generate->add_option("--data", m.data,
                         fmt::format("Measurement CSV (default {}, relative to the working folder)", kDefaultData));
  m.generate->add_option("--duration", m.duration, "Length of the trace, e.g. 1h, 30min, 600s (default 1h)");
  m.generate->add_option("--step", m.step, "Time between steps, whole ms (default 1s)");
  m.generate->add_option("--seed", m.gen.seed, "Random seed (default 1)");
  m.generate->add_flag("--loop", m.gen_loop, "Write a looping trace (mode=loop, period = duration) instead of hold");
  m.generate->add_option("-o,--out", m.out, "Output file (default: standard output)");
  m.generate->add_option("--diurnal-amplitude", m.gen.diurnal_amplitude,
                         "Fraction of the rate lost at the busiest hour (default 0.15)");
  m.generate->add_option("--diurnal-delay", m.diurnal_delay, "Delay added at the busiest hour (default 0.5ms)");
  m.generate->add_option("--diurnal-period", m.diurnal_period,
                         "Length of one day; shorter compresses the swing (default 24h)");
  m.generate->add_option("--start-hour", m.gen.start_hour, "Time of day at the trace's start, hours (default 9)");
  m.generate->add_option("--peak-hour", m.gen.peak_hour, "Busiest time of day, hours (default 15)");
  m.generate->add_option("--rate-noise", m.gen.rate_noise, "Standard deviation of the log-rate wander (default 0.03)");
  m.generate->add_option("--delay-noise", m.delay_noise, "Standard deviation of the delay wander (default 0.2ms)");
  m.generate->add_option("--noise-correlation", m.noise_correlation, "Correlation time of the wander (default 30s)");
  m.generate->add_option("--outages-per-hour", m.gen.outages_per_hour, "Mean outages per hour (default 0.1)");
  m.generate->add_option("--outage-mean", m.outage_mean, "Mean outage length (default 30s)");
  m.generate->add_option("--brownouts-per-hour", m.gen.brownouts_per_hour, "Mean brownouts per hour (default 0.5)");
  m.generate->add_option("--brownout-mean", m.brownout_mean, "Mean brownout length (default 120s)");
  m.generate->footer(
      "Example (one shipped trace):\n"
      "  wanlab trace generate --pair aws:us-east-1,aws:eu-west-1 --duration 1h --step 1s --seed 1 \\\n"
      "      -o traces/generated/use-euw-1h-seed1.csv\n"
      "The model is described in traces/README.md and in the trace's header comment.");

  m.import = m.trace_cmd->add_subcommand(
      "import-mahimahi",
      "Convert a Mahimahi link trace (one line per 1500-byte delivery opportunity, in ms) into rate steps: "
      "opportunities are counted per window; the result loops with the trace's last timestamp as period, as Mahimahi "
      "does");
  m.import->add_option("file", m.mahimahi_file, "Mahimahi trace file")->required();
  m.import->add_option("--window", m.import_window,
                       "Window the opportunities are counted in, whole ms (default 100ms)");
  m.import->add_option("--packet-bytes", m.packet_bytes, "Bytes per delivery opportunity (default 1500, Mahimahi's)");
  m.import->add_option("-o,--out", m.import_out, "Output CSV (default: standard output)");

  m.check = m.trace_cmd->add_subcommand(
      "check", "Validate a trace file and summarize it (every problem is listed with line and column)");
  m.check->add_option("file", m.check_file, "Trace file")->required();
  m.check->add_option("--format", m.check_format, "csv (default) or mahimahi")
      ->check(CLI::IsMember({"csv", "mahimahi"}));
  m.check->add_option("--window", m.check_window, "Mahimahi only: the window (default 100ms)");
}

ReplayCommands::~ReplayCommands() = default;

bool ReplayCommands::is_replay() const { return impl_->replay && *impl_->replay; }

std::optional<int> ReplayCommands::run() {
  auto& m = *impl_;
  if (*m.replay) return m.run_replay();
  if (*m.generate) return m.run_generate();
  if (*m.import) return m.run_import();
  if (*m.check) return m.run_check();
  return std::nullopt;
}

std::optional<replay::Trace> ReplayCommands::Impl::load_local(const std::string& file, const std::string& fmt_name,
                                                              const std::optional<std::string>& window_text) {
  try {
    if (fmt_name == "mahimahi") {
      replay::MahimahiOptions o;
      if (!parse_duration_flag("window", window_text, o.window)) return std::nullopt;
      return replay::load_mahimahi(file, o);
    }
    if (window_text) {
      fmt::print(stderr, "wanlab: --window is for --format mahimahi only\n");
      return std::nullopt;
    }
    return replay::load_trace(file);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return std::nullopt;
  }
}

int ReplayCommands::Impl::run_replay() {
  if (stop) {
    if (trace) {
      fmt::print(stderr, "wanlab: replay --stop takes no trace file\n");
      return 2;
    }
    if (remote_api()) return run_stop(find_remote_lab(lab_name).lab, *remote_api());
    const auto found = find_lab(lab_name);
    if (!lab::controller_alive(found.state.lab)) {
      fmt::print(stderr, "wanlab: the controller of lab {} is not running, so nothing replays\n", found.state.lab);
      return 1;
    }
    return run_stop(found.state.lab, api::Endpoint{lab::socket_path(found.state.lab), {}, {}});
  }
  if (!trace) {
    fmt::print(stderr, "wanlab: replay: give a trace file (wanlab replay TRACE --link SRC:DST) or --stop\n");
    return 2;
  }
  if (!link) {
    fmt::print(stderr, "wanlab: replay: --link SRC:DST is required, e.g. --link use:euw\n");
    return 2;
  }
  try {
    api::parse_link_ref(*link, "--link");
  } catch (const api::ApiError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }
  // The request is JSON, whose strings are UTF-8: other bytes are named here, escaped.
  if (!valid_utf8(*link)) {
    fmt::print(stderr, "wanlab: --link '{}': not valid UTF-8, so no DC's name\n", printable(*link, 80));
    return 2;
  }
  if (const auto abs = fs::absolute(*trace).lexically_normal().string(); !valid_utf8(abs)) {
    fmt::print(stderr,
               "wanlab: the trace's path '{}' is not valid UTF-8, which the controller's API (JSON) cannot carry; "
               "rename or link the file\n",
               printable(abs, 200));
    return 2;
  }
  // Checked here too, so problems come back with the file as the user named it.
  auto t = load_local(*trace, format, window);
  if (!t) return 2;
  if (loop && !t->end) {
    fmt::print(stderr, "wanlab: --loop: {} has no end, so no loop period; add \"#@ end=<time>\" to it\n", *trace);
    return 2;
  }
  // Through --api the controller reads the trace from its own file system: the path goes as
  // given, a relative one under the controller's working folder (--api-dir; a project's
  // path in a swarm lab).
  std::string lab_of;
  api::Endpoint endpoint;
  if (remote_api()) {
    lab_of = find_remote_lab(lab_name).lab;
    endpoint = *remote_api();
  } else {
    const auto found = find_lab(lab_name);
    if (!lab::controller_alive(found.state.lab)) {
      fmt::print(stderr, "wanlab: the controller of lab {} is not running; `wanlab down {}` then `up` again\n",
                 found.state.lab, found.state.lab);
      return 1;
    }
    lab_of = found.state.lab;
    endpoint.socket = lab::socket_path(lab_of);
  }
  nlohmann::json body = {{"link", *link},
                         {"trace", remote_api() ? remote_path(*trace) : fs::absolute(*trace).lexically_normal().string()},
                         {"format", format}};
  if (loop) body["mode"] = "loop";
  if (hold) body["mode"] = "hold";
  if (window) body["window"] = *window;
  const auto r = api::call(endpoint, "POST", "/v1/replays", body.dump(), 10s);
  if (r.status != 200) {
    fmt::print(stderr, "wanlab: replay on {}: {}\n", *link, api_error(r));
    const auto code = r.body.contains("error") ? r.body["error"].value("code", "") : "";
    return code == "internal" || code == "kernel" ? 1 : 2;
  }
  if (loop) t->mode = replay::EndMode::loop;
  if (hold) t->mode = replay::EndMode::hold;
  fmt::print("replaying {} on {}->{} (lab {}): {}\n", *trace, r.body["src"].get<std::string>(),
             r.body["dst"].get<std::string>(), lab_of, describe(*t));
  fmt::print("`wanlab status` shows its position and step lateness; `wanlab replay --stop --link {}` stops it\n",
             *link);
  return 0;
}

int ReplayCommands::Impl::run_stop(const std::string& lab_of, const api::Endpoint& endpoint) {
  std::string target = "/v1/replays";
  if (link) {
    try {
      const auto [src, dst] = api::parse_link_ref(*link, "--link");
      target += fmt::format("/{}/{}", src, dst);
    } catch (const api::ApiError& e) {
      fmt::print(stderr, "wanlab: {}\n", e.what());
      return 2;
    }
  }
  const auto r = api::call(endpoint, "DELETE", target, {}, 10s);
  if (r.status != 200) {
    fmt::print(stderr, "wanlab: replay --stop: {}\n", api_error(r));
    return r.status == 404 ? 2 : 1;
  }
  const auto& stopped = r.body["stopped"];
  if (stopped.empty()) fmt::print("no replay was running in lab {}\n", lab_of);
  for (const auto& s : stopped)
    fmt::print("stopped replay of {} on {}->{} at step {}/{}{} ({}); {} steps applied, {}\n",
               s["trace"].get<std::string>(), s["src"].get<std::string>(), s["dst"].get<std::string>(),
               s["step"].get<std::size_t>(), s["steps"].get<std::size_t>(),
               s["mode"] == "loop" ? fmt::format(", loop {}", s["loops"].get<std::uint64_t>()) : "",
               s["state"].get<std::string>() == "finished" ? "it had finished" : "the link keeps the values in force",
               s["applied"].get<std::uint64_t>(), lateness_text(s));
  return 0;
}

int ReplayCommands::Impl::run_generate() {
  const auto comma = pair.find(',');
  if (comma == std::string::npos || comma == 0 || comma + 1 == pair.size()) {
    fmt::print(stderr, "wanlab: --pair: '{}': give two regions as SRC,DST, e.g. aws:us-east-1,aws:eu-west-1\n", pair);
    return 2;
  }
  const std::string a = pair.substr(0, comma), b = pair.substr(comma + 1);
  if (!parse_time_flag("duration", duration, gen.duration) || !parse_time_flag("step", step, gen.step) ||
      !parse_duration_flag("diurnal-delay", diurnal_delay, gen.diurnal_delay) ||
      !parse_time_flag("diurnal-period", diurnal_period, gen.diurnal_period) ||
      !parse_duration_flag("delay-noise", delay_noise, gen.delay_noise) ||
      !parse_time_flag("noise-correlation", noise_correlation, gen.noise_correlation) ||
      !parse_time_flag("outage-mean", outage_mean, gen.outage_mean) ||
      !parse_time_flag("brownout-mean", brownout_mean, gen.brownout_mean))
    return 2;
  gen.loop = gen_loop;
  if (auto problems = replay::check(gen); !problems.empty()) {
    for (const auto& p : problems) fmt::print(stderr, "wanlab: trace generate: {}\n", p);
    return 2;
  }
  replay::PairMeasurement m;
  try {
    m = replay::load_pair(data, a, b);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    if (data == kDefaultData && !fs::exists(data))
      fmt::print(stderr, "wanlab: run from the repository root, or give the measurements with --data FILE\n");
    return 2;
  }
  const auto g = replay::generate(m, gen);

  // The command that makes this file again: every option that differs from its default.
  const replay::GeneratorOptions d;
  std::string cmd = fmt::format("wanlab trace generate --pair {},{} --duration {} --step {} --seed {}", a, b,
                                replay::human_trace_time(gen.duration), replay::human_trace_time(gen.step), gen.seed);
  if (gen.loop) cmd += " --loop";
  if (data != kDefaultData) cmd += " --data " + data;
  auto num = [&](const char* flag, double v, double dv) {
    if (v != dv) cmd += fmt::format(" --{} {:g}", flag, v);
  };
  auto dur = [&](const char* flag, Duration v, Duration dv, bool trace_time) {
    if (v != dv) cmd += fmt::format(" --{} {}", flag, trace_time ? replay::human_trace_time(v) : to_string(v));
  };
  num("diurnal-amplitude", gen.diurnal_amplitude, d.diurnal_amplitude);
  dur("diurnal-delay", gen.diurnal_delay, d.diurnal_delay, false);
  dur("diurnal-period", gen.diurnal_period, d.diurnal_period, true);
  num("start-hour", gen.start_hour, d.start_hour);
  num("peak-hour", gen.peak_hour, d.peak_hour);
  num("rate-noise", gen.rate_noise, d.rate_noise);
  dur("delay-noise", gen.delay_noise, d.delay_noise, false);
  dur("noise-correlation", gen.noise_correlation, d.noise_correlation, true);
  num("outages-per-hour", gen.outages_per_hour, d.outages_per_hour);
  dur("outage-mean", gen.outage_mean, d.outage_mean, true);
  num("brownouts-per-hour", gen.brownouts_per_hour, d.brownouts_per_hour);
  dur("brownout-mean", gen.brownout_mean, d.brownout_mean, true);

  std::vector<std::string> comment{
      fmt::format("Synthetic WAN trace for the link {} -> {} (wanlab trace generate).", a, b), "made by: " + cmd};
  for (const auto& n : g.notes) comment.push_back(n);
  if (!write_output(out, replay::to_csv(g.trace, comment))) return 1;
  if (out) fmt::print(stderr, "wrote {}: {}\n", *out, describe(g.trace));
  return 0;
}

int ReplayCommands::Impl::run_import() {
  replay::MahimahiOptions o;
  if (!parse_duration_flag("window", import_window, o.window)) return 2;
  o.packet_bytes = packet_bytes;
  std::optional<replay::Trace> t;
  try {
    t = replay::load_mahimahi(mahimahi_file, o);
  } catch (const core::ConfigError& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 2;
  }
  const Duration window_used = o.window;
  std::string cmd = "wanlab trace import-mahimahi " + mahimahi_file;
  if (import_window) cmd += " --window " + *import_window;
  if (packet_bytes != 1500) cmd += fmt::format(" --packet-bytes {}", packet_bytes);
  const std::vector<std::string> comment{
      fmt::format("Rate steps imported from the Mahimahi trace {}.", mahimahi_file), "made by: " + cmd,
      fmt::format("{} windows: rate = delivery opportunities in the window x {} bytes x 8 / window length; equal "
                  "neighbours merged.",
                  replay::format_trace_time(window_used), packet_bytes),
      "Mahimahi traces loop: the period is the last timestamp."};
  if (!write_output(import_out, replay::to_csv(*t, comment))) return 1;
  if (import_out) fmt::print(stderr, "wrote {}: {}\n", *import_out, describe(*t));
  return 0;
}

int ReplayCommands::Impl::run_check() {
  auto t = load_local(check_file, check_format, check_window);
  if (!t) return 2;
  fmt::print("{}: valid: {}\n", check_file, describe(*t));
  return 0;
}

}  // namespace wanlab::cli
