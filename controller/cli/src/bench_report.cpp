// The pure part of `wanlab bench`: variants, ratios, markdown tables (bench.md itself: bench_markdown.cpp).
#include "bench_report.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <boost/math/distributions/students_t.hpp>
#include <fmt/format.h>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/run/results.hpp"
#include "wanlab/workload/baselines.hpp"

namespace wanlab::cli::bench {
namespace {

using nlohmann::json;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = text.find(',', pos);
    auto item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

bool valid_policy_name(const std::string& s) {
  if (s.empty() || s.size() > 32) return false;
  const auto ok = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (!first && (c == '-' || c == '_'));
  };
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!ok(s[i], i == 0)) return false;
  return true;
}

json ratio(std::optional<double> num, std::optional<double> den) {
  if (!num || !den || *den == 0 || !std::isfinite(*num / *den)) return nullptr;
  return *num / *den;
}

}  // namespace

std::string fixed(const json& v, const char* format, double factor) {
  if (!v.is_number()) return "n/a";
  return fmt::format(fmt::runtime(format), v.get<double>() * factor);
}

std::optional<double> number(const json& j, const char* pointer) {
  const json::json_pointer p(pointer);
  if (!j.is_object() || !j.contains(p) || !j.at(p).is_number()) return std::nullopt;
  return j.at(p).get<double>();
}

std::vector<std::string> parse_policies(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& p : split(text)) {
    if (!valid_policy_name(p))
      throw std::invalid_argument(fmt::format(
          "policy \"{}\": a policy name is lower-case letters, digits, '-' and '_' (at most 32 characters)", p));
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  if (out.empty()) throw std::invalid_argument("no policy given");
  return out;
}

std::vector<std::string> parse_known_policies(const std::string& text) {
  auto out = parse_policies(text);
  std::vector<std::string> unknown;
  for (const auto& p : out) {
    try {
      (void)arbiter::make_policy(p);
    } catch (const std::invalid_argument&) {
      unknown.push_back(fmt::format("\"{}\"", p));
    }
  }
  if (!unknown.empty())
    throw std::invalid_argument(fmt::format("--policies: unknown polic{} {} (known: {})",
                                            unknown.size() == 1 ? "y" : "ies", fmt::join(unknown, ", "),
                                            fmt::join(arbiter::policy_names(), ", ")));
  return out;
}

