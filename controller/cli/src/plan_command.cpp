// plan: the what-if search over DCs and splits (controller/planner), printed and written.
#include "plan_command.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "gnuplot_text.hpp"
#include "run_support.hpp"
#include "simulate_command.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/core/diagnostics.hpp"
#include "wanlab/core/json_fields.hpp"
#include "wanlab/planner/memory.hpp"

extern char** environ;

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using planner::Candidate;

std::string model_name(const Candidate& c) {
  if (c.full_s) return "default";
  if (c.fast_s) return "fast";
  return "estimate";
}

json candidate_json(const Candidate& c, const core::Topology& topo) {
  json chain = json::array();
  for (std::size_t i = 0; i < c.chain.size(); ++i) chain.push_back({{"dc", topo.dcs.at(c.chain[i]).name}, {"stages", c.stages[i]}});
  json j{{"dcs", chain},
         {"dc_set", c.dc_set(topo)},
         {"gpus", c.gpus()},
         {"gpu_limit", c.gpu_limit},
         {"parallelism", {{"pp", c.par.pp}, {"dp", c.par.dp}, {"tp", c.par.tp}}},
         {"micro_batch_size", c.micro_batch_size},
         {"micro_batches", c.micro_batches},
         {"layers_per_stage", c.layers},
         {"split", c.split_name()},
         {"schedule", workload::to_string(c.schedule)},
         {"virtual_stages", c.virtual_stages},
         {"connections", c.connections},
         {"policy", c.policy},
         {"greedy_rule", c.greedy},
         {"memory_gb_per_gpu", c.memory_bytes / 1e9},
         {"estimate_s", c.estimate_s},
         {"fast_s", c.fast_s ? json(*c.fast_s) : json(nullptr)},
         {"default_s", c.full_s ? json(*c.full_s) : json(nullptr)},
         {"iteration_time_s", c.predicted_s()},
         {"model", model_name(c)}};
  if (c.fast_s || c.full_s) {
    j["gpu_utilization"] = c.gpu_utilization;
    j["wan_bytes_per_iteration"] = c.wan_bytes;
    j["busiest_wan_link_utilization"] = c.busiest_link_utilization;
    j["tokens_per_iteration"] = c.tokens;
    j["tokens_per_s"] = c.tokens_per_s();
  }
  return j;
}

// A scenario name of at most 64 characters: the original's, cut, and a suffix.
std::string plan_name(const std::string& base, const std::string& suffix) {
  return base.substr(0, std::min<std::size_t>(base.size(), 63 - suffix.size())) + "-" + suffix;
}

std::string table_row(std::size_t rank, const Candidate& c, const core::Topology& topo) {
  return fmt::format("| {} | {}{} | {} | {:.3f} | {} | {:.1f} | {:.1f} | {:.0f} | {:.0f} | {:.1f} |",
                     rank == 0 ? std::string("-") : std::to_string(rank),
                     c.describe(topo), c.greedy ? " **(Atlas greedy rule)**" : "", c.gpus(), c.predicted_s(),
                     model_name(c), 100 * c.gpu_utilization, c.wan_bytes / 1e9, 100 * c.busiest_link_utilization,
                     c.tokens_per_s(), c.memory_bytes / 1e9);
}

constexpr const char* kTableHead =
    "| # | plan | GPUs | iteration (s) | model | GPU util. (%) | WAN GB / iteration | busiest WAN link (%) | "
    "tokens / s | memory GB / GPU |\n| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n";

