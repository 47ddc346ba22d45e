// links.svg: throughput sent and queue depth per directed WAN link over a run (links.csv),
// the arbiter's windows shaded behind (windows.csv); of every variant of a bench folder
// (make_bench_plots) or of one run folder (make_run_links_plot).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_plots.hpp"
#include "bench_plots_support.hpp"
#include "gnuplot_text.hpp"
#include "run_support.hpp"

namespace wanlab::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace plot_support;

namespace {

constexpr const char* kThroughputColor = "#4e79a7";
constexpr const char* kQueueColor = "#e15759";
constexpr const char* kWindowColor = "#59a14f";

std::optional<std::string> gnuplot_binary() { return find_in_path("gnuplot"); }

// Draws `name`.gp in `plots`; prints what it made or why not.
bool draw(const fs::path& plots, const std::string& name) {
  const auto gnuplot = gnuplot_binary();
  if (!gnuplot) return true;
  const auto log = plots / (name + ".log");
  const int rc = run_gnuplot(*gnuplot, plots, name + ".gp", log);
  if (rc != 0 || !fs::exists(plots / (name + ".svg"))) {
    fmt::print(stderr, "wanlab: plots: gnuplot {}.gp failed (status {}); its output ({}):\n{}", name, rc, log.string(),
               tail_of(log, 8));
    return false;
  }
  std::error_code ec;
  if (fs::file_size(log, ec) == 0) fs::remove(log, ec);
  fmt::print("plots: {}\n", (plots / (name + ".svg")).string());
  return true;
}

}  // namespace

LinkRun plot_support::read_link_run(const std::string& name, const fs::path& folder) {
  LinkRun r;
  r.name = name;
  std::ifstream f(folder / "links.csv");
  if (!f) throw std::runtime_error(fmt::format("cannot read {}", (folder / "links.csv").string()));
  std::string line;
  std::getline(f, line);
  if (line.rfind("t_s,src,dst,", 0) != 0)
    throw std::runtime_error(fmt::format("{}: the first line is not links.csv's header", (folder / "links.csv").string()));
  std::size_t line_no = 1;
  while (std::getline(f, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> c;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) c.push_back(x);
    std::map<std::string, std::string> row;
    static const char* cols[] = {"t_s", "src", "dst", "bytes", "payload_bytes", "mbit_s", "drops", "queued_packets"};
    for (std::size_t i = 0; i < std::size(cols) && i < c.size(); ++i) row[cols[i]] = c[i];
    const auto t = to_double(row, "t_s"), mbit = to_double(row, "mbit_s"), q = to_double(row, "queued_packets");
    if (!t || !mbit || !q)
      throw std::runtime_error(fmt::format("{} line {}: expected numbers in t_s, mbit_s and queued_packets",
                                           (folder / "links.csv").string(), line_no));
    auto& series = r.links[{row["src"], row["dst"]}];
    series.t.push_back(*t);
    series.mbit.push_back(*mbit);
    series.queue.push_back(*q);
  }
  if (auto rows = read_windows_csv(folder / "windows.csv")) {
    r.has_windows = true;
    std::map<LinkKey, std::vector<std::pair<double, double>>> spans;
    for (const auto& row : *rows) {
      const auto g = to_double(row, "granted_s"), c = to_double(row, "closed_s");
      if (!g || !c || !row.count("src") || !row.count("dst")) continue;
      spans[{row.at("src"), row.at("dst")}].emplace_back(*g, std::max(*g, *c));
    }
    for (auto& [key, list] : spans) {
      std::sort(list.begin(), list.end());
      auto& merged = r.windows[key];
      for (const auto& sp : list) {
        if (!merged.empty() && sp.first <= merged.back().second)
          merged.back().second = std::max(merged.back().second, sp.second);
        else
          merged.push_back(sp);
      }
    }
  }
  return r;
}

