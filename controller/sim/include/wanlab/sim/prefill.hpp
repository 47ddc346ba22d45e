#pragma once
// BubbleTea in the simulator: a scenario's prefill load placed into the bubbles of a
// simulated run by the lab's own dispatcher (bubbletea::Dispatcher), on the run's clock.
//
// simulate() gives the training timeline; this pass replays it in time order. Each GPU's
// finished iteration is learned as in the lab (its recv waits and all-reduces are its
// bubbles; the first iteration is predicted from the simulated one itself, where the lab
// runs the plan uncontended), requests arrive as the scenario's seeded load generates them,
// and the queue is retried when the lab retries it (after a GPU's iteration, 64 requests;
// after a prefill ends, 4). A placed prefill runs on its GPU from its reserved start, in
// the GPU's actual idle time: where training computes it yields at the layer boundary (a
// preemption, as the agents do) and goes on in the next idle time; prefills on one GPU run
// one at a time. Its KV cache then goes to its DC's decode node: bytes / the path's rate
// plus its delay (LAN, or the WAN link to a decode node elsewhere), without contention.
//
// Each preemption costs the training op waiting for the layer under way (at most one layer
// per preemption; the TP group's op waits for the longest of its GPUs' waits), reported
// as training_wait_s_per_iteration. simulate_with_prefill() feeds those waits back into
// the simulated timeline (SimOptions::compute_delays): the op starts that much later, and
// everything that depends on it (its messages, the next stage, the all-reduce) with it,
// so the training slowdown is measured from iteration times as in the lab. The timeline
// with the delays moves the bubbles, and with them where prefill runs: the pass is run
// again on it, and the delays it finds are fed back, until they are the same as those fed
// in or `max_rounds` is reached (the last round's difference is reported).
#include <cstdint>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/program.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::sim {

/// Runs the prefill load of `plan.scenario.prefill` on the simulated run `reports` (every
/// worker, by worker id), adds a prefill span to a worker's report for every piece of
/// prefill its GPU ran, and returns summary.json's `prefill` part, as the lab writes it.
/// `options` gives the LAN rate (as simulate() used it). Requires a prefill section.
/// `delays`, if given, receives what each preempted training op waited (its TP group's,
/// ComputeOpKey), for SimOptions::compute_delays.
nlohmann::json simulate_prefill(const workload::Plan& plan, std::vector<program::WorkerReport>& reports,
                                const SimOptions& options = {},
                                std::map<ComputeOpKey, std::int64_t>* delays = nullptr);

/// The simulated run of a scenario with a prefill load, its waits fed back (above).
struct PrefillFeedback {
  SimResult result;                           // the last round's training timeline
  std::vector<program::WorkerReport> reports; // every worker's, with prefill spans
  nlohmann::json prefill;                     // summary.json's prefill part, with feedback
  int rounds = 0;                             // simulations run
  double fed_back_s_per_iteration = 0;        // delays fed into the last round, per TP group
  double residual_s_per_iteration = 0;        // |found - fed in| in the last round, per TP group
};
/// simulate(), then simulate_prefill(), then again with the waits found fed back, until
/// they are stable or `max_rounds` simulations have run. summary's
/// training_wait_s_per_iteration gets "fed_back": true where a round ran with delays and
/// "feedback": {rounds, fed_back_s_per_group, residual_s_per_group} (seconds per iteration).
PrefillFeedback simulate_with_prefill(const workload::Plan& plan, const SimOptions& options = {}, int max_rounds = 4);

}  // namespace wanlab::sim
