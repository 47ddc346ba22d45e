#include "wanlab/sim/prefill.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <queue>
#include <unordered_map>

#include "wanlab/bubbletea/dispatcher.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/workload/prefill.hpp"

namespace wanlab::sim {
namespace {

using bubbletea::Ns;
using program::SpanKind;

bool is_training_compute(SpanKind k) {
  return k == SpanKind::forward || k == SpanKind::backward || k == SpanKind::optimizer;
}
bool is_bubble(SpanKind k) { return k == SpanKind::recv_wait || k == SpanKind::allreduce; }

// What a GPU is busy with, as disjoint intervals: start -> (end, training?), and for
// training compute, which op it is.
struct Busy {
  struct Span {
    Ns end = 0;
    bool training = false;
    ComputeOpKey op;
  };
  std::map<Ns, Span> spans;
  void add(Ns start, Ns end, bool training, ComputeOpKey op = {}) {
    if (end > start) spans[start] = {end, training, op};
  }
};

struct Event {
  Ns at = 0;
  std::uint64_t seq = 0;
  enum class Kind { iteration_end, arrival, finished } kind = Kind::arrival;
  int a = 0, b = 0;  // iteration_end: gpu, iteration; arrival: request; finished: request
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

// One prefill pass over a simulated run's reports (simulate_prefill()).
class PrefillRun {
 public:
  PrefillRun(const workload::Plan& plan, std::vector<program::WorkerReport>& reports, const SimOptions& options)
      : options_(options),
        plan_(plan),
        reports_(reports),
        pp_(workload::plan_prefill(plan)),
        topo_(plan.topology),
        dispatcher_(bubbletea::dispatcher_gpus(pp_, topo_), {pp_.spec.margin, 1'000'000, 2}),
        ngpus_(pp_.gpus.size()),
        iterations_(static_cast<std::size_t>(plan.scenario.iterations)),
        busy_(ngpus_),
        training_wait_ns_(ngpus_, 0) {
    for (const auto& r : reports_)
      for (const auto& it : r.iterations) end_ = std::max(end_, it.end_ns);
    const auto warmup = static_cast<std::size_t>(plan.scenario.warmup);
    std::vector<Ns> ends(iterations_, 0);
    for (const auto& r : reports_)
      for (std::size_t i = 0; i < std::min(iterations_, r.iterations.size()); ++i)
        ends[i] = std::max(ends[i], r.iterations[i].end_ns);
    from_ = warmup == 0 || ends.empty() ? 0 : ends[warmup - 1];
    load_training();
    load_requests();
    // Where each DC's GPUs send their KV caches (kv_ns()).
    for (std::size_t dc = 0; dc < topo_.dcs.size(); ++dc)
      for (int n = 0; n < topo_.dcs[dc].nodes; ++n) dc_of_node_[core::node_name(topo_.dcs[dc], n)] = dc;
    const double scale = plan.scenario.scale > 0 ? plan.scenario.scale : 1.0;
    lan_bps_ = options.lan_rate_bps ? *options.lan_rate_bps / scale : static_cast<double>(topo_.lan.rate.bps);
  }

  nlohmann::json run() {
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      handle(e);
    }
    for (auto& rep : reports_)
      std::sort(rep.spans.begin(), rep.spans.end(),
                [](const program::Span& x, const program::Span& y) { return x.start_ns < y.start_ns; });
    return summary();
  }

 private:
  // Each GPU's training compute, and its first iteration's bubbles as the first prediction.
  void load_training() {
    for (std::size_t g = 0; g < ngpus_; ++g) {
      const int w = pp_.gpus[g].worker;
      if (w < 0) continue;
      const auto& rep = reports_.at(static_cast<std::size_t>(w));
      std::vector<bubbletea::Interval> first;
      for (const auto& s : rep.spans) {
        if (is_training_compute(s.kind))
          busy_[g].add(s.start_ns, s.end_ns, true, ComputeOpKey{w - tp_rank(w), s.iteration, s.kind, s.microbatch});
        if (is_bubble(s.kind) && s.iteration == 0) first.push_back({s.start_ns, s.end_ns});
      }
      dispatcher_.predict(static_cast<int>(g), std::move(first));
      for (std::size_t i = 0; i < rep.iterations.size(); ++i)
        events_.push(
            {rep.iterations[i].end_ns, seq_++, Event::Kind::iteration_end, static_cast<int>(g), static_cast<int>(i)});
    }
  }

