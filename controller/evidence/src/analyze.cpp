// `wanlab analyze`: phases, overlap, WAN bandwidth and the critical path of run folders.
#include "wanlab/evidence/analyze.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "wanlab/evidence/card.hpp"

namespace wanlab::evidence {
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

enum class Kind { compute, recv, allreduce, send, other };

struct Sp {
  Kind kind = Kind::other;
  std::string cat;
  int iteration = -1;
  int microbatch = -1;
  int peer = -1;
  double start = 0, end = 0;  // seconds since the run's start
  double bytes = 0;
};

struct Iv {
  double a, b;
};

// Length of the union of `ivs` inside [from, to].
double covered(std::vector<Iv> ivs, double from, double to) {
  for (auto& v : ivs) {
    v.a = std::max(v.a, from);
    v.b = std::min(v.b, to);
  }
  std::erase_if(ivs, [](const Iv& v) { return v.b <= v.a; });
  std::sort(ivs.begin(), ivs.end(), [](const Iv& x, const Iv& y) { return x.a < y.a; });
  double total = 0, cur_a = 0, cur_b = -1e300;
  for (const auto& v : ivs) {
    if (v.a > cur_b) {
      if (cur_b > cur_a) total += cur_b - cur_a;
      cur_a = v.a;
      cur_b = v.b;
    } else {
      cur_b = std::max(cur_b, v.b);
    }
  }
  if (cur_b > cur_a) total += cur_b - cur_a;
  return total;
}

std::vector<Iv> of(const std::vector<const Sp*>& spans, std::initializer_list<Kind> kinds) {
  std::vector<Iv> out;
  for (const auto* s : spans)
    if (std::find(kinds.begin(), kinds.end(), s->kind) != kinds.end()) out.push_back({s->start, s->end});
  return out;
}

[[noreturn]] void bad(const std::string& file, const std::string& path, const std::string& why) {
  throw EvidenceError(fmt::format("{}: {}: {}", file, path, why));
}

const json& at(const json& j, const char* key, const std::string& file, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) bad(file, path + "/" + key, "missing");
  return j.at(key);
}

double number(const json& j, const char* key, const std::string& file, const std::string& path) {
  const auto& v = at(j, key, file, path);
  if (!v.is_number()) bad(file, path + "/" + key, fmt::format("must be a number, not {}", v.dump()));
  return v.get<double>();
}

Kind kind_of(const std::string& cat) {
  if (cat == "forward" || cat == "backward" || cat == "optimizer" || cat == "prefill") return Kind::compute;
  if (cat == "recv_wait") return Kind::recv;
  if (cat == "allreduce") return Kind::allreduce;
  if (cat == "send") return Kind::send;
  return Kind::other;
}

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double r = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(r));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (r - static_cast<double>(lo));
}

json read_json(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw EvidenceError(fmt::format("{}: cannot read: {}", file.string(), std::strerror(errno)));
  try {
    return json::parse(f);
  } catch (const json::parse_error& e) {
    throw EvidenceError(fmt::format("{}: byte {}: not JSON: {}", file.string(), e.byte, e.what()));
  }
}

const char* kPhases[] = {"compute_s", "exposed_pipeline_s", "exposed_allreduce_s", "idle_s"};
const char* kPhaseNames[] = {"compute", "exposed pipeline communication", "exposed all-reduce", "idle"};

struct Gpu {
  int worker = 0;
  std::string dc;
  int stage = -1;
  std::vector<Sp> spans;
};

// One measured iteration's critical path: segments (worker, kind, start, end), newest first
// as found, returned oldest first.
struct Segment {
  int worker = 0;
  std::string kind;  // compute, transfer, allreduce, wait, idle
  int peer = -1;     // transfer: the sender
  double start = 0, end = 0;
};

