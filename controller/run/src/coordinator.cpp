#include "wanlab/run/coordinator.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "wanlab/core/address_plan.hpp"

namespace wanlab::run {
namespace {

std::int64_t system_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

nlohmann::json msg(const std::string& type, const std::string& run) { return {{"v", 1}, {"type", type}, {"run", run}}; }

}  // namespace

std::string to_string(Phase p) {
  switch (p) {
    case Phase::agents: return "waiting_for_agents";
    case Phase::preparing: return "preparing";
    case Phase::connecting: return "connecting";
    case Phase::running: return "running";
    case Phase::done: return "done";
    case Phase::failed: return "failed";
  }
  return "?";
}

RunCoordinator::RunCoordinator(std::string run_id, workload::Plan plan, const core::Topology& topo,
                               CoordinatorOptions options, Clock::time_point now)
    : run_id_(std::move(run_id)), plan_(std::move(plan)), topo_(topo), options_(options), phase_since_(now),
      last_news_(now) {
  unix_now_ns = &system_now_ns;
  for (const auto& w : plan_.workers) {
    const auto node = core::node_name(topo_.dcs.at(w.dc), w.node);
    nodes_.insert(node);
    workers_of_node_[node].push_back(w.worker);
  }
  if (plan_.scenario.prefill) {
    prefill_.emplace(plan_, run_id_, static_cast<std::uint16_t>(options_.data_port + 1), options_.prefill_horizon_s);
    for (const auto& n : prefill_->nodes()) {
      nodes_.insert(n);
      workers_of_node_[n];  // a node may have a prefill role and no training worker
    }
  }
  progress_.assign(plan_.workers.size(), -1);
  reported_.assign(plan_.workers.size(), false);
  reports_.resize(plan_.workers.size());
}

std::string RunCoordinator::node_of(int worker) const {
  const auto& w = plan_.workers.at(static_cast<std::size_t>(worker));
  return core::node_name(topo_.dcs.at(w.dc), w.node);
}

nlohmann::json RunCoordinator::assignment(const std::string& node) const {
  const auto& mine = workers_of_node_.at(node);
  std::set<int> peers;
  nlohmann::json workers = nlohmann::json::array();
  for (int id : mine) {
    const auto i = static_cast<std::size_t>(id);
    const auto& prog = plan_.programs.at(i);
    for (const auto& op : prog.ops) {
      if (op.kind == program::OpKind::send || op.kind == program::OpKind::recv) peers.insert(op.peer);
      for (int r : op.ring) peers.insert(r);
    }
    workers.push_back({{"gpu", plan_.workers[i].gpu},
                       {"effective_flops", plan_.effective_flops.at(i)},
                       {"program", program::to_json(prog)}});
  }
  std::string dc;
  std::size_t my_dc = 0;
  int my_node = -1;
  for (std::size_t k = 0; k < topo_.dcs.size(); ++k)
    for (int n = 0; n < topo_.dcs[k].nodes; ++n)
      if (core::node_name(topo_.dcs[k], n) == node) {
        dc = topo_.dcs[k].name;
        my_dc = k;
        my_node = n;
      }
  nlohmann::json peer_list = nlohmann::json::array();
  for (int p : peers) {
    const auto& w = plan_.workers.at(static_cast<std::size_t>(p));
    const int k = static_cast<int>(w.dc);
    // A peer on another node of this DC's rails is reached on its GPU's rail (docs/rails.md).
    const bool rails = w.dc == my_dc && w.node != my_node && topo_.dcs.at(w.dc).fabric.kind == core::Fabric::Kind::rails;
    peer_list.push_back({{"worker", p},
                         {"node", node_of(p)},
                         {"dc", topo_.dcs.at(w.dc).name},
                         {"address", (rails ? core::rail_address(k, w.gpu, w.node) : core::node_address(k, w.node)).to_string()},
                         {"port", options_.data_port}});
  }
  nlohmann::json out{{"node", node},
          {"dc", dc},
          {"listen_port", options_.data_port},
          {"iterations", plan_.scenario.iterations},
          {"tp", plan_.scenario.parallelism.tp},
          {"compute", workload::to_string(plan_.scenario.compute)},
          {"connections", plan_.scenario.connections},
          {"windows", options_.windows},
          {"tcp_slow_start_after_idle", plan_.scenario.tcp_slow_start_after_idle},
          {"tcp_pacing", plan_.scenario.tcp_pacing},
          {"tcp_congestion", plan_.scenario.tcp_congestion},
          {"port_salt", options_.port_salt},
          {"workers", workers},
          {"peers", peer_list}};
  if (options_.windows) {
    // A window's transfer (tp x connections connections) leaves at the link's rate, not in
    // bursts of whole TCP windows that overflow the link's queue when the window opens.
    nlohmann::json pacing = nlohmann::json::object();
    const auto& sc = plan_.scenario;
    for (const auto& l : topo_.links)
      if (l.src == my_dc)
        pacing[topo_.dcs.at(l.dst).name] = static_cast<std::uint64_t>(std::llround(
            static_cast<double>(l.params.rate.bps) * sc.scale / 8 / (sc.parallelism.tp * sc.connections)));
    out["pacing"] = std::move(pacing);
  }
  if (plan_.scenario.tcp_window)
    out["tcp_window"] = static_cast<std::uint64_t>(std::llround(workload::run_tcp_window(plan_.scenario)));
  if (prefill_) out["prefill"] = prefill_->assignment(node);
  return out;
}

std::vector<Outgoing> RunCoordinator::to_all(const nlohmann::json& m) const {
  std::vector<Outgoing> out;
  for (const auto& n : joined_) out.push_back({n, m});
  return out;
}

std::vector<Outgoing> RunCoordinator::fail(const std::string& reason) {
  if (phase_ == Phase::done || phase_ == Phase::failed) return {};
  phase_ = Phase::failed;
  error_ = reason;
  auto m = msg("abort", run_id_);
  m["reason"] = reason;
  return to_all(m);
}

std::vector<Outgoing> RunCoordinator::abort(const std::string& reason) { return fail(reason); }

std::vector<Outgoing> RunCoordinator::agent_joined(const std::string& node, const nlohmann::json& hello,
                                                   Clock::time_point now) {
  if (!nodes_.count(node)) return {};  // an agent this run does not need stays idle
  if (phase_ != Phase::agents) {
    if (phase_ == Phase::done || phase_ == Phase::failed) return {};
    // An agent that comes back mid-run lost its state with its connection.
    return fail(fmt::format("the agent of node {} reconnected during the run (it had lost its controller "
                            "connection); its workers' state is gone",
                            node));
  }
  if (plan_.scenario.compute == workload::ComputeMode::cuda) {
    // Several emulated GPUs may share one real GPU: one is enough.
    if (hello.value("gpus", 0) < 1)
      return fail(fmt::format("scenario {} asks for compute \"cuda\" but node {} has no GPU{}; use \"modeled\"",
                              plan_.scenario.name, node,
                              hello.contains("gpu_reason") ? ": " + hello["gpu_reason"].get<std::string>() : ""));
  }
  joined_.insert(node);
  last_news_ = now;
  std::vector<Outgoing> out;
  if (joined_.size() == nodes_.size()) {
    phase_ = Phase::preparing;
    phase_since_ = now;
    for (const auto& n : nodes_) {
      auto m = msg("assign", run_id_);
      m["assignment"] = assignment(n);
      out.push_back({n, std::move(m)});
    }
  }
  return out;
}

std::vector<Outgoing> RunCoordinator::agent_left(const std::string& node, const std::string& reason,
                                                 Clock::time_point) {
  if (!joined_.count(node)) return {};
  joined_.erase(node);
  if (phase_ == Phase::done || phase_ == Phase::failed) return {};
  return fail(fmt::format("the agent of node {} went away: {}", node, reason));
}

std::vector<Outgoing> RunCoordinator::message(const std::string& node, const nlohmann::json& m, Clock::time_point now) {
  const auto type = m.value("type", std::string{});
  if (m.value("run", std::string{}) != run_id_ || !joined_.count(node)) return {};
  last_news_ = now;
  if (type == "failed") return fail(fmt::format("node {}: {}", node, m.value("message", std::string{"failed"})));
  if (phase_ == Phase::failed || phase_ == Phase::done) return {};
  std::vector<Outgoing> out;
  if (type == "ready" && phase_ == Phase::preparing) {
    ready_.insert(node);
    if (ready_.size() == nodes_.size()) {
      phase_ = Phase::connecting;
      phase_since_ = now;
      out = to_all(msg("connect", run_id_));
    }
  } else if (type == "connected" && phase_ == Phase::connecting) {
    connected_.insert(node);
    if (connected_.size() == nodes_.size()) {
      phase_ = Phase::running;
      phase_since_ = now;
      const auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.start_delay).count();
      start_unix_ns_ = unix_now_ns() + delay;
      auto s = msg("start", run_id_);
      s["delay_ms"] = options_.start_delay.count();
      s["at_unix_ns"] = *start_unix_ns_;
      out = to_all(s);
    }
  } else if (type == "progress" && phase_ == Phase::running) {
    const int w = m.value("worker", -1);
    if (w >= 0 && static_cast<std::size_t>(w) < progress_.size() && node_of(w) == node)
      progress_[static_cast<std::size_t>(w)] = std::max(progress_[static_cast<std::size_t>(w)], m.value("iteration", -1));
    if (prefill_) out = prefill_message(node, m);
  } else if ((type == "prefill_request" || type == "prefill_done" || type == "kv_received") &&
             phase_ == Phase::running && prefill_) {
    out = prefill_message(node, m);
  } else if (type == "report" && phase_ == Phase::running) {
    program::WorkerReport r;
    try {
      r = program::worker_report_from_json(m.at("report"));
    } catch (const std::exception& e) {
      return fail(fmt::format("node {} sent an unreadable report: {}", node, e.what()));
    }
    if (r.worker < 0 || static_cast<std::size_t>(r.worker) >= reports_.size() || node_of(r.worker) != node)
      return fail(fmt::format("node {} reported for worker {}, which is not one of its workers", node, r.worker));
    if (static_cast<int>(r.iterations.size()) != plan_.scenario.iterations)
      return fail(fmt::format("worker {} reported {} iterations of {}", r.worker, r.iterations.size(),
                              plan_.scenario.iterations));
    if (const auto t = m.find("tcp"); t != m.end() && !reported_[static_cast<std::size_t>(r.worker)]) {
      try {
        for (auto& s : tcp_samples_from_json(r.worker, *t)) tcp_.push_back(s);
      } catch (const std::exception& e) {
        return fail(fmt::format("node {} sent an unreadable report for worker {}: {}", node, r.worker, e.what()));
      }
    }
    const auto i = static_cast<std::size_t>(r.worker);
    progress_[i] = plan_.scenario.iterations - 1;
    reports_[i] = std::move(r);
    reported_[i] = true;
    if (std::all_of(reported_.begin(), reported_.end(), [](bool b) { return b; })) {
      phase_ = Phase::done;
      phase_since_ = now;
      out = to_all({{"v", 1}, {"type", "bye"}});
    }
  }
  return out;
}

