#pragma once
// Shared by the test_sim_*.cpp tests of the simulator's parts: a two-DC plan, and a small
// event loop that runs one burst model alone (what simulator.cpp does around it).
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "test_workload_fixtures.hpp"
#include "wanlab/sim/burst_model.hpp"
#include "wanlab/workload/execute.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::sim::testing {

/// DCs a and b, one single-GPU node each (WAN 1 Gbit/s, RTT 20 ms), two stages, one
/// micro-batch, one iteration.
inline workload::Plan two_dc_plan(int connections = 1) {
  auto topo = workload::testing::lab({{{"name", "a"}, {"nodes", 1}, {"gpus_per_node", 1}},
                                      {{"name", "b"}, {"nodes", 1}, {"gpus_per_node", 1}}});
  auto s = workload::testing::scenario(2, 1, 1, 1);
  s.iterations = 1;
  s.warmup = 0;
  s.connections = connections;
  return workload::build_plan(s, topo);
}

/// One burst model over a SimContext, with messages put on link 0 (a -> b) by hand: each
/// on connections of its own, delivered when the model says so.
class BurstRig final : public BurstHost {
 public:
  BurstRig(workload::Plan p, SimOptions o)
      : plan(std::move(p)), opt(std::move(o)), ctx(plan, opt), model(make_burst_model(ctx, *this)) {}

  void release_connections(std::uint32_t id, Nanos, Nanos) override {
    released.push_back(id);
    ctx.messages[id].conn->busy = false;
  }

  /// A message of `wire` bytes on link 0 sent at `now` (on connections of its own, or
  /// `on`, which must be free): whether the model took it.
  bool send(double wire, Nanos now = 0, Connection* on = nullptr) {
    Message m;
    m.src = 0;
    m.dst = 1;
    m.link = 0;
    m.delay = ctx.wan_delay[0];
    m.ceiling = ctx.wan_ceiling[0];
    m.payload = wire / workload::kWireOverhead;
    if (!on) on = &connections.emplace_back();
    on->busy = true;
    m.conn = on;
    m.transfer = static_cast<arbiter::TransferId>(ctx.wire.size());
    ctx.wire.emplace_back();
    const auto id = static_cast<std::uint32_t>(ctx.messages.size());
    ctx.messages.push_back(m);
    return model->start(id, {ctx.wan[0]}, now, -1);
  }

  /// Runs until nothing is left; returns the last instant.
  Nanos run(Nanos now = 0) {
    for (;;) {
      for (int pass = 0; pass < 100; ++pass) {
        bool any = false;
        ctx.net.take_finished(now, finished_);
        for (const auto f : finished_) {
          any = true;
          const auto o = ctx.owners.at(f);
          if (o.ack || o.collective) continue;
          if (o.paced) {
            model->flow_done(o, now);
            continue;
          }
          if (model->flow_done(o, now)) delivered[o.index] = now + ctx.messages[o.index].delay;
        }
        while (!ctx.events.empty() && ctx.events.next_at() <= now) {
          const auto e = ctx.events.pop();
          any = true;
          if (const auto* d = std::get_if<ev::Deliver>(&e.event))
            delivered[d->message] = now;
          else
            model->handle(e.event, now);
        }
        model->end_of_pass(now);
        ctx.net.update(now);
        const auto f = ctx.net.next_finish();
        if (!any && !(f && *f <= now)) break;
      }
      std::optional<Nanos> next;
      if (!ctx.events.empty()) next = ctx.events.next_at();
      if (const auto f = ctx.net.next_finish(); f && (!next || *f < *next)) next = f;
      if (!next) break;
      now = std::max(now, *next);
    }
    model->finish(now);
    return now;
  }

  workload::Plan plan;
  SimOptions opt;
  SimContext ctx;
  std::unique_ptr<BurstModel> model;
  std::deque<Connection> connections;  // one per message (a deque: they stay put)
  std::map<std::uint32_t, Nanos> delivered;
  std::vector<std::uint32_t> released;

 private:
  std::vector<FlowNetwork::FlowId> finished_;
};

}  // namespace wanlab::sim::testing
