// Files of worker programs (a scenario's `programs`): reading, checking, placing.
#include "wanlab/workload/program_file.hpp"

#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wanlab/core/json_fields.hpp"

namespace wanlab::workload {
using nlohmann::json;
using program::OpKind;
using namespace core::fields;

namespace {

bool is_comm(OpKind k) { return k == OpKind::send || k == OpKind::recv || k == OpKind::allreduce; }

// One program's entry: the fields beyond `ops` default to worker i, stage i, replica 0,
// TP rank 0 and an empty shape (modeled compute needs none).
std::optional<program::WorkerProgram> read_program(const json& j, const std::string& path, std::size_t i,
                                                   core::Diagnostics& d) {
  if (!j.is_object()) {
    d.add(path, fmt::format("expected a worker program (an object with \"ops\"), got {}", describe(j)));
    return std::nullopt;
  }
  const json* ops = find(j, "ops");
  if (ops == nullptr || !ops->is_array()) {
    d.add(child(path, "ops"), ops == nullptr ? "missing: the program's ops, one iteration"
                                             : fmt::format("expected an array of ops, got {}", describe(*ops)));
    return std::nullopt;
  }
  const std::size_t before = d.items().size();
  std::vector<program::Op> parsed;
  for (std::size_t k = 0; k < ops->size(); ++k) {
    const json& o = (*ops)[k];
    const std::string at = child(child(path, "ops"), k);
    if (const json* kind = o.is_object() ? find(o, "kind") : nullptr; kind != nullptr && kind->is_string()) {
      try {
        (void)program::op_kind_from_string(kind->get<std::string>());
      } catch (const std::invalid_argument& e) {
        d.add(child(at, "kind"), e.what());
        continue;
      }
    }
    try {
      parsed.push_back(program::op_from_json(o));
    } catch (const std::invalid_argument& e) {
      d.add(at, e.what());
    }
  }
  json rest = j;
  rest["ops"] = json::array();
  if (!rest.contains("worker")) rest["worker"] = i;
  if (!rest.contains("stage")) rest["stage"] = i;
  if (!rest.contains("dp_rank")) rest["dp_rank"] = 0;
  if (!rest.contains("tp_rank")) rest["tp_rank"] = 0;
  if (!rest.contains("shape")) rest["shape"] = program::to_json(program::StageShape{});
  program::WorkerProgram p;
  try {
    p = program::worker_program_from_json(rest);
  } catch (const std::invalid_argument& e) {
    d.add(path, e.what());
    return std::nullopt;
  }
  if (p.worker != static_cast<int>(i)) {
    d.add(child(path, "worker"), fmt::format("{}: program {} must be worker {} (programs in worker order)", p.worker, i, i));
    return std::nullopt;
  }
  if (d.items().size() != before) return std::nullopt;
  p.ops = std::move(parsed);
  return p;
}

// Every send has its receive (same bytes), every ring's members all run it, peers exist.
void check_programs(const std::vector<program::WorkerProgram>& programs, const std::string& base, core::Diagnostics& d) {
  const int n = static_cast<int>(programs.size());
  struct Msg {
    std::string path;
    std::uint64_t bytes = 0;
  };
  std::map<std::tuple<int, int, std::uint32_t>, Msg> sends, recvs;  // (from, to, tag)
  std::map<std::vector<int>, std::map<int, std::vector<std::pair<std::string, std::uint64_t>>>> rings;
  for (int w = 0; w < n; ++w) {
    const auto& ops = programs[static_cast<std::size_t>(w)].ops;
    const std::string pp = child(child(base, static_cast<std::size_t>(w)), "ops");
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const auto& op = ops[k];
      const std::string at = child(pp, k);
      if (!is_comm(op.kind)) {
        if (!std::isfinite(op.flops) || op.flops < 0)
          d.add(child(at, "flops"), fmt::format("{}: a compute op's FLOPs must be a finite number >= 0", op.flops));
        continue;
      }
      if (op.bytes == 0) d.add(child(at, "bytes"), "0: a message or all-reduce buffer needs at least 1 byte");
      if (op.kind == OpKind::allreduce) {
        std::set<int> seen;
        bool ok = true;
        for (int m : op.ring)
          if (m < 0 || m >= n || !seen.insert(m).second) ok = false;
        if (!ok || !seen.count(w)) {
          d.add(child(at, "ring"), fmt::format("[{}]: the ring must list distinct workers of the {} (0..{}), this one "
                                               "({}) included",
                                               fmt::join(op.ring, ", "), n, n - 1, w));
          continue;
        }
        rings[op.ring][w].push_back({at, op.bytes});
        continue;
      }
      if (op.peer < 0 || op.peer >= n || op.peer == w) {
        d.add(child(at, "peer"), fmt::format("{}: not another of the {} workers (0..{})", op.peer, n, n - 1));
        continue;
      }
      const bool send = op.kind == OpKind::send;
      auto& table = send ? sends : recvs;
      const auto key = send ? std::tuple{w, op.peer, op.tag} : std::tuple{op.peer, w, op.tag};
      if (auto [it, fresh] = table.insert({key, {at, op.bytes}}); !fresh)
        d.add(child(at, "tag"), fmt::format("{}: worker {} already {} worker {} a message with this tag in one "
                                            "iteration ({}); a (peer, tag) pair is unique per direction",
                                            op.tag, w, send ? "sends" : "receives from", op.peer, it->second.path));
    }
  }
  for (const auto& [key, s] : sends) {
    const auto& [from, to, tag] = key;
    auto r = recvs.find(key);
    if (r == recvs.end())
      d.add(s.path, fmt::format("worker {} sends worker {} tag {}, which worker {} never receives (no recv with peer {} "
                                "and tag {}): the replay would wait forever",
                                from, to, tag, to, from, tag));
    else if (r->second.bytes != s.bytes)
      d.add(child(r->second.path, "bytes"), fmt::format("{}: its send ({}) carries {} bytes", r->second.bytes, s.path, s.bytes));
  }
  for (const auto& [key, r] : recvs)
    if (!sends.count(key)) {
      const auto& [from, to, tag] = key;
      d.add(r.path, fmt::format("worker {} waits for tag {} from worker {}, which never sends it: the replay would wait "
                                "forever",
                                to, tag, from));
    }
  for (const auto& [ring, by_worker] : rings) {
    const auto& first = by_worker.begin()->second;
    for (int m : ring) {
      auto it = by_worker.find(m);
      const std::size_t count = it == by_worker.end() ? 0 : it->second.size();
      if (count != first.size()) {
        d.add(first.front().first, fmt::format("worker {} runs {} all-reduces over ring [{}], worker {} runs {}: every "
                                               "member runs each of them",
                                               by_worker.begin()->first, first.size(), fmt::join(ring, ", "), m, count));
        break;
      }
      for (std::size_t k = 0; k < count; ++k)
        if (it->second[k].second != first[k].second) {
          d.add(child(it->second[k].first, "bytes"),
                fmt::format("{}: the same all-reduce is {} bytes on worker {} ({})", it->second[k].second,
                            first[k].second, by_worker.begin()->first, first[k].first));
          break;
        }
    }
  }
}

}  // namespace

