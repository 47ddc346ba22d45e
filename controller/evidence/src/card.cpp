// card.yaml and launch.sh of a run folder.
#include "wanlab/evidence/card.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "wanlab/common/units.hpp"
#include "wanlab/core/round_trip.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/common/version.hpp"

namespace wanlab::evidence {
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string os_name() {
  std::ifstream f("/etc/os-release");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      auto v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  return "unknown";
}

double ms(Duration d) { return static_cast<double>(d.count()) / 1e6; }

json network_json(const CardInputs& in) {
  json net = json::object();
  const auto& topo = *in.topology;
  net["topology"] = topo.name;
  if (!topo.source_file.empty()) net["topology_file"] = fs::absolute(topo.source_file).string();
  net["backend"] = in.summary.value("backend", std::string("unknown"));
  const double scale = in.plan ? in.plan->scenario.scale : in.summary.value("scale", 1.0);
  net["scale"] = scale;
  if (in.plan) {
    const auto& s = in.plan->scenario;
    net["lan_scale"] = workload::run_lan_scale(s);
    net["connections"] = s.connections;
    net["tcp"] = {{"congestion", s.tcp_congestion},
                  {"slow_start_after_idle", s.tcp_slow_start_after_idle},
                  {"pacing", s.tcp_pacing},
                  {"window_bytes", s.tcp_window ? json(*s.tcp_window) : json("host default")}};
  }
  json wan = json::array();
  for (const auto& l : topo.links) {
    json e = {{"src", topo.dcs.at(l.src).name},
              {"dst", topo.dcs.at(l.dst).name},
              {"rate", to_string(l.params.rate)},
              {"rate_bps", l.params.rate.bps},
              {"rate_bps_as_run", static_cast<std::uint64_t>(std::llround(static_cast<double>(l.params.rate.bps) * scale))},
              {"delay_ms", ms(l.params.delay)},
              {"rtt_ms", ms(core::round_trip(topo, l))},
              {"jitter_ms", ms(l.params.jitter)},
              {"loss", l.params.loss.fraction()}};
    if (l.trace) e["trace"] = fs::absolute(*l.trace).string();
    wan.push_back(std::move(e));
  }
  net["wan"] = std::move(wan);
  return net;
}

}  // namespace

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,+@%") ==
                           std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

