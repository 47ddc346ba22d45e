#include "wanlab/sim/prefill.hpp"

#include <algorithm>
#include <cmath>
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

// What a GPU is busy with, as disjoint intervals: start -> (end, training?).
struct Busy {
  std::map<Ns, std::pair<Ns, bool>> spans;
  void add(Ns start, Ns end, bool training) {
    if (end > start) spans[start] = {end, training};
  }
};

struct Event {
  Ns at = 0;
  std::uint64_t seq = 0;
  enum class Kind { iteration_end, arrival, finished } kind = Kind::arrival;
  int a = 0, b = 0;  // iteration_end: gpu, iteration; arrival: request; finished: request
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

}  // namespace

nlohmann::json simulate_prefill(const workload::Plan& plan, std::vector<program::WorkerReport>& reports,
                                const SimOptions& options) {
  const auto pp = workload::plan_prefill(plan);
  const auto& topo = plan.topology;
  bubbletea::Dispatcher dispatcher(bubbletea::dispatcher_gpus(pp, topo), {pp.spec.margin, 1'000'000, 2});
  const std::size_t ngpus = pp.gpus.size();

  Ns end = 0;
  for (const auto& r : reports)
    for (const auto& it : r.iterations) end = std::max(end, it.end_ns);
  const auto iterations = static_cast<std::size_t>(plan.scenario.iterations);
  const auto warmup = static_cast<std::size_t>(plan.scenario.warmup);
  std::vector<Ns> ends(iterations, 0);
  for (const auto& r : reports)
    for (std::size_t i = 0; i < std::min(iterations, r.iterations.size()); ++i)
      ends[i] = std::max(ends[i], r.iterations[i].end_ns);
  const Ns from = warmup == 0 || ends.empty() ? 0 : ends[warmup - 1];

  // Each GPU's training compute, and its first iteration's bubbles as the first prediction.
  std::vector<Busy> busy(ngpus);
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::uint64_t seq = 0;
  for (std::size_t g = 0; g < ngpus; ++g) {
    const int w = pp.gpus[g].worker;
    if (w < 0) continue;
    const auto& rep = reports.at(static_cast<std::size_t>(w));
    std::vector<bubbletea::Interval> first;
    for (const auto& s : rep.spans) {
      if (is_training_compute(s.kind)) busy[g].add(s.start_ns, s.end_ns, true);
      if (is_bubble(s.kind) && s.iteration == 0) first.push_back({s.start_ns, s.end_ns});
    }
    dispatcher.predict(static_cast<int>(g), std::move(first));
    for (std::size_t i = 0; i < rep.iterations.size(); ++i)
      events.push({rep.iterations[i].end_ns, seq++, Event::Kind::iteration_end, static_cast<int>(g), static_cast<int>(i)});
  }

  const auto arrivals = workload::prefill_arrivals(pp.spec, plan.scenario.seed, static_cast<double>(end) / 1e9);
  std::vector<bubbletea::Request> requests;
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    bubbletea::Request r;
    r.id = static_cast<int>(i);
    r.arrived_ns = static_cast<Ns>(std::llround(arrivals[i].at_s * 1e9));
    r.tokens = arrivals[i].prompt_tokens;
    r.flops = workload::prefill_cost(pp.spec.model, r.tokens).flops;
    r.deadline_ns = r.arrived_ns + static_cast<Ns>(pp.spec.deadline_s * 1e9);
    requests.push_back(r);
    events.push({r.arrived_ns, seq++, Event::Kind::arrival, r.id, 0});
  }

  // Where each DC's GPUs send their KV caches, and how long that takes (unscaled bytes at
  // unscaled rates: the same time as the scaled run's).
  std::unordered_map<std::string, std::size_t> dc_of_node;
  for (std::size_t dc = 0; dc < topo.dcs.size(); ++dc)
    for (int n = 0; n < topo.dcs[dc].nodes; ++n) dc_of_node[core::node_name(topo.dcs[dc], n)] = dc;
  const double scale = plan.scenario.scale > 0 ? plan.scenario.scale : 1.0;
  const double lan_bps = options.lan_rate_bps ? *options.lan_rate_bps / scale : static_cast<double>(topo.lan.rate.bps);
  auto kv_ns = [&](std::size_t gpu_dc, std::uint64_t bytes) -> Ns {
    const std::size_t to = dc_of_node.at(pp.decode_node_of_dc.at(gpu_dc));
    double rate = lan_bps;
    Ns delay = topo.lan.delay.count();
    if (to != gpu_dc) {
      const auto* l = topo.find_link(gpu_dc, to);
      rate = l ? static_cast<double>(l->params.rate.bps) : 0;
      delay = l ? l->params.delay.count() : 0;
    }
    return delay + (rate > 0 ? static_cast<Ns>(static_cast<double>(bytes) * 8 / rate * 1e9) : 0);
  };

  std::map<int, std::pair<std::size_t, int>> running;  // request -> (GPU, preemptions), until it finishes
  std::vector<double> training_wait_ns(ngpus, 0);
  auto iteration_of = [&](const program::WorkerReport& rep, Ns t) {
    int i = 0;
    while (static_cast<std::size_t>(i + 1) < rep.iterations.size() && rep.iterations[static_cast<std::size_t>(i)].end_ns <= t) ++i;
    return i;
  };

  // Runs a placed prefill in its GPU's idle time from its reserved start.
  auto execute = [&](const bubbletea::Placement& p) {
    const auto g = static_cast<std::size_t>(p.gpu);
    const auto& gpu = pp.gpus[g];
    const auto& req = requests.at(static_cast<std::size_t>(p.request));
    const auto cost = workload::prefill_cost(pp.spec.model, req.tokens);
    const double flops_per_ns = gpu.effective_flops / 1e9;
    Ns left = static_cast<Ns>(std::ceil(req.flops / flops_per_ns));
    const Ns layer = static_cast<Ns>(std::ceil(cost.flops_per_layer / flops_per_ns));
    auto& spans = busy[g].spans;
    Ns t = p.start_ns;
    std::optional<Ns> started;
    int preemptions = 0;
    while (left > 0 && t < end) {
      auto it = spans.upper_bound(t);
      if (it != spans.begin()) {
        auto prev = std::prev(it);
        if (prev->second.first > t) {  // busy at t: wait for the end
          t = prev->second.first;
          continue;
        }
      }
      const Ns gap_end = it == spans.end() ? end : it->first;
      const Ns run = std::min(left, gap_end - t);
      if (run <= 0) {
        t = gap_end;
        continue;
      }
      if (!started) started = t;
      busy[g].add(t, t + run, false);
      if (gpu.worker >= 0) {
        auto& rep = reports.at(static_cast<std::size_t>(gpu.worker));
        program::Span s;
        s.kind = SpanKind::prefill;
        s.iteration = iteration_of(rep, t);
        s.start_ns = t;
        s.end_ns = t + run;
        rep.spans.push_back(s);
      }
      left -= run;
      t += run;
      if (left > 0 && it != spans.end() && it->second.second) {
        // Training needs the GPU: it waits for the layer under way, then the prefill yields.
        ++preemptions;
        training_wait_ns[g] += static_cast<double>(std::min(layer, left));
      }
    }
    if (left > 0 || !started) return;  // not done by the end of the run
    running[p.request] = {g, preemptions};
    events.push({t, seq++, Event::Kind::finished, p.request, 0});
    dispatcher.started(p.request, *started);
  };
  auto execute_all = [&](const std::vector<bubbletea::Placement>& ps) {
    for (const auto& p : ps) execute(p);
  };

  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    switch (e.kind) {
      case Event::Kind::iteration_end: {
        const auto g = static_cast<std::size_t>(e.a);
        const auto& rep = reports.at(static_cast<std::size_t>(pp.gpus[g].worker));
        const auto& it = rep.iterations.at(static_cast<std::size_t>(e.b));
        std::vector<bubbletea::Interval> idle;
        for (const auto& s : rep.spans)
          if (is_bubble(s.kind) && s.iteration == e.b) idle.push_back({s.start_ns, s.end_ns});
        dispatcher.learn(e.a, it.start_ns, it.end_ns, idle);
        if (dispatcher.queued() > 0) execute_all(dispatcher.retry(e.at, 64));
        break;
      }
      case Event::Kind::arrival:
        if (auto p = dispatcher.request(requests.at(static_cast<std::size_t>(e.a)), e.at)) execute(*p);
        break;
      case Event::Kind::finished: {
        const auto [g, preemptions] = running.at(e.a);
        dispatcher.finished(e.a, e.at, preemptions);
        const auto& req = requests.at(static_cast<std::size_t>(e.a));
        dispatcher.kv_delivered(e.a, e.at + kv_ns(pp.gpus[g].dc, workload::prefill_cost(pp.spec.model, req.tokens).kv_bytes));
        running.erase(e.a);
        if (dispatcher.queued() > 0) execute_all(dispatcher.retry(e.at, 4));
        break;
      }
    }
  }

  for (auto& rep : reports)
    std::sort(rep.spans.begin(), rep.spans.end(),
              [](const program::Span& x, const program::Span& y) { return x.start_ns < y.start_ns; });

  auto s = dispatcher.summary(from, end);
  double sum = 0, max = 0;
  std::size_t training_gpus = 0;
  for (std::size_t g = 0; g < ngpus; ++g) {
    if (pp.gpus[g].worker < 0) continue;
    ++training_gpus;
    const double per_iteration = training_wait_ns[g] / 1e9 / static_cast<double>(iterations);
    sum += per_iteration;
    max = std::max(max, per_iteration);
  }
  s["training_wait_s_per_iteration"] = {{"mean", training_gpus ? sum / static_cast<double>(training_gpus) : 0.0},
                                        {"max", max},
                                        {"fed_back", false}};
  s.update(workload::prefill_load_summary(pp));
  return s;
}

}  // namespace wanlab::sim
