// The plots of a bench folder: data files and gnuplot scripts in OUT/plots/, drawn to SVG
// by gnuplot (fork/exec, no shell).
#include "bench_plots.hpp"
#include "bench_plots_support.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench_report.hpp"
#include "gnuplot_text.hpp"
#include "run_support.hpp"
#include "wanlab/common/child_process.hpp"
#include "wanlab/common/printable.hpp"
#include "wanlab/common/system_error.hpp"
#include "wanlab/common/unique_fd.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/topology.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"
#include "wanlab/common/ring.hpp"

namespace wanlab::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace plot_support;

namespace {

struct Category {
  const char* name;
  const char* color;
};
// Timeline bars: compute, then blocking communication, then sends (drawn thin, below).
constexpr Category kSpanKinds[] = {{"forward", "#4e79a7"}, {"backward", "#f28e2b"},  {"optimizer", "#59a14f"},
                                   {"prefill", "#b07aa1"}, {"recv_wait", "#bab0ac"}, {"allreduce", "#e15759"},
                                   {"send", "#76b7b2"}};
constexpr std::size_t kSend = 6;
// WAN transfers.
constexpr Category kTransferKinds[] = {{"activation", "#4e79a7"},
                                       {"gradient", "#f28e2b"},
                                       {"allreduce", "#e15759"},
                                       {"other", "#9c755f"},
                                       {"revoked", "#bab0ac"}};

template <std::size_t N>
std::size_t category_index(const Category (&cats)[N], const std::string& name) {
  for (std::size_t i = 0; i < N; ++i)
    if (name == cats[i].name) return i;
  return N;
}

struct Bar {
  double x0, x1, y0, y1;
};
// Bars of one panel, by category index.
using Bars = std::map<std::size_t, std::vector<Bar>>;

// One variant's run, as the plots need it.
struct Run {
  std::string name;
  fs::path folder;
  json summary;
  workload::Plan plan;
  int iteration = 0;                                    // the one drawn: the first after warm-up
  double t0 = std::numeric_limits<double>::infinity();  // its first span's start, s since the run's start
  double t1 = 0;                                        // its last span's end
  std::vector<json> events;                             // its "X" events
};

}  // namespace

// Every string from the bench folder goes into the scripts through here (gnuplot_text.hpp).
std::string plot_support::gp_string(const std::string& s) {
  return gnuplot_string(s);
}

namespace {

// A data file with one block (gnuplot `index`) per category that has bars; returns the
// plot clauses that draw them.
std::string write_bars(const fs::path& file, const Bars& bars, const Category* cats, const std::string& extra_style) {
  std::string data, clauses;
  int index = 0;
  for (const auto& [cat, list] : bars) {
    if (list.empty()) continue;
    data += fmt::format("# {}: x0 x1 y0 y1 (s, s, row, row)\n", cats[cat].name);
    for (const auto& b : list) data += fmt::format("{:.6f} {:.6f} {:.3f} {:.3f}\n", b.x0, b.x1, b.y0, b.y1);
    data += "\n\n";
    clauses += fmt::format(", \\\n     {} index {} using 1:3:1:2:3:4 with boxxyerror fc rgb '{}'{} notitle",
                           gp_string(file.filename().string()), index++, cats[cat].color, extra_style);
  }
  write_text_file(file, data);
  return clauses;
}

template <std::size_t N>
std::string key_entries(const Category (&cats)[N], const std::vector<std::size_t>& which) {
  std::string out;
  for (auto i : which)
    out += fmt::format("{}keyentry with boxes fc rgb '{}' title {}", out.empty() ? "" : ", ", cats[i].color,
                       gp_string(cats[i].name));
  return out;
}

}  // namespace

std::optional<std::string> plot_support::find_in_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');) {
    if (dir.empty()) continue;
    const auto candidate = fs::path(dir) / exe;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return std::nullopt;
}

