// bench.md: the markdown report of bench.json (bench_report.hpp, markdown).
#include <string>

#include <fmt/format.h>

#include "bench_report.hpp"
#include "wanlab/run/results.hpp"

namespace wanlab::cli::bench {

using nlohmann::json;

namespace {

// The value at a JSON pointer of `s`, or null.
json at_pointer(const json& s, const char* pointer) {
  const json::json_pointer p(pointer);
  return s.contains(p) ? s.at(p) : json();
}

// The main table's rows, one per variant; says whether the baseline ran.
bool variant_rows(const json& bench, const json& degraded, std::string& md) {
  const auto baseline = bench.value("baseline", std::string{});
  bool baseline_ran = false;
  for (const auto& v : bench.value("variants", json::array())) {
    const auto name = v.value("name", std::string{"?"});
    bool is_degraded = false;
    for (const auto& d : degraded) is_degraded |= d.at("variant") == name;
    baseline_ran |= name == baseline;
    const auto& s = v.contains("summary") ? v.at("summary") : json::object();
    const auto at = [&](const char* pointer) { return at_pointer(s, pointer); };
    const auto speedup = v.contains("ratios") ? v.at("ratios").value("iteration_time_speedup", json()) : json();
    md += fmt::format("| {}{}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name,
                      name == baseline ? " (baseline)" : "", is_degraded ? " (degraded)" : "",
                      v.value("policy", std::string{"?"}),
                      v.value("connections", 0), v.value("placement", std::string{"?"}),
                      fixed(at("/iteration_time_s/mean"), "{:.3f}"), fixed(at("/iteration_time_s/p99"), "{:.3f}"),
                      speedup.is_number() ? fmt::format("{:.2f}x", speedup.get<double>()) : "n/a",
                      fixed(at("/gpu_utilization/mean"), "{:.1f}", 100), fixed(at("/bubble_fraction"), "{:.1f}", 100),
                      fmt::format("{:.1f}", 100 * wan_utilization(s)));
  }
  return baseline_ran;
}

// The runs whose emulation was degraded, and why.
void degraded_section(const json& degraded, std::string& md) {
  md += fmt::format(
      "\n**Emulation degraded** in {} run{}: the userspace engine fell behind (more than {:g} % of packets released "
      "over 1 ms late, or more than {:g} % of received frames lost in its RX rings), so those timings are the busy "
      "host's as much as the emulated WAN's:\n\n",
      degraded.size(), degraded.size() == 1 ? "" : "s", 100 * run::kDegradedLateOver1msFraction,
      100 * run::kDegradedRingDropFraction);
  for (const auto& d : degraded) {
    std::string why;
    for (const auto& r : d.at("reasons")) why += (why.empty() ? "" : "; ") + r.get<std::string>();
    md += fmt::format("- `{}`: {}\n", d.at("folder").get<std::string>(), why);
  }
}

// Kilo-units without an exponent: three significant digits from 1 k up, to the unit below
// (a lab's 8-port fabric draws watts to tens of watts, 0.040 kW; a paper-scale one hundreds
// of kilowatts).
std::string kilo(double x) {
  const double k = x / 1e3;
  const int decimals = k >= 100 ? 0 : k >= 10 ? 1 : k >= 1 ? 2 : 3;
  return fmt::format("{:.{}f}", k, decimals);
}

// The rails of the variants' DCs (summary.json "rails"): what switching
// circuits cost the run, and the rails' network power and cost as OCS against packet switches.
void rails_section(const json& bench, std::string& md) {
  md += "\nRails (DCs with a rails fabric; power and cost of the rail network beyond the GPUs' NICs, docs/rails.md):\n\n";
  md += "| variant | DC | fabric | policy | reconfigurations per iteration | time switching (% of run) | held for circuits | "
        "power packet / OCS (kW) | power ratio | cost packet / OCS (k$) | cost ratio |\n";
  md += "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& v : bench.value("variants", json::array())) {
    const auto rails = at_pointer(v.value("summary", json::object()), "/rails");
    if (!rails.is_array()) continue;
    for (const auto& r : rails) {
      if (!r.is_object()) continue;
      const auto object = [](const json& j, const char* key) {
        return j.contains(key) && j.at(key).is_object() ? j.at(key) : json::object();
      };
      const json b = object(r, "bill"), packet = object(b, "packet"), ocs = object(b, "ocs");
      // The simulator holds transfers, the lab's rail switch frames.
      const auto held = r.contains("held_frames") ? fmt::format("{} frames", r.value("held_frames", 0))
                                                  : fmt::format("{} transfers", r.value("held_transfers", 0));
      md += fmt::format("| {} | {} | {} | {} | {:.1f} | {:.2f} | {} | {} / {} | {:.1f}x | {} / {} | {:.1f}x |\n",
                        v.value("name", std::string{"?"}), r.value("dc", std::string{"?"}),
                        r.value("fabric", std::string{"?"}), r.value("policy", std::string{"?"}),
                        r.value("reconfigurations_per_iteration", 0.0), 100 * r.value("reconfiguring_fraction", 0.0),
                        held, kilo(packet.value("power_w", 0.0)), kilo(ocs.value("power_w", 0.0)),
                        b.value("power_ratio", 0.0), kilo(packet.value("cost_usd", 0.0)),
                        kilo(ocs.value("cost_usd", 0.0)), b.value("cost_ratio", 0.0));
    }
  }
}

// Repeated runs: statistics over the rounds, and the speedups paired by round.
void repeat_section(const json& bench, int repeats, std::string& md) {
  md += fmt::format(
      "\nRepeated runs: {} rounds, each running every variant once, in the order above in odd rounds and "
      "in reverse in even ones (so a steady drift of the machine's speed cancels out of paired figures); the table above is "
      "each variant's first run. Mean, standard deviation and 95 % confidence interval (Student t) of the runs' "
      "mean iteration times; speedups from runs paired by round (mean of the per-round ratios, 95 % CI).\n\n",
      repeats);
  md += "| variant | runs | iteration time mean (s) | sd (s) | 95 % CI (s) | min-max (s) | speedup vs baseline "
        "(95 % CI) | vs fair, same connections (95 % CI) |\n";
  md += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  const auto with_ci = [](const json& p) -> std::string {
    if (!p.is_object() || !p.value("speedup", json()).is_number()) return "n/a";
    auto out = fmt::format("{:.2f}x", p.at("speedup").get<double>());
    const auto ci = p.value("ci95", json());
    if (ci.is_array() && ci.size() == 2)
      out += fmt::format(" ({:.2f}-{:.2f})", ci[0].get<double>(), ci[1].get<double>());
    return out;
  };
  for (const auto& v : bench.value("variants", json::array())) {
    if (!v.contains("repeat")) continue;
    const auto& r = v.at("repeat");
    auto t = r.value("iteration_time_s", json());
    if (!t.is_object()) t = json::object();  // (a variant in the table ran at least once)
    const auto vs = r.value("vs_fair", json());
    md += fmt::format("| {} | {} | {} | {} | {} | {}-{} | {} | {} |\n", v.value("name", std::string{"?"}),
                      t.value("runs", 0), fixed(t.value("mean", json()), "{:.3f}"),
                      fixed(t.value("stdev", json()), "{:.3f}"), fixed(t.value("ci95", json()), "+-{:.3f}"),
                      fixed(t.value("min", json()), "{:.3f}"), fixed(t.value("max", json()), "{:.3f}"),
                      with_ci(r.value("speedup", json())),
                      vs.is_object() ? with_ci(vs) + " vs " + vs.value("reference", std::string{"?"}) : "");
  }
}

// Prefill (BubbleTea) in the bubbles: the training slowdown and the prefill's own figures.
void prefill_section(const json& bench, int repeats, std::string& md) {
  md += "\nPrefill (BubbleTea) in the bubbles: training slowdown is the variant's iteration time over its "
        "`-training-only` twin's, - 1";
  md += repeats > 1 ? fmt::format(" (over the {} rounds: the mean of the per-round slowdowns, each against the twin "
                                  "of its round, with its 95 % CI; GPU utilization: the mean of the "
                                  "rounds'; the other columns are the first round's).\n\n",
                                  repeats)
                    : std::string(".\n\n");
  md += "| variant | GPU utilization (%) | training slowdown (%) | requests | completed | TTFT p50 (s) | TTFT p99 (s) | "
        "deadline misses | preemptions | prompt tokens/s |\n";
  md += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& v : bench.value("variants", json::array())) {
    if (!v.contains("summary") || !v.at("summary").contains("prefill")) continue;
    const auto& s = v.at("summary");
    const auto at = [&](const char* pointer) { return at_pointer(s, pointer); };
    auto utilization = fixed(at("/gpu_utilization/mean"), "{:.1f}", 100);
    auto slowdown = fixed(at("/training_slowdown"), "{:+.2f}", 100);
    if (const json::json_pointer p("/repeat/training_slowdown"); v.contains(p)) {
      const auto& r = v.at(p);
      slowdown = fixed(r.value("mean", json()), "{:+.2f}", 100);
      if (const auto ci = r.value("ci95", json()); ci.is_array() && ci.size() == 2)
        slowdown += fmt::format(" ({:+.2f} to {:+.2f})", 100 * ci[0].get<double>(), 100 * ci[1].get<double>());
      if (const auto u = number(v.at("repeat"), "/gpu_utilization/mean")) utilization = fixed(*u, "{:.1f}", 100);
    }
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", v.value("name", std::string{"?"}),
                      utilization, slowdown,
                      fixed(at("/prefill/requests"), "{:.0f}"), fixed(at("/prefill/completed"), "{:.0f}"),
                      fixed(at("/prefill/ttft_s/p50"), "{:.3f}"), fixed(at("/prefill/ttft_s/p99"), "{:.3f}"),
                      fixed(at("/prefill/deadline_misses"), "{:.0f}"), fixed(at("/prefill/preemptions"), "{:.0f}"),
                      fixed(at("/prefill/tokens_per_s"), "{:.0f}"));
  }
}

}  // namespace