int run_gnuplot(const fs::path& dir, const std::string& script) {
  const char* argv[] = {"gnuplot", script.c_str(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  posix_spawn_file_actions_addopen(&fa, 1, (dir / "gnuplot.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "gnuplot", &fa, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return 127;
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// plots/iteration-time: per DC set, the fast model's best iteration time at each GPU count used.
void write_plot(const fs::path& out, const core::Topology& topo, const planner::SearchResult& r) {
  std::map<std::string, std::map<int, double>> lines;  // DC set (sorted names) -> GPUs -> best time
  for (const auto& c : r.fast) {
    if (c.greedy || !c.fast_s) continue;
    std::vector<std::string> names;
    for (auto dc : c.chain) names.push_back(topo.dcs.at(dc).name);
    std::sort(names.begin(), names.end());
    std::string set;
    for (const auto& n : names) set += (set.empty() ? "" : "+") + n;
    auto [it, fresh] = lines[set].try_emplace(c.gpus(), *c.fast_s);
    if (!fresh) it->second = std::min(it->second, *c.fast_s);
  }
  std::map<int, double> greedy;
  for (const auto& c : r.fast)
    if (c.greedy && c.fast_s) greedy[c.gpus()] = *c.fast_s;
  const fs::path plots = out / "plots";
  fs::create_directories(plots);
  std::string data, clauses;
  int index = 0;
  const auto block = [&](const std::string& title, const std::map<int, double>& pts, const std::string& style) {
    data += fmt::format("# {}: GPUs used, predicted iteration time (s)\n", title);
    for (const auto& [g, t] : pts) data += fmt::format("{} {:.6f}\n", g, t);
    data += "\n\n";
    clauses += fmt::format("{}'iteration-time.dat' index {} using 1:2 with linespoints {} title {}",
                           clauses.empty() ? "plot " : ", \\\n     ", index++, style, gnuplot_string(title));
  };
  for (const auto& [set, pts] : lines) block(set, pts, "lw 2 pt 7");
  if (!greedy.empty()) block("Atlas greedy rule", greedy, "lw 2 dt 2 pt 6 lc rgb 'black'");
  write_text_file(plots / "iteration-time.dat", data);
  write_text_file(plots / "iteration-time.gp",
                  "# Predicted iteration time against GPUs used, one line per DC set (wanlab plan; the simulator's\n"
                  "# fast model). Redraw: gnuplot iteration-time.gp\n"
                  "set terminal svg size 1200,900 dynamic font 'sans,12'\nset output 'iteration-time.svg'\n"
                  "set xlabel 'GPUs used'\nset ylabel 'predicted iteration time (s)'\nset logscale y\n"
                  "set key outside below maxcols 4 font ',10'\nset grid\n" +
                      clauses + "\n");
  if (clauses.empty()) return;
  const int rc = run_gnuplot(plots, "iteration-time.gp");
  if (rc == 127)
    fmt::print(stderr, "plots: gnuplot is not installed (Debian: apt-get install gnuplot-nox); data and script are in "
                       "{}/\n", plots.string());
  else if (rc != 0)
    fmt::print(stderr, "wanlab: plan: gnuplot iteration-time.gp failed (status {}); see {}/gnuplot.log\n", rc,
               plots.string());
  else
    fmt::print("plot: {}\n", (plots / "iteration-time.svg").string());
}

}  // namespace

json write_plan(const workload::Scenario& scenario, const std::string& scenario_file, const core::Topology& topo,
                const planner::SearchResult& r, std::size_t top, const fs::path& out) {
  fs::create_directories(out);
  json ranked = json::array(), greedy = json::array(), fast = json::array();
  std::string md = fmt::format("# wanlab plan: {}\n\n{} sequences per iteration; {} candidates enumerated, {} within "
                               "memory, {} run in the fast model, {} in the default model, in {:.1f} s{}.\n\n",
                               scenario.name, r.batch, r.space, r.fit, r.fast.size(),
                               std::count_if(r.ranked.begin(), r.ranked.end(), [](const auto& c) { return c.full_s.has_value(); }),
                               r.elapsed_s, r.budget_ran_out ? " (the budget ran out: best so far)" : "");
  std::string by;
  for (const auto& [name, n] : r.fit_by_schedule) by += fmt::format("{}{} {}", by.empty() ? "" : ", ", name, n);
  for (const auto& [name, n] : r.fit_by_split) by += fmt::format(", {} split {}", name, n);
  md += fmt::format("Within memory by schedule and layer split: {}.\n\n", by);
  md += kTableHead;
  const auto write_one = [&](const Candidate& c, const std::string& folder) {
    const fs::path dir = out / folder;
    fs::create_directories(dir);
    const auto ctopo = planner::candidate_topology(topo, c);
    write_text_file(dir / "topology.json", core::to_json(ctopo).dump(2) + "\n");
    const auto scen = planner::candidate_scenario(scenario, topo, c, plan_name(scenario.name, folder),
                                                  fs::absolute(dir / "topology.json"));
    write_text_file(dir / "scenario.json", workload::to_json(scen).dump(2) + "\n");
  };
  for (std::size_t i = 0; i < r.ranked.size() && i < top; ++i) {
    const auto folder = fmt::format("plan-{}", i + 1);
    write_one(r.ranked[i], folder);
    auto j = candidate_json(r.ranked[i], topo);
    j["folder"] = folder;
    ranked.push_back(std::move(j));
    md += table_row(i + 1, r.ranked[i], topo) + "\n";
  }
  md += "\nAtlas's greedy rule (the scenario's split grown to each GPU count, DCs filled largest first):\n\n";
  md += kTableHead;
  for (const auto& g : r.greedy) {
    // The same plan as predicted by the simulator, where it was.
    const Candidate* best = &g;
    for (const auto& c : r.ranked)
      if (c.greedy && c.gpu_limit == g.gpu_limit) best = &c;
    if (best == &g)
      for (const auto& c : r.fast)
        if (c.greedy && c.gpu_limit == g.gpu_limit) best = &c;
    const auto folder = fmt::format("greedy-{}", g.gpu_limit);
    write_one(*best, folder);
    auto j = candidate_json(*best, topo);
    j["folder"] = folder;
    greedy.push_back(std::move(j));
    md += table_row(0, *best, topo) + "\n";
  }
  for (const auto& c : r.fast) fast.push_back(candidate_json(c, topo));
  json doc{{"scenario", scenario.name},
           {"scenario_file", scenario_file},
           {"wanlab", build_info()},
           {"lab", topo.name},
           {"batch_sequences", r.batch},
           {"space", r.space},
           {"within_memory", r.fit},
           {"within_memory_by_schedule", r.fit_by_schedule},
           {"within_memory_by_split", r.fit_by_split},
           {"memory_model", fmt::format("workload::stage_memory (docs/workloads.md#memory-model) per stage and GPU, "
                                        "with each plan's schedule and split, against {:.0f} GiB",
                                        planner::kGpuMemoryBytes / static_cast<double>(workload::kGiB))},
           {"elapsed_s", r.elapsed_s},
           {"budget_ran_out", r.budget_ran_out},
           {"created_at", timestamp()},
           {"ranked", ranked},
           {"greedy_rule", greedy},
           {"fast_model", fast}};
  write_text_file(out / "plan.json", doc.dump(2) + "\n");
  write_text_file(out / "plan.md", md);
  write_plot(out, topo, r);
  return doc;
}

int cmd_plan(const PlanArgs& a) {
  workload::Scenario scenario;
  core::Topology topo;
  planner::SearchOptions o;
  try {
    scenario = workload::load_scenario(a.scenario);
    topo = core::load_topology(scenario.topology_path);
    core::Diagnostics diag(scenario.topology_path.string());
    const auto offers = planner::topology_offers(topo, core::fields::read_document(scenario.topology_path.string(), diag));
    diag.throw_if_any();
    o.dcs = a.dcs ? planner::parse_dc_list(*a.dcs, topo, offers) : offers;
    if (a.gpus) {
      o.gpus = planner::parse_gpu_range(*a.gpus);
    } else {
      long total = 0;
      for (const auto& d : o.dcs) total += d.gpus;
      o.gpus = {std::clamp(total, 1L, 1L << 16), std::clamp(total, 1L, 1L << 16)};
    }
    if (!(a.budget > 0) || !std::isfinite(a.budget))
      throw std::invalid_argument(fmt::format("--budget {}: give a positive number of seconds", a.budget));
    if (a.top < 1) throw std::invalid_argument("--top 0: give at least 1");
    if (a.batch && *a.batch < 1) throw std::invalid_argument(fmt::format("--batch {}: give at least 1 sequence", *a.batch));
    o.batch = a.batch;
    o.top = a.top;
    o.budget_s = a.budget;
    o.fast.bursts = sim::SimOptions::Bursts::shared;
    o.fast.acks = false;
    o.full.traces = load_link_traces(topo);
  } catch (const core::ConfigError& e) {
    // One line: every problem with its file and field, "; "-separated.
    std::string line;
    for (const auto& d : e.diagnostics()) line += (line.empty() ? "" : "; ") + d.to_string();
    fmt::print(stderr, "wanlab: plan: {}\n", line);
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab: plan: {}\n", e.what());
    return 2;
  }
  const fs::path out =
      fs::absolute(a.out ? fs::path(*a.out) : fs::path("plan-results") / (scenario.name + "-" + timestamp()));
  if (fs::exists(out) && !fs::is_empty(out) && !fs::exists(out / "plan.json")) {
    fmt::print(stderr, "wanlab: plan: --out {} exists and is not an earlier plan's folder (no plan.json); give an "
                       "empty or new one\n", out.string());
    return 2;
  }
  std::string dcs;
  for (const auto& d : o.dcs) dcs += fmt::format("{}{} ({} GPUs)", dcs.empty() ? "" : ", ", topo.dcs[d.dc].name, d.gpus);
  fmt::print("plan {}: {} on {}: {}; {} GPUs; budget {} s\n", scenario.name,
             scenario.model.preset.empty() ? "custom model" : scenario.model.preset, topo.name, dcs,
             o.gpus.lo == o.gpus.hi ? fmt::format("{}", o.gpus.hi) : fmt::format("{}-{}", o.gpus.lo, o.gpus.hi),
             a.budget);
  std::fflush(stdout);
  double last = -1;
  std::string last_phase;
  o.progress = [&](const planner::Progress& p) {
    if (p.phase == last_phase && p.elapsed_s - last < 3 && p.done != p.total) return;
    last = p.elapsed_s;
    last_phase = p.phase;
    const std::string best =
        p.best ? fmt::format(", best so far {:.3f} s: {}", p.best->predicted_s(), p.best->describe(topo)) : "";
    fmt::print(stderr, "  [{:5.1f} of {} s] {} model{} {}/{}{}\n", p.elapsed_s, p.budget_s,
               p.phase == "estimate" ? "closed-form" : p.phase, p.phase == "estimate" ? ": DC chains" : ":", p.done,
               p.total, best);
  };
  planner::SearchResult r;
  try {
    r = planner::search(scenario, topo, o);
  } catch (const planner::PlanError& e) {
    fmt::print(stderr, "wanlab: plan: {}\n", e.what());
    return 2;
  }
  json doc;
  try {
    doc = write_plan(scenario, fs::absolute(a.scenario).lexically_normal().string(), topo, r, a.top, out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: plan: {}\n", e.what());
    return 1;
  }
  fmt::print("\n{}", kTableHead);
  for (std::size_t i = 0; i < r.ranked.size() && i < a.top; ++i) fmt::print("{}\n", table_row(i + 1, r.ranked[i], topo));
  if (!r.ranked.empty()) {
    const auto& best = r.ranked.front();
    const Candidate* g = nullptr;
    for (const auto& c : r.ranked)
      if (c.greedy && c.full_s && (!g || c.tokens_per_s() > g->tokens_per_s())) g = &c;
    if (g && !best.greedy)
      fmt::print("\nbest: {:.3f} s per iteration, {:.0f} tokens/s: {:.2f}x the tokens per second of Atlas's greedy "
                 "rule's best ({:.3f} s per iteration, {} GPUs on {}), same simulator, default model\n",
                 best.predicted_s(), best.tokens_per_s(), best.tokens_per_s() / g->tokens_per_s(), *g->full_s,
                 g->gpus(), g->dc_set(topo));
    else if (g)
      fmt::print("\nbest: Atlas's greedy rule itself ({:.3f} s per iteration)\n", *g->full_s);
  }
  std::string by;
  for (const auto& [name, n] : r.fit_by_schedule) by += fmt::format("{}{} {}", by.empty() ? "" : ", ", name, n);
  fmt::print("searched: {} plans, {} within memory (by schedule: {}; layer split: {} even, {} balanced)\n", r.space,
             r.fit, by, r.fit_by_split.count("even") ? r.fit_by_split.at("even") : 0,
             r.fit_by_split.count("balanced") ? r.fit_by_split.at("balanced") : 0);
  if (r.budget_ran_out) fmt::print("the budget ran out: these are the best found in {:.1f} s\n", r.elapsed_s);
  fmt::print("results: {}/plan.json, plan.md, plan-N/ and greedy-N/ (scenario.json, topology.json: wanlab run, bench "
             "and simulate take them)\n",
             out.string());
  return 0;
}

}  // namespace wanlab::cli