std::string plot_support::links_script(const fs::path& plots, const std::vector<LinkRun>& runs, const std::string& title,
                                       const std::string& svg) {
  // The directed links that carried anything in any run, else every link sampled.
  std::vector<LinkKey> links;
  for (int pass = 0; pass < 2 && links.empty(); ++pass)
    for (const auto& r : runs)
      for (const auto& [key, s] : r.links) {
        const bool busy = std::any_of(s.mbit.begin(), s.mbit.end(), [](double v) { return v > 0; });
        if ((busy || pass == 1) && std::find(links.begin(), links.end(), key) == links.end()) links.push_back(key);
      }
  if (links.empty()) return {};
  double t_max = 1;
  for (const auto& r : runs)
    for (const auto& [key, s] : r.links)
      if (!s.t.empty()) t_max = std::max(t_max, s.t.back());
  const bool any_windows = std::any_of(runs.begin(), runs.end(), [](const LinkRun& r) { return r.has_windows; });
  std::string keys = fmt::format("keyentry with lines lw 2 lc rgb '{}' title 'throughput sent (Mbit/s, left axis)', "
                                 "keyentry with lines lw 1 lc rgb '{}' title 'queue (packets, right axis)'",
                                 kThroughputColor, kQueueColor);
  if (any_windows)
    keys += fmt::format(", keyentry with boxes fs transparent solid 0.18 fc rgb '{}' title "
                        "'shaded: an arbiter window open on the link (windows.csv)'",
                        kWindowColor);
  const int panel_h = 240, panel_w = links.size() == 1 ? 1200 : 640;
  std::string gp = fmt::format(
      "# Throughput and queue per directed WAN link over the run (wanlab). Redraw: gnuplot {}.gp\n"
      "set terminal svg size {},{} dynamic noenhanced font 'Helvetica,11' background rgb 'white'\n"
      "set output {}\n"
      "set multiplot layout {},{} title {}\n"
      "set xlabel 'seconds since the start barrier'\n"
      "set ylabel 'Mbit/s'\nset y2label 'packets queued'\n"
      "set ytics nomirror\nset y2tics\n"
      "set key outside bottom center horizontal\n"
      "set grid xtics ytics\n"
      "set xrange [0:{:.3f}]\n",
      fs::path(svg).stem().string(), panel_w * static_cast<int>(links.size()),
      panel_h * static_cast<int>(runs.size()) + 90, gp_string(svg), runs.size(), links.size(),
      gp_string(fmt::format("{}\nper directed WAN link, sampled every 100 ms (links.csv); every panel on one time "
                            "axis{}",
                            title, any_windows ? "; shaded: the arbiter's windows" : "")),
      t_max * 1.01);
  for (const auto& r : runs) {
    for (const auto& key : links) {
      const auto it = r.links.find(key);
      const auto data = fmt::format("links-{}-{}-{}.dat", gnuplot_file_part(r.name), gnuplot_file_part(key.first),
                                    gnuplot_file_part(key.second));
      std::string text = "# t_s mbit_s queued_packets\n";
      double y_max = 1, q_max = 1;
      if (it != r.links.end())
        for (std::size_t i = 0; i < it->second.t.size(); ++i) {
          text += fmt::format("{:.3f} {:.3f} {:.0f}\n", it->second.t[i], it->second.mbit[i], it->second.queue[i]);
          y_max = std::max(y_max, it->second.mbit[i]);
          q_max = std::max(q_max, it->second.queue[i]);
        }
      write_text_file(plots / data, text);
      std::string clauses;
      if (const auto w = r.windows.find(key); w != r.windows.end() && !w->second.empty()) {
        const auto wdata = fmt::format("linkwindows-{}-{}-{}.dat", gnuplot_file_part(r.name),
                                       gnuplot_file_part(key.first), gnuplot_file_part(key.second));
        std::string wt = "# x0 x1 (s): at least one window open\n";
        for (const auto& [a, b] : w->second) wt += fmt::format("{:.6f} {:.6f}\n", a, b);
        write_text_file(plots / wdata, wt);
        clauses += fmt::format("{} using 1:(0):1:2:(0):({:.3f}) with boxxyerror fs transparent solid 0.18 noborder "
                               "fc rgb '{}' notitle, \\\n     ",
                               gp_string(wdata), y_max * 1.08, kWindowColor);
      }
      clauses += fmt::format("{} using 1:2 with lines lw 2 lc rgb '{}' notitle, \\\n     {} using 1:3 axes x1y2 "
                             "with lines lw 1 lc rgb '{}' notitle",
                             gp_string(data), kThroughputColor, gp_string(data), kQueueColor);
      gp += fmt::format("set title {}\nset yrange [0:{:.3f}]\nset y2range [0:{:.3f}]\nplot {}, \\\n     {}\n",
                        gp_string(fmt::format("{}: {} -> {}{}", r.name, key.first, key.second,
                                              it == r.links.end() ? " (not sampled)" : "")),
                        y_max * 1.08, q_max * 1.08, keys, clauses);
    }
  }
  gp += "unset multiplot\n";
  return gp;
}


bool make_run_links_plot(const std::filesystem::path& run_dir) {
  LinkRun run;
  std::string title;
  try {
    std::string name = run_dir.filename().string();
    if (std::ifstream f(run_dir / "summary.json"); f) {
      const auto summary = json::parse(f, nullptr, false);
      if (summary.is_object()) {
        name = summary.value("run", name);
        title = fmt::format("run {} ({} policy, {} backend)", name, summary.value("policy", "?"),
                            summary.value("backend", "?"));
      }
    }
    if (title.empty()) title = "run " + name;
    run = read_link_run(name, run_dir);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: plots: {}\n", e.what());
    return false;
  }
  const auto plots = run_dir / "plots";
  try {
    fs::create_directories(plots);
    const auto gp = links_script(plots, {run}, title, "links.svg");
    if (gp.empty()) {
      fmt::print("plots: links.csv of {} has no samples: no links.svg\n", run_dir.string());
      return true;
    }
    write_text_file(plots / "links.gp", gp);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: plots: {}\n", e.what());
    return false;
  }
  if (!gnuplot_binary()) {
    fmt::print("plots: gnuplot is not installed (Debian: apt-get install gnuplot-nox); data and script are in {}/ "
               "(gnuplot links.gp there draws it)\n",
               plots.string());
    return true;
  }
  return draw(plots, "links");
}

}  // namespace wanlab::cli
