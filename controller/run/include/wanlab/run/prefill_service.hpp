#pragma once
// A run's BubbleTea side, pure like the coordinator it belongs to: which nodes take part
// (the load generator, the decode node, dedicated inference nodes besides the training
// ones), what each agent's assignment says about prefill, and the request flow:
//   prefill_request (load generator) -> the dispatcher places it -> `prefill` to the GPU's
//   node and `prompt` to the load generator (which sends the prompt bytes to that node)
//   -> prefill_done (GPU node; it sends the KV cache to the decode node) -> kv_received.
// Progress reports renew the dispatcher's bubble predictions.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/bubbletea/dispatcher.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/prefill.hpp"

namespace wanlab::run {

struct PrefillMessage {
  std::string node;
  nlohmann::json message;
};

class PrefillService {
 public:
  /// `horizon_s`: how far ahead the load generator's arrivals are drawn.
  PrefillService(const workload::Plan& plan, std::string run_id, std::uint16_t port, double horizon_s);

  /// Every node with a prefill role.
  std::set<std::string> nodes() const;
  /// The `prefill` part of `node`'s assignment (null: none).
  nlohmann::json assignment(const std::string& node) const;
  /// A message from an agent at `now_ns` on the run's clock.
  std::vector<PrefillMessage> message(const std::string& node, const nlohmann::json& msg, bubbletea::Ns now_ns);
  /// summary.json's `prefill`: the dispatcher's counts, times within [from, to) of the run clock.
  nlohmann::json summary(bubbletea::Ns from, bubbletea::Ns to) const;
  std::size_t arrivals() const { return arrivals_.size(); }
  /// Per GPU index of the dispatcher, the training worker (-1: dedicated).
  const workload::PrefillPlan& plan() const { return plan_; }

 private:
  std::vector<PrefillMessage> place(const bubbletea::Placement& p);

  workload::PrefillPlan plan_;
  std::string run_id_;
  std::uint16_t port_;
  std::vector<workload::PrefillArrival> arrivals_;
  std::map<std::string, std::string> address_;  // node -> IPv4
  std::map<int, int> gpu_of_worker_;           // training worker -> dispatcher GPU index
  bubbletea::Dispatcher dispatcher_;
  std::map<int, bubbletea::Request> requests_;
  program::StageShape layer_shape_;  // per request: tokens filled in
  int iterations_ = 1;
  std::map<int, std::int64_t> prefill_wait_ns_;  // per training worker: how long it waited for prefill layers
  // Of that, in idle times that ran past their expected end (layers had started again).
  std::map<int, std::int64_t> prefill_wait_after_resume_ns_;
};

}  // namespace wanlab::run