json make_card(const CardInputs& in) {
  json c = json::object();
  c["card"] = kCardVersion;
  c["command"] = in.command;
  c["created_at"] = utc_now();
  json run = {{"id", in.summary.value("run", std::string())}};
  if (!in.variant.empty()) run["variant"] = in.variant;
  c["run"] = std::move(run);
  if (in.plan) {
    const auto& s = in.plan->scenario;
    c["scenario"] = {{"name", s.name}, {"file", s.source_file}};
    // Replayed programs (an imported job): the file they came from; the model is then unused.
    if (!s.programs_file.empty()) c["scenario"]["programs"] = s.programs_file.string();
    const auto& m = s.model;
    c["model"] = {{"preset", m.preset.empty() ? std::string("custom") : m.preset},
                  {"layers", m.layers},
                  {"hidden", m.hidden},
                  {"heads", m.heads},
                  {"kv_heads", m.kv_heads},
                  {"ffn_hidden", m.ffn_hidden},
                  {"gated_mlp", m.gated_mlp},
                  {"seq_len", m.seq_len},
                  {"vocab", m.vocab},
                  {"dtype", workload::to_string(m.dtype)}};
    c["parallelism"] = {{"pp", s.parallelism.pp}, {"dp", s.parallelism.dp}, {"tp", s.parallelism.tp},
                        {"gpus", s.parallelism.gpus()}};
    c["schedule"] = {{"name", workload::to_string(s.schedule)},
                     {"micro_batch_size", s.micro_batch_size},
                     {"micro_batches", s.micro_batches},
                     {"iterations", s.iterations},
                     {"warmup", s.warmup}};
    // placement: per stage, the DC of each DP replica (as the plan placed them).
    json placement = json::array();
    for (int st = 0; st < s.parallelism.pp; ++st) {
      json dcs = json::array();
      for (int d = 0; d < s.parallelism.dp; ++d)
        for (const auto& w : in.plan->workers)
          if (w.stage == st && w.dp_rank == d && w.tp_rank == 0) dcs.push_back(in.plan->topology.dcs.at(w.dc).name);
      placement.push_back({{"stage", st}, {"dcs", std::move(dcs)}});
    }
    const char* rule = !s.placement.empty() ? "scenario"
                       : s.programs.empty() ? "atlas"
                                            : "programs: worker r in DC r mod the DC count";
    c["placement"] = {{"rule", rule}, {"stages", std::move(placement)}};
  }
  json gpus = json::array();
  if (in.topology)
    for (const auto& dc : in.topology->dcs)
      gpus.push_back({{"dc", dc.name}, {"kind", dc.gpu}, {"nodes", dc.nodes}, {"gpus_per_node", dc.gpus_per_node}});
  json hw = {{"gpus", std::move(gpus)}};
  if (in.plan) {
    hw["compute"] = workload::to_string(in.plan->scenario.compute);
    const auto& s = in.plan->scenario;
    if (s.mfu) {
      hw["mfu"] = *s.mfu;
    } else if (in.topology && !in.topology->dcs.empty()) {
      hw["mfu"] = workload::default_mfu(in.topology->dcs.front().gpu, s.model.dtype);
      hw["mfu_source"] = "the GPU table's default";
    }
  }
  c["hardware"] = std::move(hw);
  if (in.topology) c["network"] = network_json(in);
  json fw = {{"name", in.framework}};
  if (!in.launched.empty()) fw["command"] = in.launched;
  c["framework"] = std::move(fw);
  c["bandwidth_policy"] = in.plan ? in.plan->scenario.policy : in.summary.value("policy", std::string("none"));
  c["wanlab"] = {{"version", std::string(version())}, {"commit", std::string(commit())}};
  c["host"] = {{"name", host_name()},
               {"kernel", kernel_release()},
               {"os", os_name()},
               {"cpus", std::thread::hardware_concurrency()}};
  c["invocation"] = {{"cwd", in.invocation.cwd}, {"argv", in.invocation.argv}};
  json results = json::object();
  if (const auto* it = in.summary.contains("iteration_time_s") ? &in.summary["iteration_time_s"] : nullptr;
      it && it->is_object() && it->contains("mean"))
    results["iteration_time_s"] = it->at("mean");
  if (in.summary.contains("wall_time_s")) results["wall_time_s"] = in.summary["wall_time_s"];
  if (in.summary.contains("exit_status")) results["exit_status"] = in.summary["exit_status"];
  if (!results.empty()) c["results"] = std::move(results);
  return c;
}

namespace {

// A string a YAML reader would take for something else (a number, a boolean, null).
bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::set<std::string> words = {"true", "false", "yes", "no", "on", "off", "null", "~",
                                              "True", "False", "Yes", "No", "On", "Off", "Null", "NULL",
                                              "TRUE", "FALSE", "YES", "NO", "ON", "OFF", "y", "n", "Y", "N"};
  if (words.count(s)) return true;
  char* end = nullptr;
  errno = 0;
  (void)std::strtod(s.c_str(), &end);
  if (end && *end == '\0') return true;
  return s.find_first_of(":#{}[],&*!|>'\"%@`\n") != std::string::npos || s.front() == ' ' || s.back() == ' ' ||
         s.front() == '-' || s.front() == '?';
}

