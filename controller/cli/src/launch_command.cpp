// wanlab launch: the processes (launch_plan.hpp has what they get).
#include "launch_command.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "evidence_commands.hpp"
#include "lab_lookup.hpp"
#include "launch_plan.hpp"
#include "run_support.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/child_process.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/lab/naming.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/netlink/node_entry.hpp"
#include "wanlab/run/results.hpp"

extern char** environ;

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// How often the links are sampled while the job runs (links.csv).
constexpr auto kSampleEvery = 100ms;
// After Ctrl-C (or when every rank has exited, for what is left in their process groups):
// SIGTERM, then SIGKILL this much later.
constexpr auto kKillGrace = 5s;

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// A free TCP port in the master's namespace, bound and given back: ephemeral, so nothing
// else there listens on it.
int free_port(const netlink::Netns& ns) {
  const netlink::ScopedNetns inside(ns);
  const UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) throw std::runtime_error(fmt::format("socket in {}: {}", ns.name(), std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  const bool ok = ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  if (!ok) throw std::runtime_error(fmt::format("a free port in {}: {}", ns.name(), std::strerror(err)));
  return ntohs(a.sin_port);
}

struct LinkCounters {
  std::uint64_t bytes = 0, payload_bytes = 0, drops = 0, queued_packets = 0;
};

// Per directed link (DC indices), from GET /v1/status.
std::map<std::pair<std::size_t, std::size_t>, LinkCounters> link_counters(const core::Topology& topo,
                                                                          const nlohmann::json& status) {
  std::map<std::pair<std::size_t, std::size_t>, LinkCounters> out;
  const auto it = status.find("links");
  if (it == status.end() || !it->is_array()) return out;
  for (const auto& l : *it) {
    if (!l.contains("counters")) continue;
    const auto src = topo.dc_index(l["src"].get<std::string>());
    const auto dst = topo.dc_index(l["dst"].get<std::string>());
    if (!src || !dst) continue;
    const auto& c = l["counters"];
    out[{*src, *dst}] = {c.value("bytes", std::uint64_t{0}), c.value("payload_bytes", std::uint64_t{0}),
                         c.value("drops", std::uint64_t{0}), c.value("queued_packets", std::uint64_t{0})};
  }
  return out;
}

run::BackendCounters backend_counters(const nlohmann::json& status) {
  run::BackendCounters out;
  const auto it = status.find("backend_counters");
  if (it == status.end() || !it->is_object()) return out;
  for (auto c = it->begin(); c != it->end(); ++c)
    if (c->is_number_unsigned()) out.emplace_back(c.key(), c->get<std::uint64_t>());
  return out;
}

struct Proc {
  launch::Rank rank;
  std::string path;  // the program, resolved
  std::vector<std::string> env_strings;
  ChildProcess child;  // its pid: -1 until started
  UniqueFd out;        // read end: its stdout and stderr
  std::string partial;
  std::ofstream log;
  std::optional<int> status;  // exit code, or 128 + signal
  double wall_s = 0;
  std::string prefix;
};

// The environment of a rank: the launching process's, with launch's and --env's names set.
void build_env(Proc& p) {
  std::map<std::string, std::string> set;
  for (const auto& [k, v] : p.rank.env) set[k] = v;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos && set.count(kv.substr(0, eq))) continue;
    p.env_strings.push_back(kv);
  }
  for (const auto& [k, v] : p.rank.env) p.env_strings.push_back(k + "=" + v);
}