std::string markdown(const json& bench) {
  const auto baseline = bench.value("baseline", std::string{});
  const double scale = bench.value("scale", 1.0);
  const auto backend = bench.value("backend", std::string{"?"});
  std::string md = fmt::format("# wanlab bench: {}\n\n", bench.value("scenario", std::string{"?"}));
  md += fmt::format("Scenario `{}` on lab `{}`, {} backend, scale {}.\n\n", bench.value("scenario", std::string{"?"}),
                    bench.value("lab", std::string{"?"}), backend, scale);
  md +=
      "| variant | policy | connections | placement | iteration time mean (s) | p99 (s) | speedup vs baseline | "
      "GPU utilization (%) | bubble (%) | WAN utilization (%) |\n";
  md += "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  const json degraded = degraded_runs(bench.value("variants", json::array()));
  const bool baseline_ran = variant_rows(bench, degraded, md);
  if (!degraded.empty()) degraded_section(degraded, md);
  const auto repeats = bench.value("repeat", 1);
  if (repeats > 1) repeat_section(bench, repeats, md);
  bool prefill = false;
  for (const auto& v : bench.value("variants", json::array()))
    prefill |= v.contains("summary") && v.at("summary").contains("prefill");
  if (prefill) prefill_section(bench, repeats, md);
  bool rails = false;
  for (const auto& v : bench.value("variants", json::array()))
    rails |= at_pointer(v.value("summary", json::object()), "/rails").is_array();
  if (rails) rails_section(bench, md);
  const auto skipped = bench.value("skipped", json::array());
  if (!skipped.empty()) {
    md += "\nNot run:\n\n";
    for (const auto& s : skipped)
      md += fmt::format("- `{}`: {}\n", s.value("name", std::string{"?"}), s.value("reason", std::string{"?"}));
  }
  md += fmt::format(
      "\nBaseline: `{}`{}: policy fair (TCP sharing) with the smallest number of TCP connections per WAN peer, as a "
      "stock framework runs (one connection). Speedup is the baseline's mean iteration time over the variant's; "
      "iteration times are means (and p99) over the iterations after warm-up; WAN utilization is the mean over the "
      "directed links that carried payload. Placement: `atlas-rule` puts each stage's DP replicas in one DC "
      "(pipeline stages across DCs), `dp-across-dcs` keeps each replica's pipeline in one DC and spreads the "
      "replicas over the DCs (the all-reduce crosses the WAN), `scenario` is the scenario's own placement.\n",
      baseline, baseline_ran ? "" : " (did not run: no ratios)");
  md += fmt::format(
      "\nScale {}{}. Backend: {}.\n", scale,
      scale != 1 ? fmt::format(": bytes and WAN link rates are multiplied by {}, so timings are those of the full-size "
                               "run, but TCP dynamics (congestion windows, slow start, loss recovery) do not scale "
                               "exactly",
                               scale)
                 : "",
      backend);
  md += sensitivity_markdown(bench);
  return md;
}

}  // namespace wanlab::cli::bench