std::vector<Segment> critical_path(const std::map<int, Gpu>& gpus, double a, double b) {
  constexpr double tol = 2e-6;  // the timeline's µs rounding
  const auto blocking = [](const Sp& s) {
    return (s.kind == Kind::compute || s.kind == Kind::recv || s.kind == Kind::allreduce) && s.end > s.start;
  };
  int cur = -1;
  double best = -1e300;
  for (const auto& [w, g] : gpus)
    for (const auto& s : g.spans)
      if (blocking(s) && s.end <= b + tol && s.end > a && s.end > best) {
        best = s.end;
        cur = w;
      }
  std::vector<Segment> segs;
  if (cur < 0) return segs;
  const auto add = [&](int w, std::string kind, int peer, double s, double e) {
    s = std::max(s, a);
    if (e <= s) return;
    if (!segs.empty() && segs.back().worker == w && segs.back().kind == kind && segs.back().peer == peer &&
        std::abs(segs.back().start - e) <= tol) {
      segs.back().start = s;
      return;
    }
    segs.push_back({w, std::move(kind), peer, s, e});
  };
  double t = b;
  for (int guard = 0; guard < 1000000 && t > a + tol; ++guard) {
    const auto& g = gpus.at(cur);
    const Sp* pick = nullptr;
    for (const auto& s : g.spans)
      if (blocking(s) && s.end <= t + tol && s.start < t - tol && s.end > a && (!pick || s.end > pick->end))
        pick = &s;
    if (!pick) {
      add(cur, "idle", -1, a, t);
      break;
    }
    if (pick->end < t - tol) add(cur, "idle", -1, pick->end, t);
    t = std::min(t, pick->end);
    if (pick->kind == Kind::recv) {
      const Sp* send = nullptr;
      if (auto it = gpus.find(pick->peer); it != gpus.end())
        for (const auto& s : it->second.spans)
          if (s.kind == Kind::send && s.peer == cur && s.microbatch == pick->microbatch &&
              s.iteration == pick->iteration && s.start < t - tol)
            send = &s;
      if (send) {
        add(cur, "transfer", pick->peer, send->start, t);
        t = send->start;
        cur = pick->peer;
        continue;
      }
      add(cur, "wait", pick->peer, pick->start, t);
    } else {
      add(cur, pick->kind == Kind::compute ? "compute" : "allreduce", -1, pick->start, t);
    }
    t = pick->start;
  }
  std::reverse(segs.begin(), segs.end());
  return segs;
}

// The iterations of a run: where each ends, and the measured ones after the warmup.
struct Iterations {
  std::vector<double> ends;  // seconds since the run's start
  std::size_t first = 0;     // the first measured one
  std::size_t measured = 0;
  double from = 0, to = 0;  // the measured span
  double step = 0;          // the summary's mean iteration time
};

Iterations read_iterations(const json& summary, const std::string& sfile) {
  const auto& it = at(summary, "iteration_time_s", sfile, "");
  const auto& per_it = at(it, "per_iteration", sfile, "/iteration_time_s");
  if (!per_it.is_array() || per_it.empty()) bad(sfile, "/iteration_time_s/per_iteration", "must be a non-empty array");
  const int warmup = static_cast<int>(number(it, "warmup", sfile, "/iteration_time_s"));
  Iterations r;
  r.step = number(it, "mean", sfile, "/iteration_time_s");
  double acc = 0;
  for (std::size_t i = 0; i < per_it.size(); ++i) {
    if (!per_it[i].is_number()) bad(sfile, fmt::format("/iteration_time_s/per_iteration/{}", i), "must be a number");
    acc += per_it[i].get<double>();
    r.ends.push_back(acc);
  }
  if (warmup < 0 || static_cast<std::size_t>(warmup) >= r.ends.size())
    bad(sfile, "/iteration_time_s/warmup", fmt::format("{} leaves no measured iteration of {}", warmup, r.ends.size()));
  r.first = static_cast<std::size_t>(warmup);
  r.measured = r.ends.size() - r.first;
  r.from = r.first == 0 ? 0 : r.ends[r.first - 1];
  r.to = r.ends.back();
  return r;
}

// Workers: DC and stage from the summary; the data-parallel degree from it or the card.
struct Placement {
  std::map<int, std::pair<std::string, int>> where;  // worker -> (DC, stage)
  int dp = 0;
};

Placement read_placement(const json& summary, const json& card, const std::string& sfile) {
  Placement r;
  if (summary.contains("gpu_utilization") && summary["gpu_utilization"].contains("per_gpu")) {
    const auto& pg = summary["gpu_utilization"]["per_gpu"];
    for (std::size_t i = 0; i < pg.size(); ++i) {
      const auto path = fmt::format("/gpu_utilization/per_gpu/{}", i);
      const int w = static_cast<int>(number(pg[i], "worker", sfile, path));
      r.where[w] = {pg[i].value("dc", std::string("?")), pg[i].value("stage", -1)};
      r.dp = std::max(r.dp, pg[i].value("dp_rank", 0) + 1);
    }
  }
  if (card.is_object() && card.contains("parallelism")) r.dp = card["parallelism"].value("dp", r.dp);
  return r;
}