std::vector<int> parse_connections(const std::string& text) {
  std::vector<int> out;
  for (const auto& item : split(text)) {
    std::size_t used = 0;
    int k = 0;
    try {
      k = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || k < 1 || k > 64)
      throw std::invalid_argument(fmt::format("connections \"{}\": expected integers in 1..64", item));
    out.push_back(k);
  }
  if (out.empty()) throw std::invalid_argument("no connections value given");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> default_connections(int scenario_connections) {
  if (scenario_connections <= 1) return {1};
  return {1, scenario_connections};
}

bool is_named_baseline(const std::string& placement) {
  const auto& names = workload::baseline_names();
  return std::find(names.begin(), names.end(), placement) != names.end();
}

std::vector<std::string> parse_baselines(const std::string& text) {
  const auto& known = workload::baseline_names();
  std::vector<std::string> out;
  std::string item;
  std::stringstream in(text);
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (item.empty()) continue;
    if (item == "all") {
      for (const auto& k : known)
        if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
      continue;
    }
    if (!is_named_baseline(item)) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw std::invalid_argument(fmt::format("unknown baseline \"{}\"; baselines: {} (or all)", item, names));
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

std::string variant_name(const std::string& policy, int connections, const std::string& placement) {
  if (is_named_baseline(placement)) return placement;
  auto name = fmt::format("{}-k{}", policy, connections);
  if (placement == kDpAcrossDcs) name += std::string("-") + kDpAcrossDcs;
  return name;
}

std::string baseline_name(const std::vector<int>& connections) {
  return variant_name("fair", connections.empty() ? 1 : *std::min_element(connections.begin(), connections.end()));
}

std::vector<Variant> expand_variants(const std::vector<std::string>& policies, const std::vector<int>& connections_in,
                                     bool placement_baseline, const std::string& scenario_placement,
                                     const std::vector<std::string>& baselines) {
  auto connections = connections_in;
  std::sort(connections.begin(), connections.end());
  connections.erase(std::unique(connections.begin(), connections.end()), connections.end());
  if (connections.empty()) connections = {1};
  std::vector<Variant> out;
  const auto add = [&](const std::string& policy, int k, const std::string& placement) {
    Variant v{variant_name(policy, k, placement), policy, k, placement};
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
  };
  add("fair", connections.front(), scenario_placement);  // the baseline
  for (const auto& p : policies)
    for (int k : connections) add(p, k, scenario_placement);
  if (placement_baseline) add("fair", connections.back(), kDpAcrossDcs);
  for (const auto& b : baselines) add("fair", 1, b);
  return out;
}

std::vector<Variant> add_training_only_twins(const std::vector<Variant>& variants) {
  std::vector<Variant> out;
  for (const auto& v : variants) {
    const bool has_twin = std::any_of(variants.begin(), variants.end(),
                                      [&](const Variant& t) { return t.name == v.name + kTrainingOnlySuffix; });
    if (v.placement != kDpAcrossDcs && !is_named_baseline(v.placement) && !v.training_only && !has_twin) {
      Variant twin = v;
      twin.name += kTrainingOnlySuffix;
      twin.training_only = true;
      out.push_back(std::move(twin));
    }
    out.push_back(v);
  }
  return out;
}

std::vector<std::size_t> round_order(std::size_t n, int round, int rounds) {
  std::vector<std::size_t> order(n);
  for (std::size_t k = 0; k < n; ++k) order[k] = rounds > 1 && round % 2 == 0 ? n - 1 - k : k;
  return order;
}

json training_slowdown(const json& with_load, const json& without) {
  const auto a = number(with_load, "/iteration_time_s/mean");
  const auto b = number(without, "/iteration_time_s/mean");
  if (!a || !b || *a <= 0 || *b <= 0) return nullptr;
  return *a / *b - 1;
}

double wan_utilization(const json& summary) {
  double sum = 0;
  int n = 0;
  if (summary.is_object() && summary.contains("wan") && summary.at("wan").is_array())
    for (const auto& w : summary.at("wan")) {
      if (w.value("payload_bytes", 0.0) <= 0) continue;
      sum += w.value("utilization", 0.0);
      ++n;
    }
  return n == 0 ? 0.0 : sum / n;
}

json ratios(const json& summary, const json& baseline) {
  return {
      {"iteration_time_speedup",
       ratio(number(baseline, "/iteration_time_s/mean"), number(summary, "/iteration_time_s/mean"))},
      {"gpu_utilization", ratio(number(summary, "/gpu_utilization/mean"), number(baseline, "/gpu_utilization/mean"))},
      {"bubble_fraction", ratio(number(summary, "/bubble_fraction"), number(baseline, "/bubble_fraction"))},
      {"wan_utilization", ratio(wan_utilization(summary), wan_utilization(baseline))}};
}

namespace {

// The 97.5 % quantile of Student's t with n - 1 degrees of freedom: a two-sided 95 %
// interval of a mean of n samples.
double t975(std::size_t n) {
  const boost::math::students_t dist(static_cast<double>(n - 1));
  return boost::math::quantile(dist, 0.975);
}

// Mean, sample standard deviation and the 95 % half-width of the mean (0 below two values).
struct MeanSd {
  double mean = 0;
  double sd = 0;
  double ci95 = 0;
};

MeanSd mean_sd(const std::vector<double>& v) {
  MeanSd m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    for (double x : v) m.sd += (x - m.mean) * (x - m.mean);
    m.sd = std::sqrt(m.sd / static_cast<double>(v.size() - 1));
    m.ci95 = t975(v.size()) * m.sd / std::sqrt(static_cast<double>(v.size()));
  }
  return m;
}

// [low, high] of the mean's 95 % interval; null below two values.
json ci_json(const MeanSd& m, std::size_t n) { return n > 1 ? json::array({m.mean - m.ci95, m.mean + m.ci95}) : json(); }

std::vector<std::optional<double>> run_means(const json& entry) {
  std::vector<std::optional<double>> out;
  for (const auto& r : entry.value("runs", json::array())) out.push_back(number(r, "/iteration_time_s/mean"));
  return out;
}

}  // namespace

json run_stats(const std::vector<double>& values) {
  if (values.empty()) return nullptr;
  const auto m = mean_sd(values);
  return {{"runs", values.size()},
          {"mean", m.mean},
          {"stdev", values.size() > 1 ? json(m.sd) : json()},
          {"ci95", values.size() > 1 ? json(m.ci95) : json()},
          {"min", *std::min_element(values.begin(), values.end())},
          {"max", *std::max_element(values.begin(), values.end())}};
}

json paired_speedup(const std::vector<std::optional<double>>& reference,
                    const std::vector<std::optional<double>>& variant) {
  std::vector<double> ref, var, ratio;
  for (std::size_t r = 0; r < std::min(reference.size(), variant.size()); ++r) {
    if (!reference[r] || !variant[r] || *reference[r] <= 0 || *variant[r] <= 0) continue;
    ref.push_back(*reference[r]);
    var.push_back(*variant[r]);
    ratio.push_back(*reference[r] / *variant[r]);
  }
  if (ratio.empty()) return nullptr;
  const auto m = mean_sd(ratio);
  return {{"speedup", mean_sd(ref).mean / mean_sd(var).mean}, {"ratio_mean", m.mean}, {"ci95", ci_json(m, ratio.size())},
          {"pairs", ratio.size()}};
}

void add_repeat_ratios(json& variants, const std::string& baseline) {
  // Each variant's per-round means, read before the entries below gain "repeat".
  std::map<std::string, std::vector<std::optional<double>>> means;
  for (const auto& v : variants)
    if (v.contains("runs")) means[v.value("name", std::string{})] = run_means(v);
  const auto base = means.find(baseline);
  for (auto& v : variants) {
    if (!v.contains("runs")) continue;
    const auto name = v.value("name", std::string{});
    std::vector<double> done;
    for (const auto& m : means[name])
      if (m) done.push_back(*m);
    json repeat = {{"iteration_time_s", run_stats(done)}, {"speedup", nullptr}};
    if (base != means.end()) repeat["speedup"] = paired_speedup(base->second, means[name]);
    const auto policy = v.value("policy", std::string{});
    if (policy != "fair" && !v.value("training_only", false)) {
      const auto fair = variant_name("fair", v.value("connections", 1), v.value("placement", std::string{kAtlasRule}));
      if (const auto f = means.find(fair); f != means.end()) {
        auto p = paired_speedup(f->second, means[name]);
        if (p.is_object()) p["reference"] = fair;
        repeat["vs_fair"] = p;
      }
    }
    // With a prefill load: the per-round slowdowns, each against the twin of its round.
    std::vector<double> slowdown, utilization;
    for (const auto& r : v.at("runs")) {
      if (const auto x = number(r, "/training_slowdown")) slowdown.push_back(*x);
      if (const auto x = number(r, "/gpu_utilization/mean")) utilization.push_back(*x);
    }
    if (!slowdown.empty()) {
      const auto m = mean_sd(slowdown);
      repeat["training_slowdown"] = {{"mean", m.mean}, {"ci95", ci_json(m, slowdown.size())}, {"pairs", slowdown.size()}};
      repeat["gpu_utilization"] = run_stats(utilization);
    }
    v["repeat"] = std::move(repeat);
  }
}

json run_engine(const json& summary) {
  if (!summary.is_object() || !summary.contains("engine") || !summary.at("engine").is_object()) return nullptr;
  const auto& e = summary.at("engine");
  json out = json::object();
  for (const char* k : {"scheduling", "released_late_over_1ms_fraction", "release_late_p99_us", "rx_ring_dropped",
                        "rx_big_ring_dropped", "degraded", "degraded_reasons"})
    if (e.contains(k)) out[k] = e.at(k);
  return out;
}

json degraded_runs(const json& variants) {
  json out = json::array();
  for (const auto& v : variants) {
    const auto name = v.value("name", std::string{"?"});
    const auto add = [&](const json& engine, const std::string& folder) {
      if (!engine.is_object() || !engine.value("degraded", false)) return;
      for (const auto& o : out)
        if (o.at("folder") == folder) return;  // the first run: in `summary` and in `runs`
      out.push_back({{"variant", name}, {"folder", folder}, {"reasons", engine.value("degraded_reasons", json::array())}});
    };
    if (v.contains("summary") && v.at("summary").is_object() && v.at("summary").contains("engine"))
      add(v.at("summary").at("engine"), v.value("folder", name));
    for (const auto& r : v.value("runs", json::array()))
      if (r.is_object() && r.contains("engine")) add(r.at("engine"), r.value("folder", name));
  }
  return out;
}

std::string sensitivity_markdown(const json& bench) {
  const auto variants = bench.value("variants", json::array());
  const auto baseline = bench.value("baseline", std::string{});
  const json* base = nullptr;
  bool any = false;
  for (const auto& v : variants) {
    any |= v.contains("sensitivity") && v.at("sensitivity").is_object();
    if (v.value("name", std::string{}) == baseline && v.contains("sensitivity")) base = &v.at("sensitivity");
  }
  if (!any) return {};
  const auto time = [](const json& s, const char* knob) -> std::optional<double> {
    const auto it = s.find(knob);
    if (it == s.end() || !it->is_number() || !(it->get<double>() > 0)) return std::nullopt;
    return it->get<double>();
  };
  const auto info = bench.value("sensitivity", json::object());
  std::string md =
      "\n## Model sensitivity\n\nHow far each variant's simulated iteration time moves across the simulator's knobs: "
      "the default, the paced model's step divided by 4 (`--paced-piece`), the other burst models (`--bursts "
      "shared`, `--bursts fifo`) and the compute jitter times 10 (`--compute-jitter`, at most 0.5). `moves by` is the "
      "largest change from the default; the verdict (faster or slower than the baseline) holds when every knob gives "
      "the same one, each against the baseline under the same knob.\n\n";
  // One column per knob, in kSensitivityKnobs' order.
  const auto label = [](std::string_view knob) -> std::string {
    if (knob == "step/4") return "step / 4";
    if (knob == "shared" || knob == "fifo") return fmt::format("bursts {}", knob);
    if (knob == "jitter x10") return "jitter x 10";
    return std::string(knob);
  };
  md += "| variant ";
  for (const auto* knob : kSensitivityKnobs) md += fmt::format("| {} (s) ", label(knob));
  md += "| moves by (%) | verdict vs baseline |\n| --- ";
  for (std::size_t i = 0; i < std::size(kSensitivityKnobs); ++i) md += "| ---: ";
  md += "| ---: | --- |\n";
  for (const auto& v : variants) {
    if (!v.contains("sensitivity") || !v.at("sensitivity").is_object()) continue;
    const auto& s = v.at("sensitivity");
    const auto name = v.value("name", std::string{"?"});
    const auto def = time(s, "default");
    std::string row = fmt::format("| {} ", name);
    double moves = 0;
    bool moved = false;
    for (const auto* knob : kSensitivityKnobs) {
      const auto t = time(s, knob);
      row += t ? fmt::format("| {:.3f} ", *t) : "| n/a ";
      if (t && def && std::string_view(knob) != "default") {
        moves = std::max(moves, std::abs(*t / *def - 1));
        moved = true;
      }
    }
    row += moved ? fmt::format("| {:.1f} ", 100 * moves) : "| n/a ";
    std::string verdict = "n/a";
    if (name == baseline) {
      verdict = "baseline";
    } else if (base && def && time(*base, "default")) {
      const double speedup = *time(*base, "default") / *def;
      std::string flips;
      double lo = speedup, hi = speedup;
      for (const auto* knob : kSensitivityKnobs) {
        const auto t = time(s, knob);
        const auto b = time(*base, knob);
        if (!t || !b) continue;
        const double k = *b / *t;
        lo = std::min(lo, k);
        hi = std::max(hi, k);
        if ((k > 1) != (speedup > 1))
          flips += fmt::format("{}{} {:.2f}x", flips.empty() ? "" : ", ", knob, k);
      }
      verdict = flips.empty() ? fmt::format("holds ({:.2f}x to {:.2f}x)", lo, hi)
                              : fmt::format("**flips** ({:.2f}x by default; {})", speedup, flips);
    }
    md += row + "| " + verdict + " |\n";
  }
  if (info.contains("extra_wall_s") && info.at("extra_wall_s").is_number())
    md += fmt::format("\nThe sensitivity runs took {:.2f} s of simulation on top of the default runs' {:.2f} s "
                      "(`--no-sensitivity` leaves them out).\n",
                      info.at("extra_wall_s").get<double>(), info.value("default_wall_s", 0.0));
  return md;
}

json crosscheck(const json& lab, const json& sim) {
  const auto by_name = [](const json& bench) {
    std::map<std::string, json> out;
    for (const auto& v : bench.value("variants", json::array())) out[v.value("name", std::string{})] = v;
    return out;
  };
  const auto labs = by_name(lab);
  const auto sims = by_name(sim);
  json rows = json::array();
  json unmatched = json::array();
  std::optional<double> worst;
  for (const auto& v : lab.value("variants", json::array())) {
    const auto name = v.value("name", std::string{});
    const auto it = sims.find(name);
    if (it == sims.end()) {
      unmatched.push_back({{"name", name}, {"ran", "lab"}});
      continue;
    }
    const auto& ls = v.contains("summary") ? v.at("summary") : json::object();
    const auto& ss = it->second.contains("summary") ? it->second.at("summary") : json::object();
    // Repeated lab runs: their mean.
    const auto lt = v.contains("repeat") ? number(v.at("repeat"), "/iteration_time_s/mean")
                                         : number(ls, "/iteration_time_s/mean");
    const auto st = number(ss, "/iteration_time_s/mean");
    json row = {{"name", name},
                {"lab_iteration_s", lt ? json(*lt) : json()},
                {"sim_iteration_s", st ? json(*st) : json()},
                {"error", json()},
                {"lab_runs", v.contains("repeat") ? number(v.at("repeat"), "/iteration_time_s/runs").value_or(0) : 1},
                {"lab_gpu_utilization", number(ls, "/gpu_utilization/mean").value_or(0.0)},
                {"sim_gpu_utilization", number(ss, "/gpu_utilization/mean").value_or(0.0)}};
    if (lt && st && *lt > 0) {
      const double e = *st / *lt - 1;
      row["error"] = e;
      worst = std::max(worst.value_or(0.0), std::abs(e));
    }
    rows.push_back(std::move(row));
  }
  for (const auto& [name, v] : sims)
    if (!labs.contains(name)) unmatched.push_back({{"name", name}, {"ran", "sim"}});
  return {{"scenario", lab.value("scenario", sim.value("scenario", std::string{"?"}))},
          {"backend", lab.value("backend", std::string{"?"})},
          {"simulation", sim.value("simulation", json::object())},
          {"variants", rows},
          {"unmatched", unmatched},
          {"max_abs_error", worst ? json(*worst) : json()}};
}

std::string crosscheck_markdown(const json& check) {
  std::string md = fmt::format("# wanlab bench: {}, simulator vs lab\n\n", check.value("scenario", std::string{"?"}));
  md += "| variant | lab iteration (s) | simulated (s) | error (%) | lab GPU util. (%) | simulated GPU util. (%) |\n";
  md += "| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& v : check.value("variants", json::array())) {
    const auto e = v.value("error", json());
    md += fmt::format("| {} | {} | {} | {} | {:.1f} | {:.1f} |\n", v.value("name", std::string{"?"}),
                      fixed(v.value("lab_iteration_s", json()), "{:.3f}"), fixed(v.value("sim_iteration_s", json()), "{:.3f}"),
                      e.is_number() ? fmt::format("{:+.1f}", 100 * e.get<double>()) : "n/a",
                      100 * v.value("lab_gpu_utilization", 0.0), 100 * v.value("sim_gpu_utilization", 0.0));
  }
  const auto worst = check.value("max_abs_error", json());
  md += fmt::format("\nLargest error: {}. Error = simulated / lab mean iteration time - 1.\n",
                    worst.is_number() ? fmt::format("{:.1f} %", 100 * worst.get<double>()) : "n/a");
  double most_runs = 1;
  for (const auto& v : check.value("variants", json::array())) most_runs = std::max(most_runs, v.value("lab_runs", 1.0));
  if (most_runs > 1)
    md += fmt::format("The lab's figure is the mean over its repeated runs (up to {:.0f} per variant).\n", most_runs);
  for (const auto& u : check.value("unmatched", json::array()))
    md += fmt::format("- `{}` ran only in the {}\n", u.value("name", std::string{"?"}), u.value("ran", std::string{"?"}));
  return md;
}

}  // namespace wanlab::cli::bench