std::vector<Outgoing> RunCoordinator::prefill_message(const std::string& node, const nlohmann::json& m) {
  std::vector<Outgoing> out;
  try {
    for (auto& p : prefill_->message(node, m, unix_now_ns() - start_unix_ns_.value_or(unix_now_ns())))
      out.push_back({p.node, std::move(p.message)});
  } catch (const std::exception& e) {
    return fail(fmt::format("node {} sent an unreadable {} message: {}", node, m.value("type", std::string{}), e.what()));
  }
  return out;
}

std::vector<Outgoing> RunCoordinator::tick(Clock::time_point now) {
  auto missing = [&](const std::set<std::string>& have) {
    std::vector<std::string> m;
    for (const auto& n : nodes_)
      if (!have.count(n)) m.push_back(n);
    return fmt::format("{}", fmt::join(m, ", "));
  };
  const auto in_phase = now - phase_since_;
  switch (phase_) {
    case Phase::agents:
      if (in_phase > options_.join_timeout)
        return fail(fmt::format("no agent for node(s) {} after {} s", missing(joined_),
                                options_.join_timeout.count() / 1000.0));
      break;
    case Phase::preparing:
      if (in_phase > options_.setup_timeout)
        return fail(fmt::format("node(s) {} did not get ready within {} s", missing(ready_),
                                options_.setup_timeout.count() / 1000.0));
      break;
    case Phase::connecting:
      if (in_phase > options_.setup_timeout)
        return fail(fmt::format("node(s) {} did not connect their workers within {} s", missing(connected_),
                                options_.setup_timeout.count() / 1000.0));
      break;
    case Phase::running:
      if (now - last_news_ > options_.stall_timeout)
        return fail(fmt::format("no progress from any worker for {} s", options_.stall_timeout.count() / 1000.0));
      break;
    default: break;
  }
  return {};
}

int RunCoordinator::iterations_done() const {
  int lo = plan_.scenario.iterations;
  for (int p : progress_) lo = std::min(lo, p + 1);
  return lo;
}

}  // namespace wanlab::run