// gnuplot SCRIPT in `dir`, its output in `log`; the exit status (126: could not enter `dir`,
// 127: could not start).
int plot_support::run_gnuplot(const std::string& binary, const fs::path& dir, const std::string& script, const fs::path& log) {
  // Either missing: the output or the input is this process's.
  const UniqueFd out(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  const UniqueFd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  SpawnOptions o;
  o.argv = {binary, script};
  o.cwd = dir.string();
  o.stdin_fd = null_in.get();
  o.stdout_fd = out.get();
  o.stderr_fd = out.get();
  try {
    return ChildProcess::spawn(o).wait().shell_code();
  } catch (const SystemError& e) {
    return e.call() == "chdir to" ? 126 : 127;
  }
}

std::string plot_support::tail_of(const fs::path& p, std::size_t lines) {
  std::ifstream f(p);
  std::vector<std::string> all;
  for (std::string l; std::getline(f, l);) all.push_back(l);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "    " + all[i] + "\n";
  return out;
}

namespace {

// A run folder's scenario, its topology found where the folder can be read: the lab's own
// topology.json in the folder (runs write it), else the path scenario.json names, else
// topologies/FILE under the current folder. A run folder from a container names the
// container's path (/wanlab/topologies/...), which the host does not have.
workload::Scenario load_run_scenario(const fs::path& folder) {
  const auto file = folder / "scenario.json";
  std::ifstream f(file);
  if (!f) throw std::runtime_error(fmt::format("cannot read {}", file.string()));
  json doc;
  try {
    doc = json::parse(f);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", file.string(), e.what()));
  }
  if (!doc.is_object() || !doc.contains("topology") || !doc["topology"].is_string())
    return workload::load_scenario(file);  // its own error
  const fs::path named = doc["topology"].get<std::string>();
  std::vector<fs::path> tried;
  for (const auto& candidate : {folder / "topology.json", named.is_absolute() ? named : folder / named,
                                fs::current_path() / "topologies" / named.filename()}) {
    std::error_code ec;
    tried.push_back(candidate);
    if (!fs::is_regular_file(candidate, ec)) continue;
    doc["topology"] = fs::absolute(candidate).lexically_normal().string();
    return workload::parse_scenario(doc, file.string(), folder);
  }
  std::vector<std::string> names;
  for (const auto& t : tried) names.push_back(t.string());
  throw std::runtime_error(fmt::format("topology file not found: {} (scenario.json's \"topology\"); looked at {}",
                                       named.string(), fmt::join(names, ", ")));
}

// Reads a variant's run folder: its plan (rebuilt from the run's scenario.json, whose
// topology path is absolute) and the spans of the first iteration after warm-up.
Run load_run(const fs::path& bench_dir, const json& v) {
  Run r;
  r.name = v.at("name").get<std::string>();
  r.folder = bench_dir / v.at("folder").get<std::string>();
  r.summary = v.value("summary", json::object());
  const auto scenario = load_run_scenario(r.folder);
  const auto topo = core::load_topology(scenario.topology_path);
  r.plan = workload::build_plan(scenario, topo);
  r.iteration = scenario.warmup < scenario.iterations ? scenario.warmup : 0;
  std::ifstream f(r.folder / "timeline.json");
  if (!f) throw std::runtime_error(fmt::format("cannot read {}", (r.folder / "timeline.json").string()));
  const auto timeline = json::parse(f);
  for (const auto& e : timeline.at("traceEvents")) {
    if (e.value("ph", "") != "X" || !e.contains("args")) continue;
    const auto& args = e.at("args");
    if (args.value("iteration", -1) != r.iteration || !args.contains("worker")) continue;
    const double ts = e.at("ts").get<double>() / 1e6;
    r.t0 = std::min(r.t0, ts);
    r.t1 = std::max(r.t1, ts + e.value("dur", 0.0) / 1e6);
    r.events.push_back(e);
  }
  if (r.events.empty())
    throw std::runtime_error(fmt::format("timeline.json has no spans of iteration {}", r.iteration));
  return r;
}

std::string mean_line(const Run& r) {
  const auto mean = bench::number(r.summary, "/iteration_time_s/mean");
  return mean ? fmt::format("{}: {:.3f} s per iteration (mean)", r.name, *mean) : r.name;
}

// --- timelines.svg ---------------------------------------------------------------------

struct Rows {
  std::vector<int> workers;  // worker ids shown, top to bottom
  std::string shown;         // what they are, for the title
};

Rows timeline_rows(const workload::Plan& plan) {
  Rows rows;
  const auto n = plan.workers.size();
  const auto pick = [&](auto keep) {
    rows.workers.clear();
    for (const auto& w : plan.workers)
      if (keep(w)) rows.workers.push_back(w.worker);
  };
  pick([](const auto&) { return true; });
  rows.shown = fmt::format("all {} GPUs", n);
  if (rows.workers.size() > 16) {
    pick([](const auto& w) { return w.tp_rank == 0; });
    rows.shown = fmt::format("TP rank 0 of each stage and DP replica ({} of {} GPUs)", rows.workers.size(), n);
  }
  if (rows.workers.size() > 48) {
    pick([](const auto& w) { return w.tp_rank == 0 && w.dp_rank == 0; });
    rows.shown = fmt::format("TP rank 0 of DP replica 0 of each stage ({} of {} GPUs)", rows.workers.size(), n);
  }
  return rows;
}

// The x range of each panel: one range for all when the variants' iterations are of
// similar length, else each its own (`own` set), so that a slow variant does not squash
// the others.
struct XRange {
  double lo = 0, hi = 0;
};
std::vector<XRange> x_ranges(std::vector<XRange> extents, bool& own, bool allow_own = true) {
  double shortest = std::numeric_limits<double>::infinity(), longest = 0;
  XRange all{0, 0};
  for (const auto& e : extents) {
    shortest = std::min(shortest, e.hi - e.lo);
    longest = std::max(longest, e.hi - e.lo);
    all.lo = std::min(all.lo, e.lo);
    all.hi = std::max(all.hi, e.hi);
  }
  own = allow_own && shortest > 0 && longest > 2.5 * shortest;
  for (auto& e : extents) {
    if (!own) e = all;
    e.hi = e.lo + std::max(1e-3, (e.hi - e.lo) * 1.01);
  }
  return extents;
}

template <std::size_t N>
std::vector<std::size_t> present(const Category (&)[N], const std::vector<Bars>& panels) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < N; ++i)
    for (const auto& bars : panels)
      if (bars.count(i) && !bars.at(i).empty() && std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
  if (out.empty()) out.push_back(0);  // a key entry keeps an empty plot valid
  return out;
}

std::string timelines_script(const fs::path& plots, const std::vector<Run>& runs, const std::string& scenario) {
  struct Panel {
    Bars bars;
    std::string ytics;
    std::size_t rows = 0;
  };
  std::vector<Panel> panels;
  std::vector<XRange> extents;
  for (const auto& r : runs) {
    Panel panel;
    const Rows rows = timeline_rows(r.plan);
    panel.rows = rows.workers.size();
    std::map<int, int> row_of;
    for (std::size_t i = 0; i < rows.workers.size(); ++i) {
      const auto& w = r.plan.workers[static_cast<std::size_t>(rows.workers[i])];
      row_of[w.worker] = static_cast<int>(i);
      panel.ytics += fmt::format("{}{} {}", i ? ", " : "",
                                 gp_string(fmt::format("s{}/dp{}/tp{} {} gpu{}", w.stage, w.dp_rank, w.tp_rank,
                                                       core::node_name(r.plan.topology.dcs[w.dc], w.node), w.gpu)),
                                 i);
    }
    for (const auto& e : r.events) {
      const auto it = row_of.find(e.at("args").at("worker").get<int>());
      if (it == row_of.end()) continue;
      const auto cat = category_index(kSpanKinds, e.value("cat", ""));
      if (cat >= std::size(kSpanKinds)) continue;
      const double x0 = e.at("ts").get<double>() / 1e6 - r.t0;
      const double x1 = x0 + e.value("dur", 0.0) / 1e6;
      const double y = it->second;
      panel.bars[cat].push_back(cat == kSend ? Bar{x0, x1, y + 0.22, y + 0.40} : Bar{x0, x1, y - 0.38, y + 0.16});
    }
    extents.push_back({0, r.t1 - r.t0});
    panels.push_back(std::move(panel));
  }
  bool own = false;
  // One time axis for every panel: variants compare by eye (a slow one shows as such).
  const auto ranges = x_ranges(extents, own, false);
  std::vector<Bars> all_bars;
  std::size_t max_rows = 1;
  for (const auto& p : panels) {
    all_bars.push_back(p.bars);
    max_rows = std::max(max_rows, p.rows);
  }
  const auto keys = key_entries(kSpanKinds, present(kSpanKinds, all_bars));

  const int panel_h = 80 + 16 * static_cast<int>(max_rows);
  std::string gp = fmt::format(
      "# Per-GPU timelines of one iteration, one panel per variant (wanlab bench). Redraw: gnuplot timelines.gp\n"
      "set terminal svg size 1400,{} dynamic noenhanced font 'Helvetica,11' background rgb 'white'\n"
      "set output 'timelines.svg'\n"
      "set style fill solid 1.0 noborder\n"
      "set multiplot layout {},1 title {}\n"
      "set xlabel \"seconds since the iteration's first op\"\n"
      "set key outside right top vertical\n"
      "set grid xtics\n",
      panel_h * static_cast<int>(runs.size()) + 70, runs.size(),
      gp_string(fmt::format("{}: per-GPU timeline of iteration {} (the first after warm-up), every panel on one time "
                            "axis\n{}; bars: what each GPU does (key); thin bars below a row: sends in flight, which "
                            "overlap compute",
                            scenario, runs.front().iteration, timeline_rows(runs.front().plan).shown)));
  for (std::size_t v = 0; v < runs.size(); ++v) {
    const auto& r = runs[v];
    const auto clauses =
        write_bars(plots / fmt::format("timeline-{}.dat", gnuplot_file_part(r.name)), panels[v].bars, kSpanKinds, "");
    gp += fmt::format(
        "set title {}\nset xrange [{:.6f}:{:.6f}]\nset ytics ({}) font ',9'\nset yrange [{:.1f}:-0.6]\n"
        "plot {}{}\n",
        gp_string(mean_line(r)), ranges[v].lo, ranges[v].hi, panels[v].ytics, static_cast<double>(panels[v].rows) - 0.4,
        keys, clauses);
  }
  gp += "unset multiplot\n";
  return gp;
}

// --- windows.svg -----------------------------------------------------------------------

}  // namespace

