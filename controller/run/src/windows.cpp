#include "wanlab/run/windows.hpp"

#include <fmt/format.h>
#include <iterator>

#include <algorithm>
#include <cmath>

#include "wanlab/common/flows.hpp"
#include "wanlab/core/address_plan.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/wan_transfer.hpp"
#include "wanlab/core/round_trip.hpp"

namespace wanlab::run {
using arbiter::LinkId;
using program::OpKind;

namespace {

nlohmann::json grant_message(const std::string& run, int worker, int peer, int iteration, std::uint32_t tag) {
  return {{"v", 1}, {"type", "grant"}, {"run", run}, {"worker", worker}, {"peer", peer}, {"iteration", iteration},
          {"tag", tag}};
}

}  // namespace

RunWindows::RunWindows(std::string run_id, const workload::Plan& plan, const std::vector<double>& rates_bps,
                       std::unique_ptr<arbiter::Policy> policy, arbiter::ArbiterOptions options, Nanos lookahead)
    : run_id_(std::move(run_id)), plan_(plan), arbiter_(std::move(policy), options), lookahead_(lookahead) {
  const auto& topo = plan.topology;
  if (rates_bps.size() != topo.links.size())
    throw std::invalid_argument("run windows: one rate per topology link expected");
  for (std::size_t i = 0; i < topo.links.size(); ++i) {
    const auto& l = topo.links[i];
    arbiter_.add_link({l.src, l.dst}, rates_bps[i], core::round_trip(topo, l).count());
  }
  const auto& workers = plan.workers;
  for (const auto& prog : plan.programs) {
    const auto& w = workers.at(static_cast<std::size_t>(prog.worker));
    for (const auto& op : prog.ops) {
      if (op.kind != OpKind::send) continue;
      const auto& peer = workers.at(static_cast<std::size_t>(op.peer));
      if (peer.dc == w.dc) continue;
      const LinkId link{w.dc, peer.dc};
      if (!flow_of_.contains({prog.worker, op.peer})) {
        auto& fl = flows_[link];
        shaping::FlowMatch match{core::node_address(static_cast<int>(w.dc), w.node).value,
                                 core::node_address(static_cast<int>(peer.dc), peer.node).value,
                                 flows::slot_port(w.gpu), flows::kFlowPortMask};
        const int id = static_cast<int>(fl.size());
        fl.push_back({id, {match}});
        flow_of_[{prog.worker, op.peer}] = {link, id};
      }
      // The receiver's matching recv: when it would need this message.
      const auto& rprog = plan.programs.at(static_cast<std::size_t>(op.peer));
      std::size_t at = 0;
      for (std::size_t i = 0; i < rprog.ops.size(); ++i)
        if (rprog.ops[i].kind == OpKind::recv && rprog.ops[i].peer == prog.worker && rprog.ops[i].tag == op.tag) at = i;
      Message m;
      m.src_stage = w.stage;
      m.dp = w.dp_rank;
      m.dst_stage = peer.stage;
      m.kind = workload::transfer_kind(op.tag);
      m.microbatch = op.microbatch;
      m.bytes = op.bytes;
      m.needed_at = workload::compute_before(plan, op.peer, at);
      messages_[{prog.worker, op.peer, op.tag}] = m;
    }
  }
}

std::optional<std::string> RunWindows::want(const nlohmann::json& j, Nanos now, WindowActions& out) {
  const int src = j.at("worker").get<int>();
  const int dst = j.at("peer").get<int>();
  const int iteration = j.at("iteration").get<int>();
  const auto tag = j.at("tag").get<std::uint32_t>();
  const auto it = messages_.find({src, dst, tag});
  if (it == messages_.end())
    return fmt::format("want: worker {} sends no WAN message with tag {} to worker {}", src, tag, dst);
  const auto& m = it->second;
  const GroupKey key{iteration, m.src_stage, m.dp, m.dst_stage, tag};
  if (!groups_.contains(key)) {
    const auto& par = plan_.scenario.parallelism;
    Group g;
    g.iteration = iteration;
    g.tag = tag;
    for (int t = 0; t < par.tp; ++t) {
      Member mem;
      mem.src = workload::worker_id(par, m.src_stage, m.dp, t);
      mem.dst = workload::worker_id(par, m.dst_stage, m.dp, t);
      const auto f = flow_of_.find({mem.src, mem.dst});
      if (f == flow_of_.end()) continue;  // this rank's counterpart is in the same DC
      g.link = f->second.first;
      mem.flow = f->second.second;
      const auto& ws = plan_.workers.at(static_cast<std::size_t>(mem.src));
      const auto& wd = plan_.workers.at(static_cast<std::size_t>(mem.dst));
      mem.src_node = core::node_name(plan_.topology.dcs.at(ws.dc), ws.node);
      mem.dst_node = core::node_name(plan_.topology.dcs.at(wd.dc), wd.node);
      g.payload += messages_.at({mem.src, mem.dst, tag}).bytes;
      g.members.push_back(mem);
    }
    workload::WanMessage wm;
    wm.src = src;
    wm.dst = dst;
    wm.kind = m.kind;
    wm.microbatch = m.microbatch;
    wm.iteration = iteration;
    wm.payload_bytes = static_cast<double>(g.payload);
    wm.ranks = static_cast<int>(g.members.size());
    wm.needed_at = m.needed_at;
    g.id = arbiter_.request(workload::transfer_request(plan_, wm), now);
    by_id_[g.id] = key;
    groups_.emplace(key, std::move(g));
  }
  act(out, now);
  return std::nullopt;
}

std::optional<std::string> RunWindows::delivered(const nlohmann::json& j, Nanos now, WindowActions& out) {
  const int src = j.at("src").get<int>();
  const int dst = j.at("dst").get<int>();
  const int iteration = j.at("iteration").get<int>();
  const auto tag = j.at("tag").get<std::uint32_t>();
  const auto it = messages_.find({src, dst, tag});
  if (it == messages_.end())
    return fmt::format("delivered: worker {} receives no WAN message with tag {} from worker {}", dst, tag, src);
  const auto& m = it->second;
  const auto g = groups_.find({iteration, m.src_stage, m.dp, m.dst_stage, tag});
  if (g == groups_.end())
    return fmt::format("delivered: iteration {} tag {} from worker {} was never asked for", iteration, tag, src);
  if (++g->second.delivered == static_cast<int>(g->second.members.size())) arbiter_.complete(g->second.id, now);
  act(out, now);
  return std::nullopt;
}

void RunWindows::flow_bytes(LinkId link, const std::vector<shaping::FlowCounters>& counters, Nanos now) {
  for (const auto& c : counters) last_counters_[{link, c.id}] = c;
  for (auto& [key, g] : groups_) {
    if (!g.holds_gates || !(g.link == link)) continue;
    std::uint64_t moved = 0;
    for (const auto& mem : g.members) {
      const auto& c = last_counters_[{link, mem.flow}];
      const auto b = g.base[mem.flow];
      moved += c.admitted_bytes > b ? c.admitted_bytes - b : 0;
      if (!g.wire_first && c.admitted_bytes > b) {
        const auto& t = arbiter_.transfer(g.id);
        // The data plane's time of the first packet into the link since the gate opened,
        // when this window opened it; otherwise the sample's time.
        g.wire_first = c.first_admitted_ns && c.opened_ns && *c.opened_ns >= t.granted ? *c.first_admitted_ns : now;
      }
    }
    arbiter_.progress(g.id, moved, now);
  }
}

void RunWindows::tick(Nanos now, WindowActions& out) {
  act(out, now);
}

void RunWindows::switch_gates(Group& g, bool open, WindowActions& out) {
  if (g.holds_gates == open) return;
  g.holds_gates = open;
  for (const auto& mem : g.members) {
    int& n = open_count_[{g.link, mem.flow}];
    if (open) {
      g.base[mem.flow] = last_counters_[{g.link, mem.flow}].admitted_bytes;
      if (n++ == 0) out.gates.push_back({g.link, mem.flow, true});
    } else if (--n == 0) {
      out.gates.push_back({g.link, mem.flow, false});
    }
  }
}

void RunWindows::act(WindowActions& out, Nanos now) {
  arbiter_.advance(now);
  for (const auto& ev : arbiter_.take_events()) {
    auto& g = groups_.at(by_id_.at(ev.id));
    switch (ev.kind) {
      case arbiter::Event::Kind::grant:
        switch_gates(g, true, out);
        grant_agents(g, out);
        break;
      case arbiter::Event::Kind::close:
        break;  // the gates stay open for what is still in flight, until it is delivered
      case arbiter::Event::Kind::revoke:
        switch_gates(g, false, out);
        break;
      case arbiter::Event::Kind::done: {
        std::optional<Nanos> last;
        for (const auto& mem : g.members) last = std::max(last, last_counters_[{g.link, mem.flow}].last_admitted_ns);
        g.wire_last = last.value_or(now);
        if (!g.wire_first) g.wire_first = g.wire_last;
        switch_gates(g, false, out);
        break;
      }
    }
  }
  if (lookahead_ <= 0) return;
  for (const auto& [link, flows] : flows_) {
    const auto next = arbiter_.next_in_line(link);
    if (!next || groups_.at(by_id_.at(*next)).agents_granted) continue;
    const double rate = arbiter_.capacity(link);
    if (rate <= 0) continue;
    // The window holder closest to its end: what it has still to send, and what the link
    // has not sent of what it has.
    std::optional<Nanos> left;
    const double queued = arbiter_.queued_bytes(link, now);
    for (const auto id : arbiter_.owners(link)) {
      const auto& t = arbiter_.transfer(id);
      const auto rest = static_cast<double>(t.spec.bytes > t.progress ? t.spec.bytes - t.progress : 0) + queued;
      const auto ns = static_cast<Nanos>(rest * 8e9 / rate);
      if (!left || ns < *left) left = ns;
    }
    if (left && *left <= lookahead_) grant_agents(groups_.at(by_id_.at(*next)), out);
  }
}

void RunWindows::grant_agents(Group& g, WindowActions& out) {
  if (g.agents_granted) return;
  g.agents_granted = true;
  for (const auto& mem : g.members)
    out.messages.push_back({mem.src_node, grant_message(run_id_, mem.src, mem.dst, g.iteration, g.tag)});
}

std::vector<RunWindows::LinkWindowStats> RunWindows::link_stats(Nanos now) const {
  std::vector<LinkWindowStats> out;
  for (const auto& [link, flows] : flows_) {
    LinkWindowStats st;
    st.link = link;
    st.open = arbiter_.owners(link).size();
    st.queued_bytes = arbiter_.queued_bytes(link, now);
    out.push_back(st);
  }
  for (const auto& w : arbiter_.windows())
    for (auto& st : out)
      if (st.link == w.spec.link) {
        st.granted++;
        st.revoked += w.revoked ? 1 : 0;
      }
  for (auto& st : out) st.granted += st.open;
  return out;
}

nlohmann::json RunWindows::recent_windows(Nanos origin, Nanos since, Nanos now) const {
  const auto& dcs = plan_.topology.dcs;
  const auto secs = [&](Nanos t) { return static_cast<double>(t - origin) / 1e9; };
  nlohmann::json out = nlohmann::json::array();
  auto row = [&](const arbiter::TransferSpec& spec, Nanos start, std::optional<Nanos> end, bool revoked) {
    out.push_back({{"src", dcs.at(spec.link.src).name},
                   {"dst", dcs.at(spec.link.dst).name},
                   {"pipeline", spec.pipeline},
                   {"kind", arbiter::to_string(spec.kind)},
                   {"iteration", spec.iteration},
                   {"start_s", secs(start)},
                   {"end_s", end ? nlohmann::json(secs(*end)) : nlohmann::json(nullptr)},
                   {"revoked", revoked}});
  };
  const auto& ended = arbiter_.windows();
  // Ended windows are in the order they ended: the recent ones are at the back.
  auto it = ended.end();
  while (it != ended.begin() && std::prev(it)->end >= since) --it;
  for (; it != ended.end(); ++it) row(it->spec, it->start, it->end, it->revoked);
  for (const auto& [link, flows] : flows_)
    for (const auto id : arbiter_.owners(link)) {
      const auto& t = arbiter_.transfer(id);
      if (t.granted != kNotYet) row(t.spec, t.granted, std::nullopt, false);
    }
  (void)now;
  return out;
}

std::string RunWindows::windows_csv(Nanos origin) const {
  return workload::windows_csv(plan_.topology, arbiter_.windows(), [&](const arbiter::WindowRecord& w) {
    const auto& g = groups_.at(by_id_.at(w.id));
    return workload::WireTimes{g.wire_first, g.wire_last};
  }, origin);
}

nlohmann::json RunWindows::accuracy() const {
  std::vector<double> start_gap, end_gap;
  int revoked = 0;
  for (const auto& w : arbiter_.windows()) revoked += w.revoked ? 1 : 0;
  for (const auto& [key, g] : groups_) {
    const auto& t = arbiter_.transfer(g.id);
    if (!g.wire_first || !g.wire_last || t.state != arbiter::State::done) continue;
    start_gap.push_back(static_cast<double>(*g.wire_first - t.granted) / 1e6);
    end_gap.push_back(static_cast<double>(*g.wire_last - t.first_planned_end) / 1e6);
  }
  const auto q = [](std::vector<double> v) {
    if (v.empty()) return nlohmann::json(nullptr);
    return nlohmann::json{{"p50", workload::quantile(v, 0.5)}, {"p99", workload::quantile(v, 0.99)}};
  };
  return {{"windows", arbiter_.windows().size()},
          {"transfers", groups_.size()},
          {"revoked", revoked},
          {"start_gap_ms", q(start_gap)},
          {"end_gap_ms", q(end_gap)}};
}

}  // namespace wanlab::run