namespace wanlab::cli::bench {

std::vector<std::string> parse_modes(const std::string& mode) {
  static const std::vector<std::string> known = {"lab", "simulate", "ns3"};
  std::vector<bool> on(known.size(), false);
  std::size_t start = 0;
  bool any = false;
  while (start <= mode.size()) {
    const auto comma = mode.find(',', start);
    const auto word = mode.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (word == "both") {
      on[0] = on[1] = true;
    } else {
      const auto it = std::find(known.begin(), known.end(), word);
      if (it == known.end())
        throw std::invalid_argument(
            fmt::format("--mode {}: unknown executor '{}': give lab, simulate, ns3 or both, or several joined by commas",
                        mode, word));
      on[static_cast<std::size_t>(it - known.begin())] = true;
    }
    any = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < known.size(); ++i)
    if (on[i]) out.push_back(known[i]);
  if (!any || out.empty()) throw std::invalid_argument(fmt::format("--mode {}: give lab, simulate, ns3 or both", mode));
  return out;
}

json crosscheck_executors(const std::map<std::string, json>& benches) {
  std::vector<std::string> order;
  for (const char* e : {"lab", "simulate", "ns3"})
    if (benches.contains(e)) order.push_back(e);
  // Variant names in the order the first executor that ran them lists them.
  std::vector<std::string> names;
  std::map<std::string, json> meta;
  std::map<std::string, std::map<std::string, double>> times;  // variant -> executor -> s
  for (const auto& e : order)
    for (const auto& v : benches.at(e).value("variants", json::array())) {
      const auto name = v.value("name", std::string{});
      if (!meta.contains(name)) {
        names.push_back(name);
        meta[name] = {{"policy", v.value("policy", std::string{})}, {"connections", v.value("connections", 1)},
                      {"placement", v.value("placement", std::string{kAtlasRule})}};
      }
      const auto& s = v.contains("summary") ? v.at("summary") : json::object();
      const auto t = v.contains("repeat") ? number(v.at("repeat"), "/iteration_time_s/mean")
                                          : number(s, "/iteration_time_s/mean");
      if (t && *t > 0) times[name][e] = *t;
    }
  json rows = json::array();
  std::map<std::string, double> worst;
  for (const auto& name : names) {
    const auto& t = times[name];
    std::string reference = t.contains("ns3") ? "ns3" : t.contains("lab") ? "lab" : "";
    json row = meta[name];
    row["name"] = name;
    row["iteration_s"] = json::object();
    for (const auto& [e, s] : t) row["iteration_s"][e] = s;
    row["reference"] = reference.empty() ? json() : json(reference);
    row["error"] = json::object();
    if (!reference.empty())
      for (const auto& [e, s] : t) {
        if (e == reference) continue;
        const double err = s / t.at(reference) - 1;
        row["error"][e] = err;
        worst[e] = std::max(worst[e], std::abs(err));
      }
    rows.push_back(std::move(row));
  }
  json executors = json::object();
  for (const auto& e : order) {
    json ratios = json::object();
    for (const auto& name : names) {
      const auto& m = meta[name];
      if (m.value("policy", std::string{}) == "fair") continue;
      const auto fair = variant_name("fair", m.value("connections", 1), m.value("placement", std::string{kAtlasRule}));
      const auto& t = times[name];
      const auto ft = times.find(fair);
      if (t.contains(e) && ft != times.end() && ft->second.contains(e))
        ratios[fmt::format("{}/{}", name, fair)] = t.at(e) / ft->second.at(e);
    }
    executors[e] = {{"ratios", ratios},
                    {"max_abs_error", worst.contains(e) ? json(worst[e]) : json()},
                    {"skipped", benches.at(e).value("skipped", json::array())}};
  }
  const auto& first = benches.at(order.front());
  return {{"scenario", first.value("scenario", std::string{"?"})},
          {"gpus", first.value("gpus", json())},
          {"executors", order},
          {"variants", rows},
          {"by_executor", executors}};
}

std::string crosscheck_executors_markdown(const json& check) {
  const auto order = check.value("executors", std::vector<std::string>{});
  std::string md = fmt::format("# wanlab bench: {}, executors side by side\n\n", check.value("scenario", std::string{"?"}));
  md += "| variant |";
  for (const auto& e : order) md += fmt::format(" {} (s) |", e);
  for (const auto& e : order) md += fmt::format(" {} error (%) |", e);
  md += "\n| --- |";
  for (std::size_t i = 0; i < 2 * order.size(); ++i) md += " ---: |";
  md += "\n";
  for (const auto& v : check.value("variants", json::array())) {
    md += fmt::format("| {} |", v.value("name", std::string{"?"}));
    const auto& t = v.value("iteration_s", json::object());
    const auto& err = v.value("error", json::object());
    for (const auto& e : order) md += fmt::format(" {} |", t.contains(e) ? fmt::format("{:.3f}", t.at(e).get<double>()) : "n/a");
    for (const auto& e : order)
      md += fmt::format(" {} |", err.contains(e) ? fmt::format("{:+.1f}", 100 * err.at(e).get<double>())
                                 : v.value("reference", json()) == e ? "(reference)"
                                                                      : "n/a");
    md += "\n";
  }
  md += "\nError = the executor's mean iteration time / the reference's - 1; the reference is ns3 where it ran "
        "the variant, else the lab.\n\n## atlas/fair (iteration time ratio, same connections)\n\n";
  std::vector<std::string> pairs;
  const auto& by = check.value("by_executor", json::object());
  for (const auto& e : order) {
    const json ratios = by.value(e, json::object()).value("ratios", json::object());
    for (auto it = ratios.begin(); it != ratios.end(); ++it)
      if (std::find(pairs.begin(), pairs.end(), it.key()) == pairs.end()) pairs.push_back(it.key());
  }
  md += "| variants |";
  for (const auto& e : order) md += fmt::format(" {} |", e);
  md += "\n| --- |";
  for (std::size_t i = 0; i < order.size(); ++i) md += " ---: |";
  md += "\n";
  for (const auto& p : pairs) {
    md += fmt::format("| {} |", p);
    for (const auto& e : order) {
      const auto r = by.value(e, json::object()).value("ratios", json::object());
      md += fmt::format(" {} |", r.contains(p) ? fmt::format("{:.3f}", r.at(p).get<double>()) : "n/a");
    }
    md += "\n";
  }
  for (const auto& e : order) {
    const json skipped = by.value(e, json::object()).value("skipped", json::array());
    for (const auto& s : skipped)
      md += fmt::format("\n- {}: `{}` not run: {}", e, s.value("name", std::string{"?"}), s.value("reason", std::string{"?"}));
  }
  md += "\n";
  return md;
}

}  // namespace wanlab::cli::bench