// Starts one rank in its own process group inside its node. Everything is prepared before
// fork: the child makes system calls only. A failed exec is thrown (SystemError, its errno).
void start(Proc& p, const netlink::NodeEntry& entry, int devnull) {
  auto out = make_pipe("a rank's output");
  const int out_w = out.write.get();
  SpawnOptions o;
  o.program = p.path;
  o.argv = p.rank.argv;
  o.env = p.env_strings;
  o.new_process_group = true;
  o.in_child = [&entry, out_w] {
    const char* failed = "";
    if (entry.enter(&failed) == 0) return 0;
    static const char msg[] = "wanlab launch: cannot enter the node's namespaces\n";
    [[maybe_unused]] auto n = ::write(out_w, msg, sizeof msg - 1);
    return 126;
  };
  o.stdout_fd = out_w;
  o.stderr_fd = out_w;
  o.stdin_fd = devnull;
  o.default_signals = {SIGINT, SIGTERM, SIGPIPE};
  o.unblock_signals = true;
  o.close_other_fds = true;
  p.child = ChildProcess::spawn(o);
  p.out = std::move(out.read);
}

void emit(Proc& p, const char* data, std::size_t n) {
  p.log.write(data, static_cast<std::streamsize>(n));
  p.partial.append(data, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = p.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    fmt::print("{}{}\n", p.prefix, std::string_view(p.partial).substr(start, nl - start));
  p.partial.erase(0, start);
  std::fflush(stdout);
}

void flush_partial(Proc& p) {
  if (!p.partial.empty()) fmt::print("{}{}\n", p.prefix, p.partial);
  p.partial.clear();
  p.log.flush();
  std::fflush(stdout);
}

std::string iso_now() {
  const auto t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int bad(const std::string& line) {
  fmt::print(stderr, "wanlab: launch: {}\n", line);
  return 2;
}

// Why a launch stops before anything starts; empty when it goes on.
using Refusal = std::optional<std::string>;
using LinkKey = std::pair<std::size_t, std::size_t>;

// What one launch holds from its plan to its summary.
struct Job {
  FoundLab found;
  std::vector<launch::Node> nodes;
  launch::Options o;
  std::vector<Proc> procs;
  fs::path out;
};

// Every program is found before anything starts. The nodes see the host's files (their
// mount namespaces differ in /sys and /etc/hosts only), so the host's PATH search is theirs.
Refusal resolve_programs(const LaunchArgs& a, const std::vector<launch::Rank>& ranks, Job& j) {
  std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  if (const char* p = std::getenv("PATH"); p && *p) path = p;
  for (const auto& [k, v] : j.o.user_env)
    if (k == "PATH") path = v;
  j.procs = std::vector<Proc>(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    auto& p = j.procs[i];
    p.rank = ranks[i];
    if (const auto program = launch::program_of(p.rank.argv)) {
      const auto where = launch::find_in_path(*program, path);
      if (!where)
        return fmt::format("command '{}' not found{} (PATH {}); nothing started", *program,
                           program->find('/') == std::string::npos ? " in the nodes' PATH" : " or not executable",
                           path);
      if (!a.shell && p.rank.argv.front() == *program) p.path = *where;
    }
    if (p.path.empty()) p.path = p.rank.argv.front();
    p.prefix = fmt::format("[{}/{}] ", p.rank.node, p.rank.rank);
  }
  return std::nullopt;
}

// The lab, its nodes, the options and the ranks with their programs.
Refusal plan_job(const LaunchArgs& a, Job& j) {
  try {
    j.found = find_lab(a.lab);
  } catch (const std::exception& e) {
    return e.what();
  }
  const auto& lab_name = j.found.state.lab;
  if (!j.found.state.router_ports.empty())
    return fmt::format("lab {} is a router-only lab: its nodes are containers; start a job there with "
                       "docker-compose exec (docs/frameworks.md)",
                       lab_name);
  if (!lab::controller_alive(lab_name))
    return fmt::format("the controller of lab {} is not running; `wanlab down {}`, then `up` again", lab_name,
                       lab_name);

  std::vector<launch::Rank> ranks;
  try {
    j.nodes = launch::select_nodes(j.found.topology, a.nodes, a.all);
    j.o.lab = lab_name;
    j.o.per_node = a.per_node;
    j.o.user_env = launch::parse_env(a.env);
    j.o.shell = a.shell;
    for (const auto& [k, v] : launch::torchrun_defaults())
      if (!std::getenv(k.c_str())) j.o.defaults.emplace_back(k, v);
  } catch (const launch::LaunchError& e) {
    return e.what();
  }
  std::map<std::string, netlink::Netns> namespaces;
  for (const auto& n : j.nodes) {
    auto ns = netlink::Netns::open(lab::ns_node(lab_name, n.name));
    if (!ns)
      return fmt::format("namespace {} of node {} is missing; the lab is broken: `wanlab down {}`",
                         lab::ns_node(lab_name, n.name), n.name, lab_name);
    namespaces.emplace(n.name, std::move(*ns));
  }
  try {
    j.o.master_port = free_port(namespaces.at(j.nodes.front().name));
    ranks = launch::plan_ranks(j.nodes, a.cmd, j.o);
  } catch (const launch::LaunchError& e) {
    return e.what();
  }
  return resolve_programs(a, ranks, j);
}

Refusal make_run_folder(const LaunchArgs& a, Job& j) {
  j.out = fs::absolute(a.out ? fs::path(*a.out) : fs::path("runs") / ("launch-" + timestamp()));
  std::error_code ec;
  if (fs::exists(j.out, ec) && !fs::is_empty(j.out, ec))
    return fmt::format("--out {}: the folder exists and is not empty", j.out.string());
  fs::create_directories(j.out / "logs", ec);
  if (ec) return fmt::format("--out {}: {}", j.out.string(), ec.message());
  return std::nullopt;
}

// Where the links stand before the job: its counters are counted from here.
Refusal first_status(const Job& j, nlohmann::json& status0) {
  try {
    const auto r = api::call(lab::socket_path(j.found.state.lab), "GET", "/v1/status", {}, 10s);
    if (r.status != 200) throw std::runtime_error(r.body.dump());
    status0 = r.body;
  } catch (const std::exception& e) {
    return fmt::format("the controller of lab {} does not answer: {}", j.found.state.lab, e.what());
  }
  return std::nullopt;
}

// launch.json: what ran, and what each rank got on top of the launching environment.
void write_launch_record(const LaunchArgs& a, const Job& j) {
  nlohmann::json record = {{"lab", j.found.state.lab},
                           {"command", a.cmd},
                           {"shell", a.shell},
                           {"nodes", nlohmann::json::array()},
                           {"per_node", a.per_node},
                           {"master_addr", j.nodes.front().name},
                           {"master_port", j.o.master_port},
                           {"env", nlohmann::json::object()},
                           {"started_at", iso_now()},
                           {"cwd", fs::current_path().string()},
                           {"ranks", nlohmann::json::array()}};
  for (const auto& n : j.nodes)
    record["nodes"].push_back({{"name", n.name}, {"dc", n.dc}, {"address", n.address}, {"interface", n.ifname}});
  for (const auto& [k, v] : j.o.user_env) record["env"][k] = v;
  for (const auto& p : j.procs) {
    nlohmann::json env = nlohmann::json::object();
    for (const auto& [k, v] : p.rank.env) env[k] = v;
    record["ranks"].push_back({{"rank", p.rank.rank},
                               {"node", p.rank.node},
                               {"local_rank", p.rank.local_rank},
                               {"argv", p.rank.argv},
                               {"program", p.path},
                               {"env", env},
                               {"log", fmt::format("logs/{}.{}.log", p.rank.node, p.rank.local_rank)}});
  }
  write_text_file(j.out / "launch.json", record.dump(2) + "\n");
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // our own stdout closed early must not kill us before the ranks are stopped
}

// Starts every rank; after a rank that fails to start, the others are stopped (g_signal).
// Returns when the job started.
Clock::time_point start_ranks(Job& j, const std::map<std::string, std::unique_ptr<netlink::NodeEntry>>& entries) {
  UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const auto t0 = Clock::now();
  for (auto& p : j.procs) {
    build_env(p);
    p.log.open(j.out / "logs" / fmt::format("{}.{}.log", p.rank.node, p.rank.local_rank));
    try {
      start(p, *entries.at(p.rank.node), devnull.get());
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: launch: rank {} on {}: {}; stopping the others\n", p.rank.rank, p.rank.node,
                 e.what());
      g_signal = SIGTERM;
      break;
    }
  }
  devnull.reset();
  std::vector<std::string> names;
  for (const auto& n : j.nodes) names.push_back(n.name);
  fmt::print(stderr, "wanlab: launched {} rank(s) on {} ({}), master {}:{}; run folder {}\n", j.procs.size(),
             fmt::join(names, ","), j.found.state.lab, j.nodes.front().name, j.o.master_port, j.out.string());
  return t0;
}

// The links' counters while the job runs, counted from where they stood before it.
struct Sampler {
  const core::Topology& topo;
  std::filesystem::path socket;
  std::map<LinkKey, LinkCounters> base;
  Clock::time_point t0;
  std::vector<run::LinkSample> samples;
  bool sampling = true;  // false once the controller stopped answering
  std::string stopped;   // why it stopped

  Sampler(const core::Topology& t, std::filesystem::path s, std::map<LinkKey, LinkCounters> b)
      : topo(t), socket(std::move(s)), base(std::move(b)) {}

  void sample() {
    if (!sampling) return;
    try {
      const auto r = api::call(socket, "GET", "/v1/status", {}, 2s);
      if (r.status != 200) throw std::runtime_error(fmt::format("status {}", r.status));
      const double t = std::chrono::duration<double>(Clock::now() - t0).count();
      for (const auto& [key, c] : link_counters(topo, r.body)) {
        const auto b = base.count(key) ? base.at(key) : LinkCounters{};
        samples.push_back({t, key.first, key.second, c.bytes - std::min(c.bytes, b.bytes),
                           c.payload_bytes - std::min(c.payload_bytes, b.payload_bytes),
                           c.drops - std::min(c.drops, b.drops), c.queued_packets});
      }
    } catch (const std::exception& e) {
      sampling = false;
      stopped = e.what();
    }
  }
};

void signal_all(std::vector<Proc>& procs, int sig) {
  for (auto& p : procs)
    if (p.child.pid() > 0) p.child.signal_group(sig);
}

// Collects the ranks that exited; says whether any still runs, and in `open` whether any output is open.
bool reap(std::vector<Proc>& procs, Clock::time_point t0, bool& open) {
  bool running = false;
  open = false;
  for (auto& p : procs) {
    if (p.child.running() && !p.status) {
      if (const auto st = p.child.try_wait()) {
        p.status = st->shell_code();
        p.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
      } else {
        running = true;
      }
    }
    open |= p.out.valid();
  }
  return running;
}

// Copies the ranks' output to our stdout and their logs, waiting at most until the next sample.
void pump_output(std::vector<Proc>& procs, Clock::time_point next_sample) {
  std::vector<pollfd> fds;
  std::vector<Proc*> who;
  for (auto& p : procs)
    if (p.out) {
      fds.push_back({p.out.get(), POLLIN, 0});
      who.push_back(&p);
    }
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_sample - Clock::now());
  const int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long>(wait.count(), 0, 100)));
  if (n <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[16384];
    const auto got = ::read(fds[i].fd, buf, sizeof buf);
    if (got > 0) {
      emit(*who[i], buf, static_cast<std::size_t>(got));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      flush_partial(*who[i]);
      who[i]->out.reset();
    }
  }
}

