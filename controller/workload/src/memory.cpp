// The memory model of memory.hpp: per stage and GPU, what a plan stores against what the
// GPU kind has.
#include "wanlab/workload/memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "wanlab/core/diagnostics.hpp"
#include "wanlab/workload/cost.hpp"
#include "wanlab/workload/plan.hpp"

namespace wanlab::workload {
namespace {

using program::BackwardPart;
using program::OpKind;

double gib(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

// One stage's schedule, reduced to what the memory model needs: after each forward, U_c =
// the units chunk c holds (a forward adds 2, a full backward frees 2, a zero-bubble input
// pass 1 and its weight pass the other 1). The peak of sum_c layers_c U_c over those points
// is reached at a point no other dominates in every chunk, so only those are kept; the
// profile depends on (schedule, v, pp, stage, micro-batches) alone and is memoized.
struct Profile {
  std::vector<std::vector<std::int64_t>> frontier;  // undominated U vectors after forwards
  std::int64_t last_chunk_peak = 0;                 // max U_{v-1} after forwards (the head)
  int in_flight = 0;                                // max forwards held
  std::size_t chunks = 0;                           // highest chunk seen + 1
};

Profile make_profile(const std::vector<PipelineStep>& steps, int v) {
  Profile p;
  std::vector<std::int64_t> u(static_cast<std::size_t>(std::max(v, 1)), 0);
  int held = 0;
  for (const auto& st : steps) {
    const auto c = static_cast<std::size_t>(st.chunk);
    if (c >= u.size()) u.resize(c + 1, 0);
    p.chunks = std::max(p.chunks, c + 1);
    if (st.kind == OpKind::forward) {
      u[c] += 2;
      ++held;
      p.in_flight = std::max(p.in_flight, held);
      if (static_cast<int>(c) == v - 1) p.last_chunk_peak = std::max(p.last_chunk_peak, u[c]);
      const auto dominates = [](const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
        for (std::size_t i = 0; i < b.size(); ++i)
          if ((i < a.size() ? a[i] : 0) < b[i]) return false;
        return true;
      };
      if (std::any_of(p.frontier.begin(), p.frontier.end(), [&](const auto& f) { return dominates(f, u); })) continue;
      std::erase_if(p.frontier, [&](const auto& f) { return dominates(u, f); });
      p.frontier.push_back(u);
    } else {
      u[c] -= st.part == BackwardPart::full ? 2 : 1;
      if (st.part != BackwardPart::input) --held;
    }
  }
  return p;
}

using ProfileKey = std::tuple<int, int, int, int, int>;  // schedule, v, pp, stage, micro-batches

std::shared_ptr<const Profile> profile(Schedule schedule, int v, int pp, int stage, int micro_batches) {
  static std::mutex mutex;
  static std::map<ProfileKey, std::shared_ptr<const Profile>> cache;
  const ProfileKey key{static_cast<int>(schedule), v, pp, stage, micro_batches};
  {
    const std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  // Built outside the lock: pipeline_steps validates (and throws) as before.
  std::vector<std::pair<ProfileKey, std::shared_ptr<const Profile>>> made;
  if (schedule == Schedule::gpipe && pp >= 1 && stage >= 0 && stage < pp && micro_batches > 0 && v >= 1) {
    // Closed form: every forward (chunk 0) runs before any backward.
    Profile p;
    p.frontier = {{2 * static_cast<std::int64_t>(micro_batches)}};
    p.last_chunk_peak = v == 1 ? 2 * static_cast<std::int64_t>(micro_batches) : 0;
    p.in_flight = micro_batches;
    p.chunks = 1;
    made.emplace_back(key, std::make_shared<const Profile>(std::move(p)));
  } else if (schedule == Schedule::zb_h1 && stage >= 0 && stage < pp) {
    // ZB-H1's steps come for every stage at once: keep them all.
    for (int st = 0; st < pp; ++st)
      made.emplace_back(
          ProfileKey{static_cast<int>(schedule), v, pp, st, micro_batches},
          std::make_shared<const Profile>(make_profile(pipeline_steps(schedule, v, pp, st, micro_batches), v)));
  } else {
    made.emplace_back(
        key, std::make_shared<const Profile>(make_profile(pipeline_steps(schedule, v, pp, stage, micro_batches), v)));
  }
  const std::lock_guard lock(mutex);
  std::shared_ptr<const Profile> out;
  for (auto& [k, p] : made) {
    auto it = cache.try_emplace(k, std::move(p)).first;
    if (k == key) out = it->second;
  }
  return out;
}

}  // namespace

SchedulePeak schedule_peak_stepwise(Schedule schedule, int virtual_stages, int pp, int stage, int micro_batches,
                                    const std::vector<int>& chunk_layers, bool has_head) {
  const int v = virtual_stages;
  SchedulePeak peak;
  std::int64_t units = 0, head = 0;
  int held = 0;
  for (const auto& st : pipeline_steps(schedule, v, pp, stage, micro_batches)) {
    const auto layers = static_cast<std::int64_t>(chunk_layers.at(static_cast<std::size_t>(st.chunk)));
    const bool head_chunk = has_head && st.chunk == v - 1;
    std::int64_t delta = 0, hdelta = 0;
    if (st.kind == OpKind::forward) {
      delta = 2 * layers;
      hdelta = head_chunk ? 2 : 0;
      ++held;
    } else {
      delta = st.part == BackwardPart::full ? -2 * layers : -layers;
      hdelta = head_chunk ? (st.part == BackwardPart::full ? -2 : -1) : 0;
      if (st.part != BackwardPart::input) --held;
    }
    units += delta;
    head += hdelta;
    // Peaks are taken after forwards: the most the stage holds at once.
    if (st.kind == OpKind::forward) {
      peak.layer_units = std::max(peak.layer_units, static_cast<std::uint64_t>(units));
      peak.head_units = std::max(peak.head_units, static_cast<std::uint64_t>(head));
      peak.in_flight = std::max(peak.in_flight, held);
    }
  }
  return peak;
}

SchedulePeak schedule_peak(Schedule schedule, int virtual_stages, int pp, int stage, int micro_batches,
                           const std::vector<int>& chunk_layers, bool has_head) {
  const auto p = profile(schedule, virtual_stages, pp, stage, micro_batches);
  if (p->chunks > chunk_layers.size())
    throw std::out_of_range(fmt::format("schedule_peak: the schedule runs {} chunks, {} given layer counts", p->chunks,
                                        chunk_layers.size()));
  SchedulePeak peak;
  for (const auto& u : p->frontier) {
    std::int64_t units = 0;
    for (std::size_t c = 0; c < u.size() && c < chunk_layers.size(); ++c)
      units += u[c] * static_cast<std::int64_t>(chunk_layers[c]);
    peak.layer_units = std::max(peak.layer_units, static_cast<std::uint64_t>(units));
  }
  peak.head_units = has_head ? static_cast<std::uint64_t>(p->last_chunk_peak) : 0;
  peak.in_flight = p->in_flight;
  return peak;
}

std::uint64_t gpu_memory_bytes(std::string_view kind) {
  // Data-sheet HBM capacities (SXM parts): A100 80GB, H100 80GB, H200 141GB.
  if (kind == "A100") return 80 * kGiB;
  if (kind == "H100") return 80 * kGiB;
  if (kind == "H200") return 141 * kGiB;
  throw std::invalid_argument(fmt::format("no memory figure for GPU kind \"{}\"", kind));
}

double optimizer_bytes_per_parameter(const Scenario& s) {
  if (s.memory.optimizer_bytes_per_parameter) return *s.memory.optimizer_bytes_per_parameter;
  return s.model.dtype == Dtype::fp32 ? 8 : 12;
}

std::uint64_t layer_activation_bytes(const ModelSpec& m, int micro_batch_size, int tp, bool sequence_parallel) {
  const auto b = static_cast<std::uint64_t>(dtype_bytes(m.dtype));
  const auto T = static_cast<std::uint64_t>(micro_batch_size) * static_cast<std::uint64_t>(m.seq_len);
  const auto h = static_cast<std::uint64_t>(m.hidden);
  const auto d = h / static_cast<std::uint64_t>(m.heads);
  const auto f = static_cast<std::uint64_t>(m.ffn_hidden);
  const auto t = static_cast<std::uint64_t>(tp);
  const std::uint64_t replicated = 4 * b * T * h / (sequence_parallel ? t : 1);
  const std::uint64_t attention = b * T * (2 * h + 2 * static_cast<std::uint64_t>(m.kv_heads) * d) / t;
  const std::uint64_t mlp = b * T * (m.gated_mlp ? 3 * f : 2 * f) / t;
  const std::uint64_t softmax = 4 * T * static_cast<std::uint64_t>(m.heads) / t;
  return replicated + attention + mlp + softmax;
}

std::vector<StageMemory> stage_memory(const Scenario& s) {
  const auto& m = s.model;
  const auto& par = s.parallelism;
  const auto costs = stage_costs(m, par, s.micro_batch_size, stage_layers(s));
  const auto b = static_cast<std::uint64_t>(dtype_bytes(m.dtype));
  const auto T = static_cast<std::uint64_t>(s.micro_batch_size) * static_cast<std::uint64_t>(m.seq_len);
  const auto h = static_cast<std::uint64_t>(m.hidden);
  const bool sp = s.memory.sequence_parallel;
  const auto tp = static_cast<std::uint64_t>(par.tp);
  const std::uint64_t per_layer = layer_activation_bytes(m, s.micro_batch_size, par.tp, sp);
  const std::uint64_t head_bytes =
      2 * b * T * h / (sp ? tp : 1) + 4 * T * static_cast<std::uint64_t>(m.vocab) / tp;
  const double opt = optimizer_bytes_per_parameter(s) / (s.memory.distributed_optimizer ? par.dp : 1);
  std::vector<StageMemory> out;
  for (const auto& c : costs) {
    StageMemory sm;
    sm.stage = c.stage;
    sm.weights = c.parameters_per_gpu * b;
    sm.gradients = c.parameters_per_gpu * b;
    sm.optimizer = static_cast<std::uint64_t>(static_cast<double>(c.parameters_per_gpu) * opt);
    sm.reserve = s.memory.reserve_bytes;
    const auto chunk_layers = s.virtual_stages > 1 ? split_layers(c.layers, s.virtual_stages) : std::vector<int>{c.layers};
    const SchedulePeak peak =
        schedule_peak(s.schedule, s.virtual_stages, par.pp, c.stage, s.micro_batches, chunk_layers, c.lm_head);
    sm.peak_in_flight = peak.in_flight;
    if (s.memory.recompute) {
      // Each held (micro-batch, layer) keeps its input; one layer (and the logits) is rebuilt at a time.
      const std::uint64_t input = b * T * h / (sp ? tp : 1);
      sm.activations = peak.layer_units * input / 2 + per_layer + (c.lm_head ? head_bytes : 0);
    } else {
      sm.activations = peak.layer_units * per_layer / 2 + peak.head_units * head_bytes / 2;
    }
    out.push_back(sm);
  }
  return out;
}

std::vector<StageFit> memory_fit(const Scenario& s, const core::Topology& topo,
                                 const std::vector<std::vector<std::size_t>>& stage_dcs) {
  const auto need = stage_memory(s);
  std::vector<StageFit> out;
  for (const auto& sm : need) {
    StageFit f;
    f.memory = sm;
    f.available = std::numeric_limits<std::uint64_t>::max();
    const auto st = static_cast<std::size_t>(sm.stage);
    if (st < stage_dcs.size())
      for (std::size_t dc : stage_dcs[st]) {
        const auto& kind = topo.dcs.at(dc).gpu;
        const std::uint64_t bytes = gpu_memory_bytes(kind);
        if (bytes < f.available) {
          f.available = bytes;
          f.gpu = kind;
          f.dc = topo.dcs.at(dc).name;
        }
      }
    if (f.gpu.empty()) f.available = 0;
    out.push_back(f);
  }
  return out;
}

std::vector<StageFit> memory_fit(const Scenario& s, std::string_view kind) {
  const auto need = stage_memory(s);
  std::vector<StageFit> out;
  for (const auto& sm : need) {
    StageFit f;
    f.memory = sm;
    f.gpu = std::string(kind);
    f.available = gpu_memory_bytes(kind);
    out.push_back(f);
  }
  return out;
}

bool fits(const std::vector<StageFit>& fit) {
  return std::all_of(fit.begin(), fit.end(), [](const StageFit& f) { return f.fits(); });
}

std::string describe(const StageFit& f) {
  const auto& m = f.memory;
  std::string reserve = m.reserve > 0 ? fmt::format(" + reserve {:.1f}", gib(m.reserve)) : "";
  return fmt::format(
      "stage {} needs {:.1f} GiB per GPU (weights {:.1f} + gradients {:.1f} + optimizer {:.1f} + activations {:.1f}{} "
      "GiB, {} micro-batch{} in flight) of the {:.1f} GiB of an {}{}",
      m.stage, gib(m.needed()), gib(m.weights), gib(m.gradients), gib(m.optimizer), gib(m.activations), reserve,
      m.peak_in_flight, m.peak_in_flight == 1 ? "" : "es", gib(f.available), f.gpu,
      f.dc.empty() ? "" : fmt::format(" in DC {}", f.dc));
}

void check_memory(const Scenario& s, const std::vector<StageFit>& fit) {
  if (fits(fit)) return;
  std::string lines;
  for (const auto& f : fit)
    if (!f.fits()) lines += fmt::format("\n  {}", describe(f));
  core::Diagnostics d(s.source_file);
  d.add("/parallelism",
        fmt::format("pp {} x dp {} x tp {} does not fit in GPU memory:{}\n  more stages (pp) or tensor parallelism (tp), "
                    "fewer micro-batches in flight (1f1b rather than gpipe), \"memory\": {{\"recompute\": true}} or "
                    "{{\"distributed_optimizer\": true}} would lower it (docs/workloads.md)",
                    s.parallelism.pp, s.parallelism.dp, s.parallelism.tp, lines));
  d.throw_if_any();
}

}  // namespace wanlab::workload