ProgramFile parse_program_file(const json& doc, core::Diagnostics& d) {
  ProgramFile out;
  const json* list = &doc;
  std::string base;
  if (doc.is_object()) {
    base = "/programs";
    list = find(doc, "programs");
    if (list == nullptr) {
      d.add(base, "missing: the worker programs, one per GPU (as `wanlab import-trace` writes them in import.json)");
      return out;
    }
    if (const json* f = find(doc, "effective_flops"))
      if (auto v = as_number(*f, "/effective_flops", 1, 1e21, "the FLOP/s the programs' FLOPs were counted at", d))
        out.effective_flops = *v;
  }
  if (!list->is_array() || list->empty()) {
    d.add(base, fmt::format("expected a non-empty array of worker programs, got {}", describe(*list)));
    return out;
  }
  for (std::size_t i = 0; i < list->size(); ++i)
    if (auto p = read_program((*list)[i], child(base, i), i, d)) out.programs.push_back(std::move(*p));
  if (d.empty()) check_programs(out.programs, base, d);
  return out;
}

ProgramFile read_program_file(const std::filesystem::path& file) {
  core::Diagnostics d(file.string());
  const json doc = read_document(file.string(), d);
  auto out = parse_program_file(doc, d);
  d.throw_if_any();
  return out;
}

std::vector<WorkerPlacement> place_programs(const Scenario& scenario, const core::Topology& topo) {
  const int n = static_cast<int>(scenario.programs.size());
  int gpus = 0;
  for (const auto& dc : topo.dcs) gpus += dc.nodes * dc.gpus_per_node;
  core::Diagnostics d(scenario.source_file);
  if (scenario.parallelism != Parallelism{n, 1, 1}) {
    d.add("/parallelism", fmt::format("pp {}, dp {}, tp {}: the programs are {} workers, replayed as pp {}, dp 1, tp 1",
                                      scenario.parallelism.pp, scenario.parallelism.dp, scenario.parallelism.tp, n, n));
    d.throw_if_any();
  }
  if (n > gpus || topo.dcs.empty()) {
    d.add("/programs", fmt::format("{}: {} workers, but topology {} has {} GPUs", scenario.programs_file.string(), n,
                                   topo.name, gpus));
    d.throw_if_any();
  }
  if (!scenario.placement.empty()) return place_workers(scenario, topo);
  Scenario s = scenario;
  for (int r = 0; r < n; ++r) s.placement.push_back({topo.dcs[static_cast<std::size_t>(r) % topo.dcs.size()].name});
  try {
    return place_workers(s, topo);
  } catch (const core::ConfigError& e) {
    for (const auto& item : e.diagnostics())
      d.add("/programs", fmt::format("with no placement, worker r runs in DC r mod {}: {}: {}", topo.dcs.size(),
                                     item.path, item.reason));
    d.throw_if_any();
  }
  return {};
}

}  // namespace wanlab::workload
