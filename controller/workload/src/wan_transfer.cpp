#include "wanlab/workload/wan_transfer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace wanlab::workload {

arbiter::TransferSpec transfer_request(const Plan& plan, const WanMessage& m) {
  const auto& ws = plan.workers.at(static_cast<std::size_t>(m.src));
  const auto& wd = plan.workers.at(static_cast<std::size_t>(m.dst));
  arbiter::TransferSpec spec;
  spec.link = {ws.dc, wd.dc};
  spec.bytes = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(m.payload_bytes * kWireOverhead)));
  spec.kind = m.kind;
  spec.iteration = m.iteration;
  spec.pipeline = ws.dp_rank;
  spec.src_stage = ws.stage;
  spec.dst_stage = wd.stage;
  spec.microbatch = m.microbatch;
  spec.needed_at = m.needed_at;
  spec.connections = m.ranks * plan.scenario.connections;
  return spec;
}

std::string windows_csv(const core::Topology& topo, const std::vector<arbiter::WindowRecord>& windows,
                        const std::function<WireTimes(const arbiter::WindowRecord&)>& wire, Nanos origin) {
  const auto s = [&](std::optional<Nanos> t) {
    return t ? fmt::format("{:.6f}", static_cast<double>(*t - origin) / 1e9) : std::string{};
  };
  std::string csv =
      "src,dst,transfer,iteration,pipeline,src_stage,dst_stage,kind,microbatch,bytes,ready_s,planned_start_s,"
      "planned_end_s,granted_s,closed_s,wire_first_s,wire_last_s,revoked\n";
  for (const auto& w : windows) {
    const auto t = w.revoked ? WireTimes{} : wire(w);
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", topo.dcs.at(w.spec.link.src).name,
                       topo.dcs.at(w.spec.link.dst).name, w.id, w.spec.iteration, w.spec.pipeline, w.spec.src_stage,
                       w.spec.dst_stage, arbiter::to_string(w.spec.kind), w.spec.microbatch, w.spec.bytes, s(w.ready),
                       s(w.start), s(w.planned_end), s(w.start), s(w.end), s(t.first), s(t.last), w.revoked ? 1 : 0);
  }
  return csv;
}

}  // namespace wanlab::workload
