// The one loop over a bench's variants, for the lab, the simulator and the ns-3 reference.
#include "bench_runner.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "wanlab/common/version.hpp"

namespace wanlab::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Runner {
 public:
  Runner(BenchExecutor& ex, const BenchSetup& s)
      : ex_(ex),
        s_(s),
        variants_(s.scenario->prefill && ex.twins() ? bench::add_training_only_twins(s.variants) : s.variants),
        rounds_(std::max(1, s.rounds)),
        skipped_(s.skipped),
        runs_(variants_.size(), json::array()),
        first_(variants_.size()),
        entries_(variants_.size(), json::object()),
        given_up_(variants_.size(), false) {
    if (s.scenario->prefill) {
      training_only_ = *s.scenario;
      training_only_->prefill.reset();
    }
  }

  json run(int& rc) {
    for (int round = 1; round <= rounds_; ++round) {
      std::vector<json> summaries(variants_.size());  // this round's, of the runs that finished
      run_round(round, summaries);
      settle_round(round, summaries);
      if (stop_ || interrupted()) break;  // the later rounds are not listed one by one
    }
    auto result = assemble();
    try {
      write_text_file(s_.out / "bench.json", result.dump(2) + "\n");
      write_text_file(s_.out / "bench.md", bench::markdown(result));
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: {}: {}\n", s_.command, e.what());
      rc_ = 1;
    }
    ex_.finish(s_.out, result, rc_);
    rc = rc_;
    return result;
  }