// Runs the job to its end: output, samples, signals. Returns whether it was interrupted.
bool supervise(std::vector<Proc>& procs, Sampler& sampler) {
  bool interrupted = false;
  std::optional<Clock::time_point> term_sent, all_exited;
  auto next_sample = Clock::now() + kSampleEvery;
  for (;;) {
    if (g_signal != 0 && !interrupted) {
      interrupted = true;
      fmt::print(stderr, "wanlab: launch: signal {}: stopping every rank\n", static_cast<int>(g_signal));
      signal_all(procs, SIGTERM);
      term_sent = Clock::now();
    }
    if (term_sent && Clock::now() - *term_sent > kKillGrace) {
      signal_all(procs, SIGKILL);
      term_sent = Clock::now() + 1h;  // once
    }
    bool open = false;
    const bool running = reap(procs, sampler.t0, open);
    if (!running && !all_exited) {
      all_exited = Clock::now();
      // Whatever the ranks left behind in their groups (a daemonized child holding the pipe).
      signal_all(procs, SIGTERM);
    }
    if (!running && (!open || Clock::now() - *all_exited > 1s)) break;

    pump_output(procs, next_sample);
    if (Clock::now() >= next_sample) {
      sampler.sample();
      next_sample += kSampleEvery;
      if (next_sample < Clock::now()) next_sample = Clock::now() + kSampleEvery;
    }
  }
  for (auto& p : procs) {
    if (p.out) {
      flush_partial(p);
      p.out.reset();
    }
  }
  return interrupted;
}