// Each GPU's spans from the timeline's complete events; categories not known go to `unknown`.
std::map<int, Gpu> read_spans(const json& timeline, const std::string& tfile, const Placement& placement,
                              std::set<std::string>& unknown) {
  std::map<int, Gpu> gpus;
  const auto& events = at(timeline, "traceEvents", tfile, "");
  if (!events.is_array()) bad(tfile, "/traceEvents", "must be an array");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const auto path = fmt::format("/traceEvents/{}", i);
    if (!e.is_object()) bad(tfile, path, "must be an object");
    if (e.value("ph", std::string()) != "X") continue;
    const auto cat = e.value("cat", std::string());
    Sp s;
    s.kind = kind_of(cat);
    if (s.kind == Kind::other) {
      unknown.insert(cat);
      continue;
    }
    s.cat = cat;
    const auto& args = at(e, "args", tfile, path);
    const int w = static_cast<int>(number(args, "worker", tfile, path + "/args"));
    s.iteration = args.value("iteration", -1);
    s.microbatch = args.value("microbatch", -1);
    s.peer = args.value("peer", -1);
    s.bytes = args.value("bytes", 0.0);
    s.start = number(e, "ts", tfile, path) / 1e6;
    const double dur = number(e, "dur", tfile, path);
    if (dur < 0) bad(tfile, path + "/dur", fmt::format("{} is negative", dur));
    s.end = s.start + dur / 1e6;
    auto& g = gpus[w];
    g.worker = w;
    if (auto wi = placement.where.find(w); wi != placement.where.end()) {
      g.dc = wi->second.first;
      g.stage = wi->second.second;
    }
    g.spans.push_back(s);
  }
  if (gpus.empty()) bad(tfile, "/traceEvents", "no spans of any GPU (the run was simulated with --timeline none?)");
  return gpus;
}

// compute, exposed pipeline, exposed all-reduce, idle, overlapped, idle sending, window.
using Phases = std::array<double, 7>;

json phases_json(const Phases& v) {
  const double comm = v[4] + v[1] + v[2];
  return json{{"compute_s", v[0]},          {"exposed_pipeline_s", v[1]}, {"exposed_allreduce_s", v[2]},
              {"idle_s", v[3]},             {"overlapped_s", v[4]},       {"idle_sending_s", v[5]},
              {"total_s", v[0] + v[1] + v[2] + v[3]}, {"overlap", comm > 0 ? v[4] / comm : 0.0}};
}

// One GPU's phases per measured iteration (their means).
Phases gpu_phases(const Gpu& g, const Iterations& its) {
  std::vector<const Sp*> sp;
  for (const auto& s : g.spans) sp.push_back(&s);
  Phases v{};
  const auto& ends = its.ends;
  for (std::size_t i = its.first; i < ends.size(); ++i) {
    const double a = i == 0 ? 0 : ends[i - 1], b = ends[i];
    const double c = covered(of(sp, {Kind::compute}), a, b);
    const double cr = covered(of(sp, {Kind::compute, Kind::recv}), a, b);
    const double cra = covered(of(sp, {Kind::compute, Kind::recv, Kind::allreduce}), a, b);
    const double cras = covered(of(sp, {Kind::compute, Kind::recv, Kind::allreduce, Kind::send}), a, b);
    const double sends = covered(of(sp, {Kind::send}), a, b);
    const double cs = covered(of(sp, {Kind::compute, Kind::send}), a, b);
    v[0] += c;
    v[1] += cr - c;
    v[2] += cra - cr;
    v[3] += (b - a) - cra;
    v[4] += sends + c - cs;
    v[5] += cras - cra;
    v[6] += b - a;
  }
  for (auto& x : v) x /= static_cast<double>(its.measured);
  return v;
}

// Phases per GPU, per stage and their mean over the GPUs.
struct PhaseTables {
  json per_gpu = json::array();
  json per_stage = json::array();
  json mean;
};

