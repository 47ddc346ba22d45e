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
// Training is not delayed by prefill here: each preemption costs the training op waiting
// for the layer under way, which is reported (training_wait_s_per_iteration, at most one
// layer per preemption) but not fed back into the timeline.
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
nlohmann::json simulate_prefill(const workload::Plan& plan, std::vector<program::WorkerReport>& reports,
                                const SimOptions& options = {});

}  // namespace wanlab::sim
