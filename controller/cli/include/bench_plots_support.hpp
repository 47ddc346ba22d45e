#pragma once
// What the plots of a bench folder (bench_plots.cpp) and the links plot of a bench or a
// run (bench_plots_links.cpp) share: reading windows.csv, strings into gnuplot scripts,
// finding and running gnuplot. Internal to the command.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wanlab::cli::plot_support {

using LinkKey = std::pair<std::string, std::string>;  // src, dst DC names

/// Every string from the bench folder goes into the scripts through here (gnuplot_text.hpp).
std::string gp_string(const std::string& s);

/// windows.csv of a run, as {column -> value} rows; nullopt when the run has none.
std::optional<std::vector<std::map<std::string, std::string>>> read_windows_csv(const std::filesystem::path& file);

/// A cell as a finite number; nullopt when it is missing, empty or not one.
std::optional<double> to_double(const std::map<std::string, std::string>& row, const std::string& key);

/// The executable `exe` on PATH.
std::optional<std::string> find_in_path(const std::string& exe);

/// gnuplot SCRIPT in `dir`, its output in `log`; the exit status (127: could not start).
int run_gnuplot(const std::string& binary, const std::filesystem::path& dir, const std::string& script,
                const std::filesystem::path& log);

/// The last `lines` lines of a file, indented.
std::string tail_of(const std::filesystem::path& p, std::size_t lines);

/// A run folder as the links plot reads it: links.csv (every WAN link every 100 ms since
/// the start barrier) and windows.csv (the arbiter's windows, same origin) where it has one.
struct LinkSeries {
  std::vector<double> t, mbit, queue;
};
struct LinkRun {
  std::string name;
  std::map<LinkKey, LinkSeries> links;
  std::map<LinkKey, std::vector<std::pair<double, double>>> windows;  // merged: open at least one
  bool has_windows = false;
};
/// Throws std::runtime_error naming the file and line that cannot be read.
LinkRun read_link_run(const std::string& name, const std::filesystem::path& folder);

/// links.svg's script (its data files written into `plots`): one row per run, one panel per
/// directed WAN link. Empty when no run has a link sample.
std::string links_script(const std::filesystem::path& plots, const std::vector<LinkRun>& runs,
                         const std::string& title, const std::string& svg);

}  // namespace wanlab::cli::plot_support