PhaseTables phase_tables(const std::map<int, Gpu>& gpus, const Iterations& its) {
  PhaseTables t;
  std::map<int, std::vector<Phases>> by_stage;
  Phases all{};
  for (const auto& [w, g] : gpus) {
    const auto v = gpu_phases(g, its);
    for (std::size_t k = 0; k < v.size(); ++k) all[k] += v[k];
    by_stage[g.stage].push_back(v);
    auto j = phases_json(v);
    j["worker"] = w;
    j["dc"] = g.dc;
    j["stage"] = g.stage;
    t.per_gpu.push_back(std::move(j));
  }
  for (const auto& [st, rows] : by_stage) {
    Phases m{};
    for (const auto& r : rows)
      for (std::size_t k = 0; k < m.size(); ++k) m[k] += r[k] / static_cast<double>(rows.size());
    auto j = phases_json(m);
    j["stage"] = st;
    j["gpus"] = rows.size();
    t.per_stage.push_back(std::move(j));
  }
  for (auto& x : all) x /= static_cast<double>(gpus.size());
  t.mean = phases_json(all);
  return t;
}

// WAN links over the measured iterations, and the transfers of the first measured one.
struct WanTables {
  json links = json::array();
  json transfers = json::array();
};

WanTables wan_tables(const json& summary, const std::map<int, Gpu>& gpus, const Placement& placement,
                     const Iterations& its) {
  std::map<std::pair<std::string, std::string>, double> rate;
  if (summary.contains("wan") && summary["wan"].is_array())
    for (const auto& l : summary["wan"])
      rate[{l.value("src", std::string()), l.value("dst", std::string())}] = l.value("rate_bps", 0.0);
  struct LinkAcc {
    std::vector<double> gbit;
    std::vector<Iv> busy;
    double bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, LinkAcc> links;
  WanTables t;
  for (const auto& [w, g] : gpus)
    for (const auto& s : g.spans) {
      if (s.kind != Kind::send || s.start < its.from || s.start >= its.to || s.end <= s.start) continue;
      const auto pi = placement.where.find(s.peer);
      if (pi == placement.where.end() || pi->second.first == g.dc || g.dc.empty()) continue;
      const auto key = std::make_pair(g.dc, pi->second.first);
      auto& l = links[key];
      const double gb = s.bytes * 8 / (s.end - s.start) / 1e9;
      l.gbit.push_back(gb);
      l.busy.push_back({s.start, s.end});
      l.bytes += s.bytes;
      if (s.iteration == static_cast<int>(its.first) && t.transfers.size() < 512) {
        const double r = rate.count(key) ? rate[key] : 0.0;
        t.transfers.push_back({{"src_worker", w},
                               {"dst_worker", s.peer},
                               {"link", fmt::format("{}->{}", key.first, key.second)},
                               {"iteration", s.iteration},
                               {"microbatch", s.microbatch},
                               {"bytes", s.bytes},
                               {"duration_s", s.end - s.start},
                               {"gbit_s", gb},
                               {"fraction_of_rate", r > 0 ? gb * 1e9 / r : 0.0}});
      }
    }
  const double measured = static_cast<double>(its.measured), from = its.from, to = its.to;
  for (auto& [key, l] : links) {
    const double r = rate.count(key) ? rate[key] : 0.0;
    const double busy = covered(l.busy, from, to);
    const double busy_gbit = busy > 0 ? l.bytes * 8 / busy / 1e9 : 0.0;
    t.links.push_back({{"src", key.first},
                       {"dst", key.second},
                       {"transfers", l.gbit.size()},
                       {"bytes_per_iteration", l.bytes / measured},
                       {"transfer_gbit_s", {{"p50", quantile(l.gbit, 0.5)}, {"mean", mean_of(l.gbit)},
                                            {"min", quantile(l.gbit, 0)}, {"max", quantile(l.gbit, 1)}}},
                       {"busy_s_per_iteration", busy / measured},
                       {"busy_gbit_s", busy_gbit},
                       {"rate_gbit_s", r / 1e9},
                       {"busy_fraction_of_rate", r > 0 ? busy_gbit * 1e9 / r : 0.0},
                       {"utilization", r > 0 && to > from ? l.bytes * 8 / (r * (to - from)) : 0.0}});
  }
  return t;
}

// All-reduces: algorithm and bus bandwidth (ring over dp ranks).
json allreduce_table(const std::map<int, Gpu>& gpus, const Iterations& its, int dp) {
  json allreduce = json::array();
  std::map<int, std::vector<double>> alg;  // per stage, GB/s
  std::map<int, double> bytes;
  for (const auto& [w, g] : gpus)
    for (const auto& s : g.spans)
      if (s.kind == Kind::allreduce && s.start >= its.from && s.start < its.to && s.end > s.start) {
        alg[g.stage].push_back(s.bytes * 8 / (s.end - s.start) / 1e9);
        bytes[g.stage] = s.bytes;
      }
  for (const auto& [st, v] : alg) {
    const double algbw = mean_of(v);
    allreduce.push_back({{"stage", st},
                         {"ranks", dp},
                         {"bytes", bytes[st]},
                         {"alg_gbit_s", algbw},
                         {"bus_gbit_s", dp > 1 ? algbw * 2 * (dp - 1) / dp : algbw}});
  }
  return allreduce;
}

// Critical path, per measured iteration; the first measured one in full.
json critical_path_table(const std::map<int, Gpu>& gpus, const Iterations& its) {
  std::map<std::string, double> cp_sum;
  json hops = json::array();
  double cp_total = 0;
  const auto& ends = its.ends;
  for (std::size_t i = its.first; i < ends.size(); ++i) {
    const auto segs = critical_path(gpus, i == 0 ? 0 : ends[i - 1], ends[i]);
    for (const auto& s : segs) {
      cp_sum[s.kind] += s.end - s.start;
      cp_total += s.end - s.start;
    }
    if (i == its.first)
      for (const auto& s : segs) {
        json h = {{"worker", s.worker}, {"kind", s.kind}, {"start_s", s.start}, {"duration_s", s.end - s.start}};
        if (gpus.count(s.worker)) h["stage"] = gpus.at(s.worker).stage;
        if (s.peer >= 0) h["from_worker"] = s.peer;
        hops.push_back(std::move(h));
      }
  }
  json cp = json::object();
  for (const char* k : {"compute", "transfer", "allreduce", "wait", "idle"})
    cp[std::string(k) + "_s"] = cp_sum[k] / static_cast<double>(its.measured);
  cp["total_s"] = cp_total / static_cast<double>(its.measured);
  cp["first_measured_iteration"] = its.first;
  cp["hops"] = std::move(hops);
  return cp;
}

}  // namespace