  void load_requests() {
    const auto arrivals = workload::prefill_arrivals(pp_.spec, plan_.scenario.seed, static_cast<double>(end_) / 1e9);
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
      bubbletea::Request r;
      r.id = static_cast<int>(i);
      r.arrived_ns = static_cast<Ns>(std::llround(arrivals[i].at_s * 1e9));
      r.tokens = arrivals[i].prompt_tokens;
      r.flops = workload::prefill_cost(pp_.spec.model, r.tokens).flops;
      r.deadline_ns = r.arrived_ns + static_cast<Ns>(pp_.spec.deadline_s * 1e9);
      requests_.push_back(r);
      events_.push({r.arrived_ns, seq_++, Event::Kind::arrival, r.id, 0});
    }
  }

  // How long a KV cache of `bytes` takes from a GPU in `gpu_dc` to its decode node (unscaled
  // bytes at unscaled rates: the same time as the scaled run's).
  Ns kv_ns(std::size_t gpu_dc, std::uint64_t bytes) const {
    const std::size_t to = dc_of_node_.at(pp_.decode_node_of_dc.at(gpu_dc));
    double rate = lan_bps_;
    Ns delay = topo_.lan.delay.count();
    if (to != gpu_dc) {
      const auto* l = topo_.find_link(gpu_dc, to);
      rate = l ? static_cast<double>(l->params.rate.bps) : 0;
      delay = l ? l->params.delay.count() : 0;
    }
    return delay + (rate > 0 ? static_cast<Ns>(static_cast<double>(bytes) * 8 / rate * 1e9) : 0);
  }

  int tp_rank(int worker) const { return plan_.programs.at(static_cast<std::size_t>(worker)).tp_rank; }

 public:
  const std::map<ComputeOpKey, std::int64_t>& delays() const { return delays_; }

 private:
  static int iteration_of(const program::WorkerReport& rep, Ns t) {
    int i = 0;
    while (static_cast<std::size_t>(i + 1) < rep.iterations.size() && rep.iterations[static_cast<std::size_t>(i)].end_ns <= t)
      ++i;
    return i;
  }

  // Runs a placed prefill in its GPU's idle time from its reserved start.
  void execute(const bubbletea::Placement& p) {
    const auto g = static_cast<std::size_t>(p.gpu);
    const auto& gpu = pp_.gpus[g];
    const auto& req = requests_.at(static_cast<std::size_t>(p.request));
    const auto cost = workload::prefill_cost(pp_.spec.model, req.tokens);
    const double flops_per_ns = gpu.effective_flops / 1e9;
    Ns left = static_cast<Ns>(std::ceil(req.flops / flops_per_ns));
    const Ns layer = static_cast<Ns>(std::ceil(cost.flops_per_layer / flops_per_ns));
    auto& spans = busy_[g].spans;
    Ns t = p.start_ns;
    std::optional<Ns> started;
    int preemptions = 0;
    while (left > 0 && t < end_) {
      auto it = spans.upper_bound(t);
      if (it != spans.begin()) {
        auto prev = std::prev(it);
        if (prev->second.end > t) {  // busy at t: wait for the end
          t = prev->second.end;
          continue;
        }
      }
      const Ns gap_end = it == spans.end() ? end_ : it->first;
      const Ns run = std::min(left, gap_end - t);
      if (run <= 0) {
        t = gap_end;
        continue;
      }
      if (!started) started = t;
      busy_[g].add(t, t + run, false);
      if (gpu.worker >= 0) {
        auto& rep = reports_.at(static_cast<std::size_t>(gpu.worker));
        program::Span s;
        s.kind = SpanKind::prefill;
        s.iteration = iteration_of(rep, t);
        s.start_ns = t;
        s.end_ns = t + run;
        rep.spans.push_back(s);
      }
      left -= run;
      t += run;
      if (left > 0 && it != spans.end() && it->second.training) {
        // Training needs the GPU: it waits for the layer under way, then the prefill yields.
        ++preemptions;
        const Ns wait = std::min(layer, left);
        training_wait_ns_[g] += static_cast<double>(wait);
        // The TP group's op waits for the slowest of its GPUs.
        auto& d = delays_[it->second.op];
        d = std::max(d, wait);
      }
    }
    if (left > 0 || !started) return;  // not done by the end of the run
    running_[p.request] = {g, preemptions};
    events_.push({t, seq_++, Event::Kind::finished, p.request, 0});
    dispatcher_.started(p.request, *started);
  }

  void execute_all(const std::vector<bubbletea::Placement>& ps) {
    for (const auto& p : ps) execute(p);
  }