// summary.json's ranks; `statuses` gets each rank's status for the job's worst.
nlohmann::json rank_results(const std::vector<Proc>& procs, std::vector<int>& statuses) {
  nlohmann::json rank_json = nlohmann::json::array();
  for (const auto& p : procs) {
    const bool started = p.child.pid() > 0;
    const int s = p.status.value_or(started ? 1 : 127);
    statuses.push_back(started ? s : 1);
    nlohmann::json r = {{"rank", p.rank.rank}, {"node", p.rank.node}, {"local_rank", p.rank.local_rank},
                        {"started", started}};
    if (p.status) {
      r["exit_status"] = *p.status;
      r["wall_time_s"] = p.wall_s;
    }
    rank_json.push_back(std::move(r));
  }
  return rank_json;
}

// summary.json's links, from the last sample of each and its peak over one interval; adds up wan_bytes.
nlohmann::json link_results(const core::Topology& topo, const std::vector<run::LinkSample>& samples,
                            std::uint64_t& wan_bytes) {
  nlohmann::json links = nlohmann::json::array();
  std::map<LinkKey, const run::LinkSample*> last;
  std::map<LinkKey, double> peak;
  std::map<LinkKey, const run::LinkSample*> prev;
  for (const auto& s : samples) {
    const auto key = std::make_pair(s.src, s.dst);
    if (auto it = prev.find(key); it != prev.end() && s.t_s > it->second->t_s)
      peak[key] = std::max(peak[key], static_cast<double>(s.bytes - it->second->bytes) * 8 / 1e6 /
                                           (s.t_s - it->second->t_s));
    prev[key] = &s;
    last[key] = &s;
  }
  for (const auto& [key, s] : last) {
    wan_bytes += s->bytes;
    links.push_back({{"src", topo.dcs[key.first].name},
                     {"dst", topo.dcs[key.second].name},
                     {"bytes", s->bytes},
                     {"payload_bytes", s->payload_bytes},
                     {"drops", s->drops},
                     {"mean_mbit_s", s->t_s > 0 ? static_cast<double>(s->bytes) * 8 / 1e6 / s->t_s : 0.0},
                     {"peak_mbit_s_100ms", peak[key]}});
  }
  return links;
}