json analyze_documents(const json& summary, const json& timeline, const json& card, const std::string& dir) {
  const std::string sfile = (fs::path(dir) / "summary.json").string();
  const std::string tfile = (fs::path(dir) / "timeline.json").string();
  const auto its = read_iterations(summary, sfile);
  const auto placement = read_placement(summary, card, sfile);
  std::set<std::string> unknown;
  const auto gpus = read_spans(timeline, tfile, placement, unknown);

  auto phases = phase_tables(gpus, its);
  const double total = phases.mean["total_s"].get<double>();
  auto wan = wan_tables(summary, gpus, placement, its);
  auto cp = critical_path_table(gpus, its);
  const double step = its.step;
  json r = {{"folder", dir},
            {"name", fs::path(dir).filename().string()},
            {"scenario", summary.value("scenario", std::string())},
            {"policy", summary.value("policy", std::string())},
            {"backend", summary.value("backend", std::string())},
            {"step_time_s", step},
            {"measured_iterations", its.measured},
            {"gpus", gpus.size()},
            {"mean", std::move(phases.mean)},
            {"check", {{"phase_sum_s", total},
                       {"critical_path_s", cp["total_s"]},
                       {"step_time_s", step},
                       {"phase_sum_error", step > 0 ? std::abs(total - step) / step : 0.0},
                       {"critical_path_error", step > 0 ? std::abs(cp["total_s"].get<double>() - step) / step : 0.0}}},
            {"per_stage", std::move(phases.per_stage)},
            {"per_gpu", std::move(phases.per_gpu)},
            {"wan_links", std::move(wan.links)},
            {"wan_transfers_first_measured_iteration", std::move(wan.transfers)},
            {"allreduce", allreduce_table(gpus, its, placement.dp)},
            {"critical_path", std::move(cp)}};
  if (!unknown.empty()) r["unknown_span_categories"] = unknown;
  if (card.is_object() && !card.empty())
    r["card"] = {{"host", card.value("host", json::object()).value("name", std::string())},
                 {"commit", card.value("wanlab", json::object()).value("commit", std::string())},
                 {"command", card.value("command", std::string())},
                 {"created_at", card.value("created_at", std::string())}};
  return r;
}

