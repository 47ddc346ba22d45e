#include "wanlab/run/prefill_service.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "wanlab/core/address_plan.hpp"
#include "wanlab/workload/execute.hpp"

namespace wanlab::run {
namespace {

nlohmann::json msg(const std::string& type, const std::string& run) { return {{"v", 1}, {"type", type}, {"run", run}}; }

}  // namespace

PrefillService::PrefillService(const workload::Plan& plan, std::string run_id, std::uint16_t port, double horizon_s)
    : plan_(workload::plan_prefill(plan)), run_id_(std::move(run_id)), port_(port),
      dispatcher_(bubbletea::dispatcher_gpus(plan_, plan.topology), {plan_.spec.margin, 1'000'000, 2}) {
  arrivals_ = workload::prefill_arrivals(plan_.spec, plan.scenario.seed, horizon_s);
  for (std::size_t dc = 0; dc < plan.topology.dcs.size(); ++dc)
    for (int n = 0; n < plan.topology.dcs[dc].nodes; ++n)
      address_[core::node_name(plan.topology.dcs[dc], n)] = core::node_address(static_cast<int>(dc), n).to_string();
  for (std::size_t i = 0; i < plan_.gpus.size(); ++i)
    if (plan_.gpus[i].worker >= 0) gpu_of_worker_[plan_.gpus[i].worker] = static_cast<int>(i);
  iterations_ = plan.scenario.iterations;
  const auto& m = plan_.spec.model;
  layer_shape_ = program::StageShape{1, 0, m.hidden, m.ffn_hidden, m.heads, m.kv_heads, 0, 0, m.gated_mlp, 1};
  // Until an iteration has been seen, the plan run on a virtual clock without contention
  // predicts the run (optimistic: the lab's first iteration is slower).
  try {
    const auto reports = workload::execute(plan.programs, plan.scenario.iterations, workload::modeled_compute(plan),
                                           workload::uncontended_comm(plan));
    for (const auto& r : reports) {
      const auto it = gpu_of_worker_.find(r.worker);
      if (it == gpu_of_worker_.end()) continue;
      std::vector<bubbletea::Interval> idle;
      for (const auto& s : r.spans)
        if (s.kind == program::SpanKind::recv_wait || s.kind == program::SpanKind::allreduce)
          idle.push_back({s.start_ns, s.end_ns});
      dispatcher_.predict(it->second, std::move(idle));
    }
  } catch (const std::exception& e) {
    spdlog::warn("prefill: no initial bubble prediction: {}", e.what());
  }
}

std::set<std::string> PrefillService::nodes() const {
  std::set<std::string> out{plan_.loadgen_node};
  out.insert(plan_.decode_nodes.begin(), plan_.decode_nodes.end());
  for (const auto& g : plan_.gpus) out.insert(g.node);
  return out;
}

nlohmann::json PrefillService::assignment(const std::string& node) const {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : plan_.gpus)
    if (g.node == node) gpus.push_back({{"slot", g.slot}, {"worker", g.worker}, {"effective_flops", g.effective_flops}});
  nlohmann::json out{{"port", port_}, {"gpus", gpus}, {"decode", std::count(plan_.decode_nodes.begin(), plan_.decode_nodes.end(), node) > 0}};
  if (node == plan_.loadgen_node) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : arrivals_) a.push_back({r.at_s, r.prompt_tokens});
    out["loadgen"] = {{"arrivals", std::move(a)}};
  }
  return out;
}

std::vector<PrefillMessage> PrefillService::place(const bubbletea::Placement& p) {
  const auto& r = requests_.at(p.request);
  const auto& g = plan_.gpus.at(static_cast<std::size_t>(p.gpu));
  const auto cost = workload::prefill_cost(plan_.spec.model, r.tokens);
  const auto scaled = [&](std::uint64_t b) {
    return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(static_cast<double>(b) * plan_.bytes_scale)));
  };
  auto shape = layer_shape_;
  shape.tokens = r.tokens;
  shape.seq_len = r.tokens;
  auto placed = msg("prefill", run_id_);
  placed["id"] = p.request;
  placed["slot"] = g.slot;
  placed["start_ns"] = p.start_ns;
  placed["tokens"] = r.tokens;
  placed["layers"] = cost.layers;
  placed["flops_per_layer"] = cost.flops_per_layer;
  placed["layer_shape"] = program::to_json(shape);
  placed["kv_bytes"] = scaled(cost.kv_bytes);
  placed["decode"] = {{"address", address_.at(plan_.decode_node_of_dc.at(g.dc))}, {"port", port_}};
  auto prompt = msg("prompt", run_id_);
  prompt["id"] = p.request;
  prompt["address"] = address_.at(g.node);
  prompt["port"] = port_;
  prompt["bytes"] = scaled(cost.prompt_bytes);
  return {{g.node, std::move(placed)}, {plan_.loadgen_node, std::move(prompt)}};
}