// windows.csv of a run, as {column -> value} rows; nullopt when the run has none.
std::optional<std::vector<std::map<std::string, std::string>>> plot_support::read_windows_csv(const fs::path& file) {
  std::ifstream f(file);
  if (!f) return std::nullopt;
  const auto split = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
    if (!line.empty() && line.back() == ',') out.emplace_back();
    return out;
  };
  std::string line;
  if (!std::getline(f, line)) return std::vector<std::map<std::string, std::string>>{};
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const auto header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto cells = split(line);
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(std::move(row));
  }
  return rows;
}


std::optional<double> plot_support::to_double(const std::map<std::string, std::string>& row, const std::string& key) {
  const auto it = row.find(key);
  if (it == row.end() || it->second.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used != it->second.size() || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

struct Transfers {
  std::map<LinkKey, Bars> links;
  bool windows = false;  // from windows.csv (else from the timeline)
};

Transfers wan_transfers(const Run& r) {
  Transfers t;
  const auto bar = [](double x0, double x1, int row) { return Bar{x0, x1, row - 0.38, row + 0.38}; };
  if (auto rows = read_windows_csv(r.folder / "windows.csv")) {
    t.windows = true;
    for (const auto& row : *rows) {
      const auto it = to_double(row, "iteration");
      const auto granted = to_double(row, "granted_s");
      const auto closed = to_double(row, "closed_s");
      const auto pipeline = to_double(row, "pipeline");
      if (!it || static_cast<int>(*it) != r.iteration || !granted || !closed || !pipeline) continue;
      const auto kind_it = row.find("kind");
      auto cat = category_index(kTransferKinds, kind_it == row.end() ? "" : kind_it->second);
      if (cat >= std::size(kTransferKinds)) cat = category_index(kTransferKinds, "other");
      if (const auto revoked = to_double(row, "revoked"); revoked && *revoked != 0)
        cat = category_index(kTransferKinds, "revoked");  // taken away for lack of progress
      t.links[{row.at("src"), row.at("dst")}][cat].push_back(
          bar(*granted - r.t0, *closed - r.t0, static_cast<int>(*pipeline)));
    }
    return t;
  }
  const auto& plan = r.plan;
  const auto& par = plan.scenario.parallelism;
  const auto dc_name = [&](int worker) {
    return plan.topology.dcs[plan.workers.at(static_cast<std::size_t>(worker)).dc].name;
  };
  for (const auto& e : r.events) {
    const auto& args = e.at("args");
    const int worker = args.at("worker").get<int>();
    const auto& w = plan.workers.at(static_cast<std::size_t>(worker));
    const double x0 = e.at("ts").get<double>() / 1e6 - r.t0;
    const double x1 = x0 + e.value("dur", 0.0) / 1e6;
    const auto cat = e.value("cat", "");
    if (cat == "send" && args.contains("peer")) {
      const int peer = args.at("peer").get<int>();
      if (peer < 0 || static_cast<std::size_t>(peer) >= plan.workers.size()) continue;
      if (plan.workers[static_cast<std::size_t>(peer)].dc == w.dc) continue;
      const auto kind = plan.workers[static_cast<std::size_t>(peer)].stage > w.stage ? "activation" : "gradient";
      t.links[{dc_name(worker), dc_name(peer)}][category_index(kTransferKinds, kind)].push_back(bar(x0, x1, w.dp_rank));
    } else if (cat == "allreduce" && par.dp > 1) {
      // The ring runs in replica order: this replica sends to the next one.
      const int next = workload::worker_id(
          par, w.stage, static_cast<int>(program::ring_next(static_cast<std::size_t>(w.dp_rank), static_cast<std::size_t>(par.dp))),
          w.tp_rank);
      if (plan.workers.at(static_cast<std::size_t>(next)).dc == w.dc) continue;
      t.links[{dc_name(worker), dc_name(next)}][category_index(kTransferKinds, "allreduce")].push_back(
          bar(x0, x1, w.dp_rank));
    }
  }
  return t;
}

// Empty string when no variant put anything on the WAN.
std::string windows_script(const fs::path& plots, const std::vector<Run>& runs, const std::string& scenario) {
  std::vector<Transfers> transfers;
  for (const auto& r : runs) transfers.push_back(wan_transfers(r));
  // Links with transfers in any variant, in the topology's order.
  std::vector<LinkKey> links;
  const auto& topo = runs.front().plan.topology;
  for (const auto& l : topo.links) {
    const LinkKey key{topo.dcs[l.src].name, topo.dcs[l.dst].name};
    for (const auto& t : transfers)
      if (t.links.count(key) && std::find(links.begin(), links.end(), key) == links.end()) links.push_back(key);
  }
  for (const auto& t : transfers)  // links the topology does not name (should not happen)
    for (const auto& [key, bars] : t.links)
      if (std::find(links.begin(), links.end(), key) == links.end()) links.push_back(key);
  if (links.empty()) return {};

  // Per variant: the iteration and its transfers (windows may open before its first op).
  std::vector<XRange> extents;
  std::vector<Bars> all_bars;
  int pipelines = runs.front().plan.scenario.parallelism.dp;
  for (std::size_t v = 0; v < runs.size(); ++v) {
    XRange e{0, runs[v].t1 - runs[v].t0};
    for (const auto& [key, bars] : transfers[v].links) {
      all_bars.push_back(bars);
      for (const auto& [cat, list] : bars)
        for (const auto& b : list) {
          e.lo = std::min(e.lo, b.x0);
          e.hi = std::max(e.hi, b.x1);
          pipelines = std::max(pipelines, static_cast<int>(std::lround(b.y1)));
        }
    }
    extents.push_back(e);
  }
  bool own = false;
  const auto ranges = x_ranges(extents, own);
  const auto keys = key_entries(kTransferKinds, present(kTransferKinds, all_bars));
  std::string ytics;
  for (int p = 0; p < pipelines; ++p) ytics += fmt::format("{}\"p{}\" {}", p ? ", " : "", p, p);

  const int panel_h = 110 + 18 * pipelines;
  const int panel_w = links.size() == 1 ? 1200 : 700;
  std::string gp = fmt::format(
      "# WAN transfers per directed link and variant (wanlab bench). Redraw: gnuplot windows.gp\n"
      "set terminal svg size {},{} dynamic noenhanced font 'Helvetica,11' background rgb 'white'\n"
      "set output 'windows.svg'\n"
      "set style fill transparent solid 0.6 noborder\n"
      "set multiplot layout {},{} title {}\n"
      "set xlabel \"seconds since the iteration's first op\"\n"
      "set ylabel 'pipeline (DP replica)'\n"
      "set ytics ({}) font ',9'\n"
      "set yrange [{:.1f}:-0.6]\n"
      "set key outside bottom center horizontal\n"
      "set grid xtics\n",
      panel_w * static_cast<int>(links.size()), panel_h * static_cast<int>(runs.size()) + 80, runs.size(), links.size(),
      gp_string(fmt::format(
          "{}: WAN transfers of iteration {} (the first after warm-up) per directed link{}\nbars: the arbiter's "
          "windows (granted..closed) where the policy has them, else the send spans that cross the WAN and the "
          "all-reduces whose ring step crosses it\nbars are 60 % opaque: a darker shade is two or more bars of one "
          "pipeline overlapping in time (micro-batches in flight together); grey: a window revoked for lack of "
          "progress",
          scenario, runs.front().iteration, own ? "; each variant on its own time scale" : "")),
      ytics, pipelines - 0.4);
  for (std::size_t v = 0; v < runs.size(); ++v) {
    for (const auto& key : links) {
      const auto it = transfers[v].links.find(key);
      const Bars bars = it == transfers[v].links.end() ? Bars{} : it->second;
      const auto data = fmt::format("windows-{}-{}-{}.dat", gnuplot_file_part(runs[v].name),
                                    gnuplot_file_part(key.first), gnuplot_file_part(key.second));
      auto clauses = write_bars(plots / data, bars, kTransferKinds, "");
      // A panel with no transfers: gnuplot 5.4 fails an assertion (uses_axis[SECOND_X_AXIS]) on
      // a plot of key entries only, so it gets a curve outside the y range.
      if (clauses.empty()) clauses = ", -10 notitle with lines lc rgb 'white'";
      gp += fmt::format("set title {}\nset xrange [{:.6f}:{:.6f}]\nplot {}{}\n",
                        gp_string(fmt::format("{}: {} -> {} ({})", runs[v].name, key.first, key.second,
                                              bars.empty()           ? "no transfers"
                                              : transfers[v].windows ? "arbiter windows"
                                                                     : "WAN spans")),
                        ranges[v].lo, ranges[v].hi, keys, clauses);
    }
  }
  gp += "unset multiplot\n";
  return gp;
}


}  // namespace

bool make_bench_plots(const fs::path& bench_dir) {
  json bench;
  try {
    std::ifstream f(bench_dir / "bench.json");
    if (!f) throw std::runtime_error("no such file");
    bench = json::parse(f);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: plots: cannot read {}: {}\n", (bench_dir / "bench.json").string(), e.what());
    return false;
  }
  std::vector<Run> runs;
  for (const auto& v : bench.value("variants", json::array())) {
    try {
      runs.push_back(load_run(bench_dir, v));
    } catch (const core::ConfigError& e) {
      fmt::print(stderr, "plots: variant {} left out: its plan cannot be rebuilt: {}\n",
                 printable(v.value("name", "?"), 80), e.what());
    } catch (const std::exception& e) {
      fmt::print(stderr, "plots: variant {} left out: {}\n", printable(v.value("name", "?"), 80), e.what());
    }
  }
  if (runs.empty()) {
    fmt::print(stderr, "plots: no variant to plot in {}\n", bench_dir.string());
    return false;
  }
  const auto plots = bench_dir / "plots";
  const auto scenario = bench.value("scenario", std::string{"?"});
  std::vector<std::string> scripts;
  try {
    fs::create_directories(plots);
    write_text_file(plots / "timelines.gp", timelines_script(plots, runs, scenario));
    scripts.push_back("timelines");
    if (const auto gp = windows_script(plots, runs, scenario); !gp.empty()) {
      write_text_file(plots / "windows.gp", gp);
      scripts.push_back("windows");
    } else {
      fmt::print("plots: no variant put anything on the WAN: no windows.svg\n");
    }
    std::vector<LinkRun> link_runs;
    for (const auto& r : runs) {
      try {
        link_runs.push_back(read_link_run(r.name, r.folder));
      } catch (const std::exception& e) {
        fmt::print(stderr, "plots: links.svg: variant {} left out: {}\n", printable(r.name, 80), e.what());
      }
    }
    if (!link_runs.empty())
      if (const auto gp = links_script(plots, link_runs, fmt::format("{}: WAN links, one row per variant", scenario),
                                       "links.svg");
          !gp.empty()) {
        write_text_file(plots / "links.gp", gp);
        scripts.push_back("links");
      }
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: plots: {}\n", e.what());
    return false;
  }
  const auto gnuplot = find_in_path("gnuplot");
  if (!gnuplot) {
    fmt::print(
        "plots: gnuplot is not installed (Debian: apt-get install gnuplot-nox); data and scripts are in {}/ "
        "(gnuplot timelines.gp there draws them)\n",
        plots.string());
    return true;
  }
  bool ok = true;
  for (const auto& name : scripts) {
    const auto log = plots / (name + ".log");
    const int rc = run_gnuplot(*gnuplot, plots, name + ".gp", log);
    if (rc != 0 || !fs::exists(plots / (name + ".svg"))) {
      fmt::print(stderr, "wanlab: plots: gnuplot {}.gp failed (status {}); its output ({}):\n{}", name, rc,
                 log.string(), tail_of(log, 8));
      ok = false;
      continue;
    }
    std::error_code ec;
    if (fs::file_size(log, ec) == 0) fs::remove(log, ec);
    fmt::print("plots: {}\n", (plots / (name + ".svg")).string());
  }
  return ok;
}

}  // namespace wanlab::cli