json analyze_run(const fs::path& dir) {
  const auto summary = read_json(dir / "summary.json");
  const auto timeline = read_json(dir / "timeline.json");
  json card = json::object();
  if (fs::exists(dir / "card.yaml")) card = load_card(dir / "card.yaml");
  return analyze_documents(summary, timeline, card, dir.string());
}

json compare_runs(const std::vector<json>& runs) {
  json out = json::object();
  if (runs.size() < 2) return out;
  const auto& ref = runs.front();
  json rows = json::array();
  for (const auto& r : runs) {
    json row = {{"name", r.at("name")}, {"folder", r.at("folder")}, {"policy", r.at("policy")},
                {"step_time_s", r.at("step_time_s")}};
    for (const char* p : kPhases) row[p] = r.at("mean").at(p);
    row["overlapped_s"] = r.at("mean").at("overlapped_s");
    row["overlap"] = r.at("mean").at("overlap");
    for (const char* k : {"compute_s", "transfer_s", "allreduce_s", "wait_s", "idle_s"})
      row["critical_path_" + std::string(k)] = r.at("critical_path").at(k);
    if (&r != &ref) {
      const double d = r.at("step_time_s").get<double>() - ref.at("step_time_s").get<double>();
      json deltas = json::object();
      std::string best;
      double best_v = 0;
      for (std::size_t k = 0; k < 4; ++k) {
        const double dv = r.at("mean").at(kPhases[k]).get<double>() - ref.at("mean").at(kPhases[k]).get<double>();
        deltas[kPhases[k]] = dv;
        if ((d >= 0 ? dv : -dv) > best_v) {
          best_v = d >= 0 ? dv : -dv;
          best = kPhaseNames[k];
        }
      }
      std::string cp_best;
      double cp_v = 0;
      for (const char* k : {"compute_s", "transfer_s", "allreduce_s", "wait_s", "idle_s"}) {
        const double dv = r.at("critical_path").at(k).get<double>() - ref.at("critical_path").at(k).get<double>();
        deltas["critical_path_" + std::string(k)] = dv;
        if ((d >= 0 ? dv : -dv) > cp_v) {
          cp_v = d >= 0 ? dv : -dv;
          cp_best = std::string(k).substr(0, std::strlen(k) - 2);
        }
      }
      row["delta_step_s"] = d;
      row["delta"] = deltas;
      row["explained_by"] = best;
      row["explained_share"] = d != 0 ? best_v / std::abs(d) : 0.0;
      row["critical_path_explained_by"] = cp_best;
      row["explanation"] =
          d == 0 ? std::string("same step time")
                 : fmt::format("{} is {:.4f} s ({:.1f} %) {} per step than {}: {} explains {:.4f} s of it ({:.0f} %, mean "
                               "over GPUs); on the critical path, {} time changed most ({:+.4f} s)",
                               r.at("name").get<std::string>(), std::abs(d),
                               100 * std::abs(d) / ref.at("step_time_s").get<double>(), d < 0 ? "faster" : "slower",
                               ref.at("name").get<std::string>(), best.empty() ? "no single phase" : best,
                               d >= 0 ? best_v : -best_v, d != 0 ? 100 * best_v / std::abs(d) : 0.0,
                               cp_best.empty() ? "no" : cp_best, d >= 0 ? cp_v : -cp_v);
    }
    rows.push_back(std::move(row));
  }
  out["reference"] = ref.at("name");
  out["runs"] = std::move(rows);
  return out;
}

std::vector<fs::path> find_run_folders(const fs::path& path, std::vector<std::string>* skipped) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (fs::exists(path / "summary.json", ec)) {
    if (fs::exists(path / "timeline.json", ec))
      out.push_back(path);
    else if (skipped)
      skipped->push_back(fmt::format("{}: no timeline.json (simulated with --timeline none?)", path.string()));
    return out;
  }
  if (!fs::is_directory(path, ec)) throw EvidenceError(fmt::format("{}: not a run folder nor a folder of runs", path.string()));
  std::vector<fs::path> subs;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_directory()) subs.push_back(e.path());
  std::sort(subs.begin(), subs.end());
  // A bench folder: its baseline first, so comparisons are against it.
  std::string baseline;
  if (fs::exists(path / "bench.json", ec)) {
    try {
      baseline = read_json(path / "bench.json").value("baseline", std::string());
    } catch (const EvidenceError&) {
    }
  }
  std::stable_partition(subs.begin(), subs.end(), [&](const fs::path& p) { return p.filename() == baseline; });
  for (const auto& s : subs)
    for (auto& f : find_run_folders(s, skipped)) out.push_back(std::move(f));
  return out;
}

