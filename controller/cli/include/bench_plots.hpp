#pragma once
// The plots of a bench folder (`wanlab bench`, or `wanlab bench --plots-only DIR` on an
// existing one), drawn with gnuplot from OUT/bench.json and the variants' run folders:
//
//   plots/timelines.svg  per-GPU timelines of one steady-state iteration (the first after
//                        warm-up), one panel per variant: compute, send, recv_wait and
//                        all-reduce bars; with more than 16 GPUs only TP rank 0 of each
//                        stage and replica;
//   plots/windows.svg    per directed WAN link and variant, a Gantt chart of the WAN
//                        transfers of that iteration, one row per pipeline (DP replica):
//                        the arbiter's windows (windows.csv: granted_s..closed_s, colored by
//                        kind, revoked ones grey) where the run has them, else the send spans
//                        that cross the WAN (timeline.json) and the all-reduces whose ring
//                        step crosses it.
//   plots/links.svg      throughput sent and queue depth per directed WAN link over the whole
//                        run (links.csv, 100 ms samples), one row per variant, every panel
//                        on one time axis; the arbiter's windows (windows.csv) shaded
//                        behind where the policy has them.
//
// Every panel of timelines.svg and links.svg shares one time axis, so that variants
// compare by eye. The data files (*.dat) and gnuplot scripts (*.gp) stay in plots/, so `gnuplot
// timelines.gp` there redraws a plot.
#include <filesystem>

namespace wanlab::cli {

/// Writes OUT/plots/ and runs gnuplot (fork/exec, no shell) on its scripts. Prints one line
/// per plot made, one line when gnuplot is missing (data and scripts are kept), and the
/// variants left out with the reason. Returns false when the bench folder is unreadable
/// or a script could not be written or failed.
bool make_bench_plots(const std::filesystem::path& bench_dir);

/// RUN/plots/links.svg of one run folder (`wanlab run`): links.csv and, where the policy
/// has them, windows.csv. Same conventions as make_bench_plots.
bool make_run_links_plot(const std::filesystem::path& run_dir);

}  // namespace wanlab::cli