void emit(YAML::Emitter& e, const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      e << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        e << YAML::Key << k << YAML::Value;
        emit(e, v);
      }
      e << YAML::EndMap;
      break;
    case json::value_t::array: {
      const bool flat = std::all_of(j.begin(), j.end(), [](const json& x) { return x.is_primitive(); }) && j.size() <= 16;
      e << (flat ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
      for (const auto& v : j) emit(e, v);
      e << YAML::EndSeq;
      break;
    }
    case json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (needs_quotes(s)) e << YAML::DoubleQuoted;
      e << s;
      break;
    }
    case json::value_t::boolean:
      e << j.get<bool>();
      break;
    case json::value_t::number_integer:
      e << j.get<std::int64_t>();
      break;
    case json::value_t::number_unsigned:
      e << j.get<std::uint64_t>();
      break;
    case json::value_t::number_float: {
      const double d = j.get<double>();
      e << (std::isfinite(d) ? fmt::format("{}", d) : std::string(".nan"));
      break;
    }
    default:
      e << YAML::Null;
  }
}

}  // namespace

std::string card_yaml(const json& card) {
  YAML::Emitter e;
  e.SetIndent(2);
  emit(e, card);
  if (!e.good()) throw std::runtime_error(fmt::format("cannot write the card as YAML: {}", e.GetLastError()));
  return fmt::format("# wanlab workload card (docs/evidence.md): what ran, on what, through which network.\n{}\n",
                     e.c_str());
}

std::string launch_script(const CardInputs& in) {
  std::string out = "#!/bin/sh\n";
  out += fmt::format("# Reproduces this run folder: `wanlab {}` as it was invoked, wanlab {} (commit {}).\n",
                     in.command, version(), commit());
  out += "# Build that commit first (git checkout COMMIT && scripts/build.sh); card.yaml says what ran.\n";
  if (in.command == "run" || in.command == "bench" || in.command == "launch")
    out += "# It needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for the lab's namespaces, as the first time.\n";
  out += "set -eu\n";
  out += "cd " + shell_quote(in.invocation.cwd.empty() ? fs::current_path().string() : in.invocation.cwd) + "\n";
  std::string line;
  for (const auto& w : in.invocation.argv) line += (line.empty() ? "" : " ") + shell_quote(w);
  out += line + "\n";
  if (!in.variant.empty() && !in.invocation.argv.empty()) {
    const auto& exe = shell_quote(in.invocation.argv.front());
    out += "\n# This variant alone (scenario.json beside this script is the scenario as run: its policy,\n"
           "# connections and placement):\n";
    if (in.command == "bench")
      out += fmt::format("# {} run \"$(dirname \"$0\")/scenario.json\" --out \"$(dirname \"$0\")-rerun\"\n", exe);
    else
      out += fmt::format("# {} simulate \"$(dirname \"$0\")/scenario.json\" --policies {} --connections {} "
                         "--no-placement-baseline --out \"$(dirname \"$0\")-rerun\"\n",
                         exe, in.plan ? in.plan->scenario.policy : "fair", in.plan ? in.plan->scenario.connections : 1);
  }
  return out;
}

void write_card(const fs::path& dir, const CardInputs& in) {
  auto card = make_card(in);
  card["run"]["folder"] = fs::absolute(dir).filename().string();
  const auto write = [](const fs::path& file, const std::string& text) {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", file.string(), std::strerror(errno)));
  };
  write(dir / "card.yaml", card_yaml(card));
  write(dir / "launch.sh", launch_script(in));
  ::chmod((dir / "launch.sh").c_str(), 0755);
}

namespace {

[[noreturn]] void fail(const std::string& file, const YAML::Mark& m, const std::string& path, const std::string& why) {
  if (m.is_null())
    throw EvidenceError(fmt::format("{}: {}: {}", file, path, why));
  throw EvidenceError(fmt::format("{}:{}:{}: {}: {}", file, m.line + 1, m.column + 1, path, why));
}

json to_json_tree(const YAML::Node& n, const std::string& file, const std::string& path) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        const auto key = kv.first.as<std::string>();
        o[key] = to_json_tree(kv.second, file, path.empty() ? key : path + "." + key);
      }
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      std::size_t i = 0;
      for (const auto& v : n) a.push_back(to_json_tree(v, file, fmt::format("{}[{}]", path, i++)));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const auto& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted: a string whatever it looks like
      if (s == "true" || s == "false") return s == "true";
      if (s == "~" || s == "null") return nullptr;
      char* end = nullptr;
      errno = 0;
      if (!s.empty() && s.find_first_of(".eE") == std::string::npos) {
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (end && *end == '\0' && errno == 0) return v;
      }
      end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == '\0') return d;
      return s;
    }
    default:
      return nullptr;
  }
}

}  // namespace