namespace {

std::string ms(double s) { return fmt::format("{:.2f}", s * 1e3); }

}  // namespace

std::string analysis_markdown(const json& report) {
  std::string md = "# wanlab analyze\n\n";
  const auto& runs = report.at("runs");
  if (runs.size() > 1) {
    md += "## Index\n\n| run | scenario | policy | backend | host | commit | step (ms) | phases sum (ms) |\n"
          "| --- | --- | --- | --- | --- | --- | ---: | ---: |\n";
    for (const auto& r : runs) {
      const auto card = r.value("card", json::object());
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", r.at("folder").get<std::string>(),
                        r.value("scenario", ""), r.value("policy", ""), r.value("backend", ""),
                        card.value("host", "-"), card.value("commit", "-"), ms(r.at("step_time_s").get<double>()),
                        ms(r.at("check").at("phase_sum_s").get<double>()));
    }
    md += "\n";
  }
  for (const auto& cmp : report.value("comparisons", json::array())) {
    md += fmt::format("## Comparison: {} (reference {})\n\n", cmp.value("scenario", ""), cmp.at("reference").get<std::string>());
    md += "Per iteration, mean over GPUs (ms); critical path (ms): compute / WAN-or-LAN transfers / all-reduce / idle.\n\n"
          "| run | step | compute | exposed pipeline | exposed all-reduce | idle | overlapped | overlap | critical "
          "path c / t / ar / idle | Δ step | explained by |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |\n";
    for (const auto& r : cmp.at("runs"))
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.0f} % | {} / {} / {} / {} | {} | {} |\n",
                        r.at("name").get<std::string>(), ms(r.at("step_time_s")), ms(r.at("compute_s")),
                        ms(r.at("exposed_pipeline_s")), ms(r.at("exposed_allreduce_s")), ms(r.at("idle_s")),
                        ms(r.at("overlapped_s")), 100 * r.at("overlap").get<double>(),
                        ms(r.at("critical_path_compute_s")), ms(r.at("critical_path_transfer_s")),
                        ms(r.at("critical_path_allreduce_s")),
                        ms(r.at("critical_path_idle_s").get<double>() + r.at("critical_path_wait_s").get<double>()),
                        r.contains("delta_step_s") ? fmt::format("{:+.2f}", r["delta_step_s"].get<double>() * 1e3) : "-",
                        r.contains("explained_by") ? fmt::format("{} ({:.0f} %)", r["explained_by"].get<std::string>(),
                                                                 100 * r["explained_share"].get<double>())
                                                   : "reference");
    md += "\n";
    for (const auto& r : cmp.at("runs"))
      if (r.contains("explanation")) md += "- " + r["explanation"].get<std::string>() + "\n";
    md += "\n";
  }
  for (const auto& r : runs) {
    md += fmt::format("## {} ({}, policy {}, backend {})\n\n", r.at("name").get<std::string>(), r.value("scenario", ""),
                      r.value("policy", ""), r.value("backend", ""));
    const auto& c = r.at("check");
    md += fmt::format("Step time {} ms (summary.json, mean of {} measured iterations); compute + exposed pipeline + "
                      "exposed all-reduce + idle, mean over {} GPUs: {} ms ({:.3f} % off); critical path {} ms.\n\n",
                      ms(r.at("step_time_s")), r.at("measured_iterations").get<int>(), r.at("gpus").get<int>(),
                      ms(c.at("phase_sum_s")), 100 * c.at("phase_sum_error").get<double>(),
                      ms(c.at("critical_path_s")));
    const auto row = [](const std::string& label, const json& p) {
      return fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.0f} % |\n", label, ms(p.at("compute_s")),
                         ms(p.at("exposed_pipeline_s")), ms(p.at("exposed_allreduce_s")), ms(p.at("idle_s")),
                         ms(p.at("idle_sending_s")), ms(p.at("overlapped_s")), 100 * p.at("overlap").get<double>());
    };
    const std::string head = "| {} | compute | exposed pipeline | exposed all-reduce | idle | idle, sending | "
                             "overlapped | overlap |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    md += "Per stage (ms per iteration, mean over the stage's GPUs):\n\n" + fmt::format(fmt::runtime(head), "stage");
    for (const auto& s : r.at("per_stage")) md += row(fmt::format("{} ({} GPUs)", s.at("stage").get<int>(), s.at("gpus").get<int>()), s);
    md += row("all", r.at("mean"));
    md += "\nPer GPU:\n\n" + fmt::format(fmt::runtime(head), "GPU (worker, DC, stage)");
    for (const auto& g : r.at("per_gpu"))
      md += row(fmt::format("w{} {} s{}", g.at("worker").get<int>(), g.at("dc").get<std::string>(), g.at("stage").get<int>()), g);
    if (!r.at("wan_links").empty()) {
      md += "\nWAN links (bandwidth of each transfer: bytes over its send span; busy: bytes over the time any "
            "transfer was on the link):\n\n| link | transfers | MB per iteration | per transfer Gbit/s p50 (min-max) | "
            "busy Gbit/s | rate as run Gbit/s | busy / rate | utilization |\n| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n";
      for (const auto& l : r.at("wan_links"))
        md += fmt::format("| {}->{} | {} | {:.2f} | {:.3f} ({:.3f}-{:.3f}) | {:.3f} | {:.3f} | {:.0f} % | {:.1f} % |\n",
                          l.at("src").get<std::string>(), l.at("dst").get<std::string>(), l.at("transfers").get<int>(),
                          l.at("bytes_per_iteration").get<double>() / 1e6, l["transfer_gbit_s"]["p50"].get<double>(),
                          l["transfer_gbit_s"]["min"].get<double>(), l["transfer_gbit_s"]["max"].get<double>(),
                          l.at("busy_gbit_s").get<double>(), l.at("rate_gbit_s").get<double>(),
                          100 * l.at("busy_fraction_of_rate").get<double>(), 100 * l.at("utilization").get<double>());
    }
    if (!r.at("allreduce").empty()) {
      md += "\nAll-reduces (ring):\n\n| stage | ranks | MB | algorithm Gbit/s | bus Gbit/s |\n| --- | ---: | ---: | ---: | ---: |\n";
      for (const auto& a : r.at("allreduce"))
        md += fmt::format("| {} | {} | {:.2f} | {:.3f} | {:.3f} |\n", a.at("stage").get<int>(), a.at("ranks").get<int>(),
                          a.at("bytes").get<double>() / 1e6, a.at("alg_gbit_s").get<double>(), a.at("bus_gbit_s").get<double>());
    }
    const auto& cp = r.at("critical_path");
    md += fmt::format("\nCritical path (ms per iteration): compute {}, transfers {}, all-reduce {}, waits {}, idle {}; "
                      "total {}.\n",
                      ms(cp.at("compute_s")), ms(cp.at("transfer_s")), ms(cp.at("allreduce_s")), ms(cp.at("wait_s")),
                      ms(cp.at("idle_s")), ms(cp.at("total_s")));
    std::string chain;
    std::size_t n = 0;
    for (const auto& h : cp.at("hops")) {
      if (++n > 40) {
        chain += fmt::format(" → ... ({} more)", cp.at("hops").size() - 40);
        break;
      }
      chain += (chain.empty() ? "" : " → ") +
               (h.contains("from_worker")
                    ? fmt::format("{} w{}→w{} {}", h.at("kind").get<std::string>(), h.at("from_worker").get<int>(),
                                  h.at("worker").get<int>(), ms(h.at("duration_s")))
                    : fmt::format("{} w{} {}", h.at("kind").get<std::string>(), h.at("worker").get<int>(),
                                  ms(h.at("duration_s"))));
    }
    md += fmt::format("Iteration {}: {}\n\n", cp.at("first_measured_iteration").get<int>(), chain);
  }
  for (const auto& s : report.value("skipped", json::array())) md += "- not analyzed: " + s.get<std::string>() + "\n";
  return md;
}

}  // namespace wanlab::evidence