 private:
  // Round `round`: every variant once, in bench::round_order (reversed in even rounds).
  void run_round(int round, std::vector<json>& summaries) {
    const auto order = bench::round_order(variants_.size(), round, rounds_);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      const auto& v = variants_[i];
      const auto name = round == 1 ? v.name : fmt::format("{}-run{}", v.name, round);
      const auto tag = rounds_ == 1 ? fmt::format("[{}/{}] {}", k + 1, variants_.size(), v.name)
                                    : fmt::format("[{}/{} round {}/{}] {}", k + 1, variants_.size(), round, rounds_,
                                                  v.name);
      if (given_up_[i]) {
        runs_[i].push_back(nullptr);
        continue;
      }
      if (stop_ || interrupted()) {
        skipped_.push_back({{"name", name}, {"reason", interrupted() ? "interrupted" : "the controller was lost"}});
        runs_[i].push_back(nullptr);
        continue;
      }
      const fs::path folder = s_.out / name;
      std::error_code ec;
      fs::remove_all(folder, ec);  // an earlier bench's run of this variant
      const auto special = s_.dp_across->find(v.placement);
      const workload::Scenario& scen = special != s_.dp_across->end() ? special->second
                                       : v.training_only              ? *training_only_
                                                                      : *s_.scenario;
      auto outcome = ex_.run(v, scen, folder, tag);
      if (outcome.rc == 0) {
        json row = {{"round", round},
                    {"folder", name},
                    {"iteration_time_s", outcome.summary.value("iteration_time_s", json())},
                    {"gpu_utilization", outcome.summary.value("gpu_utilization", json())},
                    {"bubble_fraction", outcome.summary.value("bubble_fraction", json())},
                    {"wan_utilization", bench::wan_utilization(outcome.summary)}};
        row.update(outcome.row);
        runs_[i].push_back(std::move(row));
        entries_[i] = std::move(outcome.entry);
        summaries[i] = std::move(outcome.summary);
        continue;
      }
      runs_[i].push_back(nullptr);
      if (outcome.rc == 130) {
        skipped_.push_back({{"name", name}, {"reason", "interrupted"}});
        rc_ = 130;
        continue;
      }
      if (!outcome.reported) fmt::print(stderr, "{}: {}: {}\n", tag, ex_.failed(), outcome.error);
      skipped_.push_back({{"name", name}, {"reason", outcome.error}});
      rc_ = 1;
      given_up_[i] = outcome.give_up || round == 1;  // refused the first time: it will be again
      stop_ = ex_.lost();  // nothing more can run without the controller
    }
  }

  // This round's runs (runs_[i].back()) that finished: with a prefill load, the slowdown
  // against the twin of this round (which ran before or after it), into the run's summary
  // too; a variant's first finished run is its bench.json entry.
  void settle_round(int round, std::vector<json>& summaries) {
    for (std::size_t i = 0; i < variants_.size(); ++i) {
      json& s = summaries[i];
      if (!s.is_object()) continue;
      const auto& v = variants_[i];
      const auto name = runs_[i].back().at("folder").get<std::string>();
      if (s.contains("prefill") && ex_.twins()) slowdown(round, i, s, name);
      if (!first_[i].is_null()) continue;
      first_[i] = {{"name", v.name},           {"policy", v.policy}, {"connections", v.connections},
                   {"placement", v.placement}, {"folder", name},     {"summary", std::move(s)}};
      if (v.training_only) first_[i]["training_only"] = true;
      first_[i].update(entries_[i]);
    }
  }

  void slowdown(int round, std::size_t i, json& s, const std::string& name) {
    const auto& v = variants_[i];
    for (std::size_t j = 0; j < variants_.size(); ++j)
      if (variants_[j].name == v.name + bench::kTrainingOnlySuffix && runs_[j].back().is_object())
        s["training_slowdown"] = bench::training_slowdown(s, runs_[j].back());
    fmt::print("[round {}/{}] {}: training slowdown {}\n", round, rounds_, v.name,
               s.value("training_slowdown", json()).is_number()
                   ? fmt::format("{:+.2f} % against {}{}", 100 * s["training_slowdown"].get<double>(), v.name,
                                 bench::kTrainingOnlySuffix)
                   : std::string("n/a (its twin did not run)"));
    if (s.contains("training_slowdown")) runs_[i].back()["training_slowdown"] = s["training_slowdown"];
    try {
      write_text_file(s_.out / name / "summary.json", s.dump(2) + "\n");
    } catch (const std::exception& e) {
      fmt::print(stderr, "wanlab: {}: {}\n", s_.command, e.what());
    }
  }

  json assemble() {
    json done = json::array();
    for (std::size_t i = 0; i < variants_.size(); ++i) {
      if (first_[i].is_null()) continue;
      if (rounds_ > 1) first_[i]["runs"] = runs_[i];
      done.push_back(std::move(first_[i]));
    }
    // Ratios against the baseline, when it ran.
    const auto baseline = bench::baseline_name(s_.connections);
    const json* base = nullptr;
    for (const auto& d : done)
      if (d.at("name") == baseline) base = &d.at("summary");
    for (auto& d : done) d["ratios"] = bench::ratios(d.at("summary"), base ? *base : json::object());
    if (rounds_ > 1) bench::add_repeat_ratios(done, baseline);
    const auto& scenario = *s_.scenario;
    json result = {{"scenario", scenario.name},
                   {"scenario_file", s_.scenario_file},
                   {"wanlab", build_info()},
                   {"lab", s_.topology->name},
                   {"topology", scenario.topology_path.string()},
                   {"scale", scenario.scale},
                   {"created_at", timestamp()},
                   {"baseline", baseline},
                   {"policies", s_.policies},
                   {"connections", s_.connections},
                   {"variants", std::move(done)},
                   {"skipped", skipped_}};
    if (rounds_ > 1) result["repeat"] = rounds_;
    ex_.describe(result);
    return result;
  }

  BenchExecutor& ex_;
  const BenchSetup& s_;
  const std::vector<bench::Variant> variants_;
  const int rounds_;
  std::optional<workload::Scenario> training_only_;
  json skipped_;
  // Each variant's runs, one per round (null: not run in that round).
  std::vector<json> runs_;
  std::vector<json> first_;    // the first finished run's bench.json entry
  std::vector<json> entries_;  // the executor's fields for the entry, of the latest finished run
  std::vector<bool> given_up_;
  bool stop_ = false;
  int rc_ = 0;
};

}  // namespace

json run_bench(BenchExecutor& executor, const BenchSetup& setup, int& rc) {
  return Runner(executor, setup).run(rc);
}

}  // namespace wanlab::cli