nlohmann::json summarize(const Job& j, const Sampler& sampler, const run::BackendCounters& engine0, double wall,
                         bool interrupted) {
  std::vector<int> statuses;
  const auto rank_json = rank_results(j.procs, statuses);
  std::uint64_t wan_bytes = 0;
  const auto links = link_results(j.found.topology, sampler.samples, wan_bytes);
  const int worst = interrupted ? 130 : launch::worst_status(statuses);
  nlohmann::json summary = {{"lab", j.found.state.lab},
                            {"backend", j.found.state.backend},
                            {"ranks", rank_json},
                            {"world_size", j.procs.size()},
                            {"wall_time_s", wall},
                            {"exit_status", worst},
                            {"interrupted", interrupted},
                            {"wan_bytes", wan_bytes},
                            {"links", links},
                            {"samples", sampler.samples.size()},
                            {"sample_interval_s", std::chrono::duration<double>(kSampleEvery).count()}};
  if (!sampler.stopped.empty()) summary["sampling_stopped"] = sampler.stopped;
  if (sampler.sampling) {
    try {
      const auto r = api::call(sampler.socket, "GET", "/v1/status", {}, 5s);
      if (r.status == 200) {
        auto e = run::engine_json(engine0, backend_counters(r.body), wall);
        if (!e.is_null()) summary["engine"] = std::move(e);
      }
    } catch (const std::exception&) {
      // The controller went away at the very end; the summary keeps what was sampled.
    }
  }
  return summary;
}