  void handle(const Event& e) {
    switch (e.kind) {
      case Event::Kind::iteration_end: {
        const auto g = static_cast<std::size_t>(e.a);
        const auto& rep = reports_.at(static_cast<std::size_t>(pp_.gpus[g].worker));
        const auto& it = rep.iterations.at(static_cast<std::size_t>(e.b));
        std::vector<bubbletea::Interval> idle;
        for (const auto& s : rep.spans)
          if (is_bubble(s.kind) && s.iteration == e.b) idle.push_back({s.start_ns, s.end_ns});
        dispatcher_.learn(e.a, it.start_ns, it.end_ns, idle);
        if (dispatcher_.queued() > 0) execute_all(dispatcher_.retry(e.at, 64));
        break;
      }
      case Event::Kind::arrival:
        if (auto p = dispatcher_.request(requests_.at(static_cast<std::size_t>(e.a)), e.at)) execute(*p);
        break;
      case Event::Kind::finished: {
        const auto [g, preemptions] = running_.at(e.a);
        dispatcher_.finished(e.a, e.at, preemptions);
        const auto& req = requests_.at(static_cast<std::size_t>(e.a));
        dispatcher_.kv_delivered(
            e.a, e.at + kv_ns(pp_.gpus[g].dc, workload::prefill_cost(pp_.spec.model, req.tokens).kv_bytes));
        running_.erase(e.a);
        if (dispatcher_.queued() > 0) execute_all(dispatcher_.retry(e.at, 4));
        break;
      }
    }
  }

  nlohmann::json summary() {
    auto s = dispatcher_.summary(from_, end_);
    double sum = 0, max = 0;
    std::size_t training_gpus = 0;
    for (std::size_t g = 0; g < ngpus_; ++g) {
      if (pp_.gpus[g].worker < 0) continue;
      ++training_gpus;
      const double per_iteration = training_wait_ns_[g] / 1e9 / static_cast<double>(iterations_);
      sum += per_iteration;
      max = std::max(max, per_iteration);
    }
    s["training_wait_s_per_iteration"] = {{"mean", training_gpus ? sum / static_cast<double>(training_gpus) : 0.0},
                                          {"max", max},
                                          {"fed_back", !options_.compute_delays.empty()}};
    s.update(workload::prefill_load_summary(pp_));
    return s;
  }

  const SimOptions& options_;
  const workload::Plan& plan_;
  std::vector<program::WorkerReport>& reports_;
  const workload::PrefillPlan pp_;
  const core::Topology& topo_;
  bubbletea::Dispatcher dispatcher_;
  const std::size_t ngpus_;
  const std::size_t iterations_;
  Ns end_ = 0;
  Ns from_ = 0;
  std::vector<Busy> busy_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  std::vector<bubbletea::Request> requests_;
  std::unordered_map<std::string, std::size_t> dc_of_node_;
  double lan_bps_ = 0;
  std::map<int, std::pair<std::size_t, int>> running_;  // request -> (GPU, preemptions), until it finishes
  std::vector<double> training_wait_ns_;
  std::map<ComputeOpKey, std::int64_t> delays_;  // what each preempted training op waited
};

}  // namespace

nlohmann::json simulate_prefill(const workload::Plan& plan, std::vector<program::WorkerReport>& reports,
                                const SimOptions& options, std::map<ComputeOpKey, std::int64_t>* delays) {
  PrefillRun run(plan, reports, options);
  auto summary = run.run();
  if (delays) *delays = run.delays();
  return summary;
}

PrefillFeedback simulate_with_prefill(const workload::Plan& plan, const SimOptions& options, int max_rounds) {
  PrefillFeedback out;
  SimOptions opt = options;
  opt.compute_delays.clear();
  const double iterations = std::max(1, plan.scenario.iterations);
  for (int round = 1;; ++round) {
    out.result = simulate(plan, opt);
    out.reports = out.result.reports();
    std::map<ComputeOpKey, std::int64_t> found;
    out.prefill = simulate_prefill(plan, out.reports, opt, &found);
    out.rounds = round;
    // How far what this timeline's prefill makes training wait is from what was fed in.
    double residual = 0;
    for (const auto& [k, d] : found) {
      const auto it = opt.compute_delays.find(k);
      residual += static_cast<double>(std::llabs(d - (it == opt.compute_delays.end() ? 0 : it->second)));
    }
    for (const auto& [k, d] : opt.compute_delays)
      if (!found.contains(k)) residual += static_cast<double>(d);
    std::int64_t total = 0;
    for (const auto& [k, d] : opt.compute_delays) total += d;
    const double groups = static_cast<double>(out.result.groups.size());
    out.fed_back_s_per_iteration = static_cast<double>(total) / 1e9 / iterations / std::max(1.0, groups);
    out.residual_s_per_iteration = residual / 1e9 / iterations / std::max(1.0, groups);
    if (found.empty() || found == opt.compute_delays || round >= max_rounds) break;
    opt.compute_delays = std::move(found);
  }
  out.prefill["training_wait_s_per_iteration"]["feedback"] = {
      {"rounds", out.rounds},
      {"fed_back_s_per_group", out.fed_back_s_per_iteration},
      {"residual_s_per_group", out.residual_s_per_iteration}};
  return out;
}

}  // namespace wanlab::sim