json parse_card(const std::string& text, const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw EvidenceError(fmt::format("{}:{}:{}: not YAML: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root.IsMap()) fail(file, root.Mark(), "(top level)", "a card is a mapping (key: value lines)");
  const auto need = [&](const YAML::Node& parent, const std::string& path, const char* key, YAML::NodeType::value type,
                        const char* what) {
    const auto n = parent[key];
    const auto full = path.empty() ? std::string(key) : path + "." + key;
    if (!n) fail(file, parent.Mark(), full, "missing");
    if (n.Type() != type) fail(file, n.Mark(), full, fmt::format("must be {}", what));
    return n;
  };
  const auto version = need(root, "", "card", YAML::NodeType::Scalar, "the format version, 1");
  if (version.Scalar() != std::to_string(kCardVersion))
    fail(file, version.Mark(), "card", fmt::format("unknown card version '{}' (this wanlab reads {})", version.Scalar(),
                                                   kCardVersion));
  const auto command = need(root, "", "command", YAML::NodeType::Scalar, "a command name");
  static const std::set<std::string> commands = {"run", "bench", "simulate", "launch", "import"};
  if (!commands.count(command.Scalar()))
    fail(file, command.Mark(), "command", fmt::format("'{}' is not one of run, bench, simulate, launch, import",
                                                      command.Scalar()));
  const auto wl = need(root, "", "wanlab", YAML::NodeType::Map, "a mapping with version and commit");
  need(wl, "wanlab", "version", YAML::NodeType::Scalar, "a version string");
  need(wl, "wanlab", "commit", YAML::NodeType::Scalar, "a commit hash");
  need(root, "", "host", YAML::NodeType::Map, "a mapping (name, kernel, os, cpus)");
  need(root, "", "framework", YAML::NodeType::Map, "a mapping (name, command)");
  if (root["parallelism"]) {
    const auto p = need(root, "", "parallelism", YAML::NodeType::Map, "a mapping with pp, dp and tp");
    for (const char* k : {"pp", "dp", "tp"}) {
      const auto v = need(p, "parallelism", k, YAML::NodeType::Scalar, "a positive integer");
      char* end = nullptr;
      const long n = std::strtol(v.Scalar().c_str(), &end, 10);
      if (!end || *end != '\0' || n < 1)
        fail(file, v.Mark(), fmt::format("parallelism.{}", k),
             fmt::format("'{}' is not a positive integer", v.Scalar()));
    }
  }
  if (root["network"]) {
    const auto net = need(root, "", "network", YAML::NodeType::Map, "a mapping");
    if (net["wan"]) {
      const auto wan = need(net, "network", "wan", YAML::NodeType::Sequence, "a sequence of links");
      std::size_t i = 0;
      for (const auto& l : wan) {
        const auto path = fmt::format("network.wan[{}]", i++);
        if (!l.IsMap()) fail(file, l.Mark(), path, "must be a mapping (src, dst, rate_bps, rtt_ms)");
        for (const char* k : {"src", "dst", "rate_bps"}) need(l, path, k, YAML::NodeType::Scalar, "a scalar");
        const auto r = l["rate_bps"].Scalar();
        char* end = nullptr;
        (void)std::strtod(r.c_str(), &end);
        if (!end || *end != '\0') fail(file, l["rate_bps"].Mark(), path + ".rate_bps", fmt::format("'{}' is not a number", r));
      }
    }
  }
  return to_json_tree(root, file, "");
}

json load_card(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw EvidenceError(fmt::format("{}: cannot read: {}", file.string(), std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_card(ss.str(), file.string());
}

}  // namespace wanlab::evidence
