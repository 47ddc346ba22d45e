// A scenario's canonical JSON form (what a run folder's scenario.json holds).
#include "wanlab/workload/scenario.hpp"

namespace wanlab::workload {
using nlohmann::json;

json to_json(const Scenario& s) {
  const auto& m = s.model;
  json model{{"layers", m.layers},     {"hidden", m.hidden},         {"heads", m.heads},
             {"kv_heads", m.kv_heads}, {"ffn_hidden", m.ffn_hidden}, {"gated_mlp", m.gated_mlp},
             {"seq_len", m.seq_len},   {"vocab", m.vocab},           {"dtype", to_string(m.dtype)}};
  if (!m.preset.empty()) model["preset"] = m.preset;
  json j{{"name", s.name},
         {"topology", s.topology_path.string()},
         {"model", std::move(model)},
         {"gpu", s.mfu ? json{{"mfu", *s.mfu}} : json::object()},
         {"parallelism", {{"pp", s.parallelism.pp}, {"dp", s.parallelism.dp}, {"tp", s.parallelism.tp}}},
         {"schedule", to_string(s.schedule)},
         {"micro_batch_size", s.micro_batch_size},
         {"micro_batches", s.micro_batches},
         {"iterations", s.iterations},
         {"warmup", s.warmup},
         {"connections", s.connections},
         {"policy", s.policy},
         {"compute", to_string(s.compute)},
         {"scale", s.scale},
         {"seed", s.seed},
         {"tcp_slow_start_after_idle", s.tcp_slow_start_after_idle},
         {"tcp_congestion", s.tcp_congestion}};
  if (!s.tcp_pacing) j["tcp_pacing"] = false;
  if (s.allreduce != AllReduce::ring) j["allreduce"] = to_string(s.allreduce);
  if (s.tcp_window) j["tcp_window"] = *s.tcp_window;
  if (s.send_mode != SendMode::eager) j["send_mode"] = to_string(s.send_mode);
  if (s.rails) {
    j["rails"] = {{"policy", s.rails->policy}};
    if (!s.rails->phases.empty()) j["rails"]["phases"] = s.rails->phases;
  }
  if (s.virtual_stages != 1) j["virtual_stages"] = s.virtual_stages;
  if (!s.layers_per_stage.empty()) j["parallelism"]["layers_per_stage"] = s.layers_per_stage;
  if (s.memory != MemorySpec{})
    j["memory"] = {{"distributed_optimizer", s.memory.distributed_optimizer},
                   {"recompute", s.memory.recompute},
                   {"sequence_parallel", s.memory.sequence_parallel},
                   {"reserve_gib", static_cast<double>(s.memory.reserve_bytes) / (1024.0 * 1024.0 * 1024.0)}};
  if (s.memory.optimizer_bytes_per_parameter)
    j["memory"]["optimizer_bytes_per_parameter"] = *s.memory.optimizer_bytes_per_parameter;
  if (s.lan_scale) j["lan_scale"] = *s.lan_scale;
  if (!s.description.empty()) j["description"] = s.description;
  if (!s.placement.empty()) j["placement"] = s.placement;
  if (!s.programs_file.empty()) {
    j["programs"] = s.programs_file.string();
    if (s.model.layers == 0) j.erase("model");  // none given: the programs are the workload
  }
  if (s.prefill) {
    const auto& p = *s.prefill;
    const auto& pm = p.model;
    json pj{{"model",
             {{"layers", pm.layers},     {"hidden", pm.hidden},         {"heads", pm.heads},
              {"kv_heads", pm.kv_heads}, {"ffn_hidden", pm.ffn_hidden}, {"gated_mlp", pm.gated_mlp},
              {"seq_len", pm.seq_len},   {"vocab", pm.vocab},           {"dtype", to_string(pm.dtype)}}},
            {"arrival", p.arrival == PrefillSpec::Arrival::trace ? "trace" : "poisson"},
            {"deadline_s", p.deadline_s},
            {"margin", p.margin},
            {"loadgen", p.loadgen_node},
            {"decode", p.decode_nodes},
            {"inference_nodes", p.inference_nodes},
            {"scale", p.scale > 0 ? p.scale : s.scale}};
    if (!pm.preset.empty()) pj["model"]["preset"] = pm.preset;
    if (p.arrival == PrefillSpec::Arrival::trace) {
      pj["trace"] = p.trace_file;
      pj["loop"] = p.loop;
    } else {
      pj["rate_per_s"] = p.rate_per_s;
      const auto& t = p.prompt;
      switch (t.kind) {
        case PromptTokens::Kind::fixed: pj["prompt_tokens"] = {{"distribution", "fixed"}, {"tokens", t.tokens}}; break;
        case PromptTokens::Kind::uniform:
          pj["prompt_tokens"] = {{"distribution", "uniform"}, {"min", t.min}, {"max", t.max}};
          break;
        case PromptTokens::Kind::lognormal:
          pj["prompt_tokens"] = {{"distribution", "lognormal"}, {"median", t.median}, {"sigma", t.sigma},
                                 {"min", t.min}, {"max", t.max}};
          break;
      }
    }
    j["prefill"] = std::move(pj);
  }
  return j;
}

}  // namespace wanlab::workload