std::vector<PrefillMessage> PrefillService::message(const std::string& node, const nlohmann::json& m,
                                                    bubbletea::Ns now) {
  const auto type = m.value("type", std::string{});
  std::vector<PrefillMessage> out;
  const auto append = [&](const std::vector<bubbletea::Placement>& ps) {
    for (const auto& p : ps)
      for (auto& o : place(p)) out.push_back(std::move(o));
  };
  if (type == "prefill_request" && node == plan_.loadgen_node) {
    bubbletea::Request r;
    r.id = m.at("id").get<int>();
    r.arrived_ns = m.at("at_ns").get<bubbletea::Ns>();
    r.tokens = m.at("tokens").get<int>();
    r.flops = workload::prefill_cost(plan_.spec.model, r.tokens).flops;
    r.deadline_ns = r.arrived_ns + static_cast<bubbletea::Ns>(plan_.spec.deadline_s * 1e9);
    if (requests_.count(r.id)) return {};
    requests_[r.id] = r;
    if (auto p = dispatcher_.request(r, now)) append({*p});
  } else if (type == "progress") {
    const auto it = gpu_of_worker_.find(m.value("worker", -1));
    if (it == gpu_of_worker_.end() || !m.contains("idle")) return {};
    if (m.contains("prefill_wait_ns")) prefill_wait_ns_[m.at("worker").get<int>()] = m.at("prefill_wait_ns").get<std::int64_t>();
    if (m.contains("prefill_wait_after_resume_ns"))
      prefill_wait_after_resume_ns_[m.at("worker").get<int>()] = m.at("prefill_wait_after_resume_ns").get<std::int64_t>();
    std::vector<bubbletea::Interval> idle;
    for (const auto& i : m.at("idle")) idle.push_back({i.at(0).get<bubbletea::Ns>(), i.at(1).get<bubbletea::Ns>()});
    dispatcher_.learn(it->second, m.at("start_ns").get<bubbletea::Ns>(), m.at("end_ns").get<bubbletea::Ns>(), idle);
    if (dispatcher_.queued() > 0) append(dispatcher_.retry(now, 64));
  } else if (type == "prefill_done") {
    const int id = m.at("id").get<int>();
    if (m.value("complete", false)) {
      dispatcher_.started(id, m.at("started_ns").get<bubbletea::Ns>());
      dispatcher_.finished(id, m.at("finished_ns").get<bubbletea::Ns>(), m.value("preemptions", 0));
      // One reservation freed: room for a few queued requests at most (this runs per prefill).
      if (dispatcher_.queued() > 0) append(dispatcher_.retry(now, 4));
    }
  } else if (type == "kv_received") {
    dispatcher_.kv_delivered(m.at("id").get<int>(), now);
  }
  return out;
}

nlohmann::json PrefillService::summary(bubbletea::Ns from, bubbletea::Ns to) const {
  auto s = dispatcher_.summary(from, to);
  // The interference at the GPUs: how long training waited for a prefill layer to end.
  double sum = 0, max = 0;
  for (const auto& [w, ns] : prefill_wait_ns_) {
    const double per_iteration = static_cast<double>(ns) / 1e9 / iterations_;
    sum += per_iteration;
    max = std::max(max, per_iteration);
  }
  double after_resume = 0;
  for (const auto& [w, ns] : prefill_wait_after_resume_ns_) after_resume += static_cast<double>(ns) / 1e9 / iterations_;
  const std::size_t gpus = gpu_of_worker_.size();
  const auto per_gpu = [&](double x) { return gpus ? x / static_cast<double>(gpus) : 0.0; };
  s["training_wait_s_per_iteration"] = {
      {"mean", per_gpu(sum)}, {"max", max}, {"after_expected_end_mean", per_gpu(after_resume)}};
  s.update(workload::prefill_load_summary(plan_));
  return s;
}

}  // namespace wanlab::run