// links.csv, summary.json and the run card; returns the exit status of launch.
int write_results(const LaunchArgs& a, const Job& j, const Sampler& sampler, const nlohmann::json& summary,
                  double wall) {
  const int worst = summary["exit_status"].get<int>();
  try {
    write_text_file(j.out / "links.csv", run::links_csv(j.found.topology, sampler.samples));
    write_text_file(j.out / "summary.json", summary.dump(2) + "\n");
    evidence::CardInputs card;
    card.command = "launch";
    card.topology = &j.found.topology;
    card.summary = summary;
    card.framework = "launched command";
    card.launched = a.cmd;
    write_run_card(j.out, card);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: launch: {}\n", e.what());
    return worst == 0 ? 1 : worst;
  }
  std::vector<std::string> per_link;
  for (const auto& l : summary["links"])
    per_link.push_back(fmt::format("{}->{} {:.1f} MB", l["src"].get<std::string>(), l["dst"].get<std::string>(),
                                   l["bytes"].get<std::uint64_t>() / 1e6));
  const bool interrupted = summary["interrupted"].get<bool>();
  fmt::print(stderr, "wanlab: launch: {} after {:.2f} s (exit status {}); WAN {}; {}\n",
             interrupted ? "interrupted" : worst == 0 ? "done" : "failed", wall, worst,
             per_link.empty() ? "no counters" : fmt::format("{}", fmt::join(per_link, ", ")), j.out.string());
  return worst;
}

}  // namespace

int cmd_launch(const LaunchArgs& a) {
  if (!check_privileges("launch")) return 1;
  Job j;
  if (auto no = plan_job(a, j)) return bad(*no);
  if (auto no = make_run_folder(a, j)) return bad(*no);

  std::map<std::string, std::unique_ptr<netlink::NodeEntry>> entries;
  for (const auto& n : j.nodes)
    entries.emplace(n.name, std::make_unique<netlink::NodeEntry>(lab::ns_node(j.found.state.lab, n.name)));
  nlohmann::json status0;
  if (auto no = first_status(j, status0)) return bad(*no);
  Sampler sampler(j.found.topology, lab::socket_path(j.found.state.lab), link_counters(j.found.topology, status0));
  const auto engine0 = backend_counters(status0);

  write_launch_record(a, j);
  install_signal_handlers();
  sampler.t0 = start_ranks(j, entries);
  sampler.sample();
  const bool interrupted = supervise(j.procs, sampler);
  const double wall = std::chrono::duration<double>(Clock::now() - sampler.t0).count();
  sampler.sample();
  return write_results(a, j, sampler, summarize(j, sampler, engine0, wall, interrupted), wall);
}

}  // namespace wanlab::cli
