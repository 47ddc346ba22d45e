// Scenario files: reading and validation (every problem at once, each with its JSON
// pointer). The canonical JSON form is in scenario_json.cpp, the names of the scenario's
// choices and the model presets in scenario_names.cpp. The format is documented in
// bench/scenarios/README.md.
#include "wanlab/workload/scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <system_error>

#include "wanlab/arbiter/arbiter.hpp"
#include "wanlab/arbiter/rail_policy.hpp"
#include "wanlab/common/units.hpp"
#include "wanlab/core/json_fields.hpp"
#include "wanlab/workload/program_file.hpp"

namespace wanlab::workload {
namespace fs = std::filesystem;
using nlohmann::json;
using namespace core::fields;

namespace {

constexpr std::string_view kCongestion[] = {"cubic", "bbr", "reno"};
constexpr std::string_view kAllReduces[] = {"ring", "hierarchical"};
constexpr std::string_view kTopKeys[] = {
    "name",     "description",      "topology",      "model",      "gpu",      "parallelism",
    "schedule", "micro_batch_size", "micro_batches", "iterations", "warmup",   "connections",
    "policy",   "compute",          "scale",         "lan_scale",     "seed",       "placement", "tcp_slow_start_after_idle", "tcp_pacing", "tcp_congestion", "tcp_window", "prefill", "allreduce", "recompute", "send_mode", "virtual_stages", "memory", "programs", "rails"};
constexpr std::string_view kRailsKeys[] = {"policy", "phases"};
constexpr std::string_view kMemoryKeys[] = {"optimizer_bytes_per_parameter", "distributed_optimizer", "recompute",
                                            "sequence_parallel", "reserve_gib"};
constexpr std::string_view kPrefillKeys[] = {"model",  "arrival", "rate_per_s", "trace",           "loop",
                                             "prompt_tokens", "deadline_s", "margin", "loadgen", "decode",
                                             "inference_nodes", "scale"};
constexpr std::string_view kPromptKeys[] = {"distribution", "tokens", "min", "max", "median", "sigma"};
constexpr std::string_view kArrivals[] = {"poisson", "trace"};
constexpr std::string_view kPromptDistributions[] = {"fixed", "uniform", "lognormal"};
constexpr std::int64_t kMaxPromptTokens = 1 << 20;
constexpr std::string_view kModelKeys[] = {"preset",     "layers",    "hidden",  "heads", "kv_heads",
                                           "ffn_hidden", "gated_mlp", "seq_len", "vocab", "dtype"};
constexpr std::string_view kGpuKeys[] = {"mfu"};
constexpr std::string_view kParallelismKeys[] = {"pp", "dp", "tp", "layers_per_stage"};
constexpr std::string_view kSchedules[] = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1"};
constexpr std::string_view kComputeModes[] = {"modeled", "cuda"};
constexpr std::string_view kSendModes[] = {"eager", "rendezvous"};
constexpr std::string_view kDtypes[] = {"bf16", "fp16", "fp32"};

constexpr std::size_t kMaxName = 64;
constexpr int kMaxConnections = 64;
// Bounds that keep every product (tokens x hidden x layers, FLOPs) far from overflow while
// leaving room for far larger models than anyone emulates.
constexpr std::int64_t kMaxLayers = 1024;
constexpr std::int64_t kMaxHidden = 1 << 17;
constexpr std::int64_t kMaxHeads = 1024;
constexpr std::int64_t kMaxFfn = 1 << 20;
constexpr std::int64_t kMaxSeq = 1 << 21;
constexpr std::int64_t kMaxVocab = 1 << 22;
constexpr std::int64_t kMaxParallel = 4096;
constexpr std::int64_t kMaxGpus = 1 << 16;  // far beyond a lab on one machine, and ids stay ints
constexpr std::int64_t kMaxMicroBatchSize = 4096;
constexpr std::int64_t kMaxMicroBatches = 1 << 16;
constexpr std::int64_t kMaxIterations = 1 << 20;

std::vector<std::string_view> preset_names() {
  std::vector<std::string_view> names;
  for (const auto& p : model_presets()) names.push_back(p.preset);
  return names;
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

void check_name(const std::string& name, const std::string& path, core::Diagnostics& d) {
  const bool ok = !name.empty() && name_char(name.front()) &&
                  std::all_of(name.begin(), name.end(), [](char c) { return name_char(c) || c == '-'; });
  if (!ok)
    d.add(path, fmt::format("'{}': use lowercase letters, digits and '-', starting with a letter or digit "
                            "([a-z0-9][a-z0-9-]*): the name names run folders and files",
                            name));
  else if (name.size() > kMaxName)
    d.add(path, fmt::format("'{}' is {} characters, at most {} allowed", name, name.size(), kMaxName));
}

// An integer field of an object, stored into `out` when present and valid.
void read_int(const json& obj, const std::string& path, std::string_view key, std::int64_t lo, std::int64_t hi,
              std::string_view why, int& out, core::Diagnostics& d) {
  if (const json* v = find(obj, key))
    if (auto i = as_integer(*v, child(path, key), lo, hi, why, d)) out = static_cast<int>(*i);
}

// Which fields a document set, so defaults and cross-checks apply only where they should.
struct ModelFields {
  bool ok = true;  // false: the model section is broken; skip the checks that use it
  bool kv_heads = false;
  bool ffn_hidden = false;
};

class ScenarioParser {
 public:
  ScenarioParser(Scenario& s, const fs::path& base_dir, core::Diagnostics& d) : s_(s), base_dir_(base_dir), d_(d) {}

  void parse(const json& doc) {
    check_keys(doc, "", kTopKeys, d_);
    name(find(doc, "name"));
    if (const json* v = find(doc, "description"))
      if (auto desc = as_string(*v, "/description", "a string", d_)) s_.description = *desc;
    topology(find(doc, "topology"));
    const json* programs_doc = find(doc, "programs");
    programs_given_ = programs_doc != nullptr;
    if (programs_doc) programs(*programs_doc);
    if (!programs_doc || find(doc, "model"))
      model(find(doc, "model"), "/model", s_.model, model_);
    else
      model_.ok = false;  // replayed programs need no model
    gpu(find(doc, "gpu"));
    if (!programs_doc || find(doc, "parallelism")) parallelism(find(doc, "parallelism"));
    if (!s_.programs.empty() && parallel_ok_ && s_.parallelism != Parallelism{static_cast<int>(s_.programs.size()), 1, 1})
      d_.add("/parallelism", fmt::format("pp {}, dp {}, tp {}: the programs are {} workers, replayed as pp {}, dp 1, "
                                         "tp 1; leave parallelism out",
                                         s_.parallelism.pp, s_.parallelism.dp, s_.parallelism.tp, s_.programs.size(),
                                         s_.programs.size()));
    run_shape(doc);
    memory(find(doc, "memory"));
    placement(find(doc, "placement"));
    prefill(find(doc, "prefill"));
    cross_checks();
  }

 private:
  // `programs`: a file of worker programs replayed in place of the model's (program_file.hpp).
  void programs(const json& v) {
    const std::string path = "/programs";
    auto given = as_string(v, path, "a path to a file of worker programs (import-trace's import.json)", d_);
    if (!given) return;
    fs::path resolved = (base_dir_ / *given).lexically_normal();
    std::error_code ec;
    if (auto abs = fs::absolute(resolved, ec); !ec) resolved = abs;
    try {
      auto loaded = read_program_file(resolved);
      s_.programs_file = resolved;
      s_.programs = std::move(loaded.programs);
      s_.programs_effective_flops = loaded.effective_flops;
      s_.parallelism = {static_cast<int>(s_.programs.size()), 1, 1};
    } catch (const core::ConfigError& e) {
      for (const auto& item : e.diagnostics()) d_.add(path, item.to_string());
    }
  }

  void name(const json* v) {
    if (v == nullptr) {
      d_.add("/name", "missing: every scenario needs a name such as \"three-dc-7b\"");
      return;
    }
    if (auto n = as_string(*v, "/name", "a scenario name such as \"three-dc-7b\"", d_)) {
      check_name(*n, "/name", d_);
      s_.name = *n;
    }
  }

  void topology(const json* v) {
    const std::string path = "/topology";
    if (v == nullptr) {
      d_.add(path, "missing: give the lab's topology file, relative to this file's folder");
      return;
    }
    auto given = as_string(*v, path, "a path to a topology file", d_);
    if (!given) return;
    if (given->empty()) {
      d_.add(path, "empty path; give the topology file relative to this file's folder");
      return;
    }
    fs::path resolved = base_dir_ / *given;
    std::error_code ec;
    if (auto abs = fs::absolute(resolved, ec); !ec) resolved = abs;
    resolved = resolved.lexically_normal();
    if (!fs::exists(resolved, ec))
      d_.add(path, fmt::format("topology file not found: {}", resolved.string()));
    else if (fs::is_directory(resolved, ec))
      d_.add(path, fmt::format("topology path is a folder, not a file: {}", resolved.string()));
    else
      s_.topology_path = resolved;
  }

  // Reads a model (a preset name or an object) at `path` into `m`; `f` says which fields it set.
  void model(const json* v, const std::string& path, ModelSpec& m, ModelFields& f) {
    const auto names = preset_names();
    const auto unknown_preset = [&](const std::string& name, const std::string& at) {
      d_.add(at,
             fmt::format("unknown model preset \"{}\"{}; presets: {}", name, did_you_mean(name, names), join(names)));
    };
    if (v == nullptr) {
      d_.add(path, fmt::format("missing: give a preset name ({}) or an object with the model's shape", join(names)));
      f.ok = false;
      return;
    }
    if (v->is_string()) {
      const auto& preset = v->get_ref<const std::string&>();
      if (const ModelSpec* p = find_preset(preset)) {
        m = *p;
        f.kv_heads = f.ffn_hidden = true;
      } else {
        unknown_preset(preset, path);
        f.ok = false;
      }
      return;
    }
    if (!is_object(*v, path, "a preset name such as \"7b\" or an object such as {\"preset\": \"7b\", \"layers\": 8}",
                   d_)) {
      f.ok = false;
      return;
    }
    check_keys(*v, path, kModelKeys, d_);
    const std::size_t problems_before = d_.items().size();
    bool from_preset = false;
    if (const json* p = find(*v, "preset")) {
      if (auto preset = as_string(*p, child(path, "preset"), "a preset name such as \"7b\"", d_)) {
        if (const ModelSpec* spec = find_preset(*preset)) {
          m = *spec;
          from_preset = true;
          f.kv_heads = f.ffn_hidden = true;
        } else {
          unknown_preset(*preset, child(path, "preset"));
        }
      }
      // A broken preset leaves the shape unknown; saying that every field is missing too would be noise.
      if (!from_preset) {
        f.ok = false;
        return;
      }
    }
    const auto required = [&](std::string_view key, std::int64_t hi, int& out) {
      if (find(*v, key) == nullptr && !from_preset) {
        d_.add(child(path, key), fmt::format("missing: a custom model needs \"{}\" (or start from a \"preset\")", key));
        return;
      }
      read_int(*v, path, key, 1, hi, "", out, d_);
    };
    required("layers", kMaxLayers, m.layers);
    required("hidden", kMaxHidden, m.hidden);
    required("heads", kMaxHeads, m.heads);
    required("seq_len", kMaxSeq, m.seq_len);
    required("vocab", kMaxVocab, m.vocab);
    if (find(*v, "kv_heads") != nullptr) {
      f.kv_heads = true;
      read_int(*v, path, "kv_heads", 1, kMaxHeads, "", m.kv_heads, d_);
    }
    if (find(*v, "ffn_hidden") != nullptr) {
      f.ffn_hidden = true;
      read_int(*v, path, "ffn_hidden", 1, kMaxFfn, "", m.ffn_hidden, d_);
    }
    if (const json* g = find(*v, "gated_mlp"))
      if (auto gated = as_bool(*g, child(path, "gated_mlp"), d_)) m.gated_mlp = *gated;
    if (const json* t = find(*v, "dtype"))
      if (auto dtype = as_choice(*t, child(path, "dtype"), "a data type such as \"bf16\"", kDtypes, d_))
        m.dtype = *dtype == "bf16" ? Dtype::bf16 : *dtype == "fp16" ? Dtype::fp16 : Dtype::fp32;
    if (d_.items().size() != problems_before) {
      f.ok = false;
      return;
    }
    if (!f.kv_heads) m.kv_heads = m.heads;
    if (!f.ffn_hidden) m.ffn_hidden = default_ffn_hidden(m.hidden, m.gated_mlp);
  }

  void gpu(const json* v) {
    if (v == nullptr || !is_object(*v, "/gpu", "an object such as {\"mfu\": 0.4}", d_)) return;
    check_keys(*v, "/gpu", kGpuKeys, d_);
    if (const json* m = find(*v, "mfu"))
      if (auto mfu = as_fraction(*m, "/gpu/mfu", "the fraction of the GPU's peak FLOP/s a stage achieves", d_))
        s_.mfu = *mfu;
  }

  void parallelism(const json* v) {
    const std::string path = "/parallelism";
    if (v == nullptr) {
      d_.add(path, "missing: give {\"pp\": stages, \"dp\": replicas, \"tp\": GPUs per replica}");
      parallel_ok_ = false;
      return;
    }
    if (!is_object(*v, path, "an object such as {\"pp\": 3, \"dp\": 4, \"tp\": 8}", d_)) {
      parallel_ok_ = false;
      return;
    }
    check_keys(*v, path, kParallelismKeys, d_);
    auto& p = s_.parallelism;
    const std::pair<std::string_view, int*> entries[] = {{"pp", &p.pp}, {"dp", &p.dp}, {"tp", &p.tp}};
    for (const auto& [key, out] : entries) {
      if (find(*v, key) == nullptr) {
        d_.add(child(path, key), "missing: give a positive integer");
        parallel_ok_ = false;
        continue;
      }
      const std::size_t before = d_.items().size();
      read_int(*v, path, key, 1, kMaxParallel, "", *out, d_);
      if (d_.items().size() != before) parallel_ok_ = false;
    }
    if (const json* l = find(*v, "layers_per_stage")) {
      const std::string lpath = child(path, "layers_per_stage");
      if (!l->is_array() || l->empty()) {
        d_.add(lpath, "expected an array of layer counts, one per stage, such as [9, 8, 7, 8]");
        return;
      }
      std::vector<int> layers;
      for (std::size_t i = 0; i < l->size(); ++i)
        if (auto n = as_integer((*l)[i], fmt::format("{}/{}", lpath, i), 1, kMaxLayers, "every stage needs a layer",
                                d_))
          layers.push_back(static_cast<int>(*n));
      if (layers.size() == l->size()) s_.layers_per_stage = std::move(layers);
      else layers_ok_ = false;
    }
  }

  void memory(const json* v) {
    const std::string path = "/memory";
    if (v == nullptr || !is_object(*v, path, "an object such as {\"recompute\": true}", d_)) return;
    check_keys(*v, path, kMemoryKeys, d_);
    auto& m = s_.memory;
    if (const json* o = find(*v, "optimizer_bytes_per_parameter"))
      if (auto n = as_number(*o, child(path, "optimizer_bytes_per_parameter"), 0, 64,
                             "optimizer state bytes per parameter (mixed-precision Adam: 12)", d_))
        m.optimizer_bytes_per_parameter = *n;
    if (const json* o = find(*v, "distributed_optimizer"))
      if (auto b = as_bool(*o, child(path, "distributed_optimizer"), d_)) m.distributed_optimizer = *b;
    if (const json* o = find(*v, "recompute"))
      if (auto b = as_bool(*o, child(path, "recompute"), d_)) m.recompute = *b;
    if (const json* o = find(*v, "sequence_parallel"))
      if (auto b = as_bool(*o, child(path, "sequence_parallel"), d_)) m.sequence_parallel = *b;
    if (const json* o = find(*v, "reserve_gib"))
      if (auto n = as_number(*o, child(path, "reserve_gib"), 0, 1024, "GiB kept free per GPU", d_))
        m.reserve_bytes = static_cast<std::uint64_t>(std::llround(*n * 1024.0 * 1024.0 * 1024.0));
  }

  void run_shape(const json& doc) {
    if (const json* v = find(doc, "schedule")) {
      if (auto sched = as_choice(*v, "/schedule", "a schedule name", kSchedules, d_))
        s_.schedule = *sched == "gpipe"              ? Schedule::gpipe
                      : *sched == "1f1b"             ? Schedule::one_f_one_b
                      : *sched == "interleaved-1f1b" ? Schedule::interleaved_1f1b
                                                     : Schedule::zb_h1;
    } else if (!programs_given_) {  // replayed programs carry their own schedule
      d_.add("/schedule", "missing: give the pipeline schedule, \"gpipe\", \"1f1b\", \"interleaved-1f1b\" or \"zb-h1\"");
    }
    if (find(doc, "virtual_stages") != nullptr) {
      const std::size_t before = d_.items().size();
      read_int(doc, "", "virtual_stages", 1, kMaxLayers, "model chunks per GPU", s_.virtual_stages, d_);
      virtual_ok_ = d_.items().size() == before;
    }
    read_int(doc, "", "micro_batch_size", 1, kMaxMicroBatchSize, "", s_.micro_batch_size, d_);
    const auto required = [&](std::string_view key, std::int64_t hi, int& out, std::string_view what) {
      if (find(doc, key) == nullptr) {
        if (programs_given_ && key == "micro_batches") return true;  // the programs' own
        d_.add(child("", key), fmt::format("missing: give {}", what));
        return false;
      }
      const std::size_t before = d_.items().size();
      read_int(doc, "", key, 1, hi, "", out, d_);
      return d_.items().size() == before;
    };
    micro_batches_ok_ = required("micro_batches", kMaxMicroBatches, s_.micro_batches, "the number of micro-batches per iteration");
    iterations_ok_ = required("iterations", kMaxIterations, s_.iterations, "the number of training iterations");
    if (find(doc, "warmup") != nullptr) {
      const std::size_t before = d_.items().size();
      read_int(doc, "", "warmup", 0, kMaxIterations, "", s_.warmup, d_);
      warmup_ok_ = d_.items().size() == before;
    }
    read_int(doc, "", "connections", 1, kMaxConnections, "TCP connections per WAN peer", s_.connections, d_);
    if (const json* v = find(doc, "policy")) {
      std::vector<std::string_view> policies;
      for (const auto& p : known_policies()) policies.push_back(p);
      if (auto policy = as_choice(*v, "/policy", "a bandwidth policy name", policies, d_)) s_.policy = *policy;
    }
    if (const json* v = find(doc, "compute"))
      if (auto mode = as_choice(*v, "/compute", "a compute mode", kComputeModes, d_))
        s_.compute = *mode == "cuda" ? ComputeMode::cuda : ComputeMode::modeled;
    if (const json* v = find(doc, "rails")) parse_rails(*v);
    if (const json* v = find(doc, "send_mode"))
      if (auto mode = as_choice(*v, "/send_mode", "a send mode", kSendModes, d_))
        s_.send_mode = *mode == "rendezvous" ? SendMode::rendezvous : SendMode::eager;
    if (const json* v = find(doc, "scale"))
      if (auto scale = as_fraction(*v, "/scale", "it multiplies bytes and link rates", d_)) s_.scale = *scale;
    if (const json* v = find(doc, "lan_scale"))
      if (auto ls = as_fraction(*v, "/lan_scale", "it multiplies the bytes of DP all-reduces inside a DC", d_))
        s_.lan_scale = *ls;
    if (const json* v = find(doc, "seed"))
      if (auto seed = as_unsigned(*v, "/seed", d_)) s_.seed = *seed;
    if (const json* v = find(doc, "tcp_slow_start_after_idle"))
      if (auto b = as_bool(*v, "/tcp_slow_start_after_idle", d_)) s_.tcp_slow_start_after_idle = *b;
    if (const json* v = find(doc, "tcp_pacing"))
      if (auto b = as_bool(*v, "/tcp_pacing", d_)) s_.tcp_pacing = *b;
    if (const json* v = find(doc, "tcp_congestion"))
      if (auto cc = as_choice(*v, "/tcp_congestion", "a TCP congestion control", kCongestion, d_)) s_.tcp_congestion = *cc;
    if (const json* v = find(doc, "tcp_window")) tcp_window(*v);
    if (const json* v = find(doc, "allreduce"))
      if (auto a = as_choice(*v, "/allreduce", "an all-reduce algorithm", kAllReduces, d_))
        s_.allreduce = *a == "hierarchical" ? AllReduce::hierarchical : AllReduce::ring;
    // Deprecated: the one recomputation switch is memory.recompute; a top-level
    // "recompute" (written by earlier versions, varuna's scenario.json) is read into it.
    if (const json* v = find(doc, "recompute"))
      if (auto b = as_bool(*v, "/recompute", d_)) {
        const json* m = find(doc, "memory");
        const json* mr = m != nullptr && m->is_object() ? find(*m, "recompute") : nullptr;
        if (mr != nullptr && mr->is_boolean() && mr->get<bool>() != *b)
          d_.add("/recompute", fmt::format("{} contradicts /memory/recompute {}: give only \"memory\": "
                                           "{{\"recompute\": ...}} (the top-level field is deprecated)",
                                           *b, mr->get<bool>()));
        else if (mr == nullptr)
          s_.memory.recompute = *b;
        s_.warnings.push_back(fmt::format("{}: /recompute: deprecated: write \"memory\": {{\"recompute\": {}}} "
                                          "instead (one switch: activations and the extra forward)",
                                          d_.file(), *b));
      }
  }

  // A size at full scale: "3MiB", "256KB" or a number of bytes.
  // "rails": {"policy": "phase", "phases": ["pp-forward", ...]} (docs/rails.md). Whether
  // the program has the phases named is checked against the plan (sim/rails.hpp).
  void parse_rails(const json& v) {
    const std::string path = "/rails";
    if (!is_object(v, path, "an object such as {\"policy\": \"phase\"}", d_)) return;
    check_keys(v, path, kRailsKeys, d_);
    RailsSpec r;
    if (const json* p = find(v, "policy")) {
      const auto names = arbiter::rail_policy_names();
      std::vector<std::string_view> known(names.begin(), names.end());
      if (auto name = as_choice(*p, child(path, "policy"), "a rail policy", known, d_)) r.policy = *name;
    }
    if (const json* ph = find(v, "phases")) {
      const auto at = child(path, "phases");
      if (!ph->is_array() || ph->empty()) {
        d_.add(at, fmt::format("expected a non-empty array of phase names such as [\"pp-forward\", \"dp-allreduce\"], "
                               "got {}",
                               describe(*ph)));
      } else if (r.policy != "phase") {
        d_.add(at, fmt::format("only the phase policy takes phases; {} configures its circuits itself", r.policy));
      } else {
        const auto& names = arbiter::rail_phase_names();
        std::vector<std::string_view> known(names.begin(), names.end());
        for (std::size_t i = 0; i < ph->size(); ++i) {
          auto name = as_choice((*ph)[i], child(at, i), "a rail phase", known, d_);
          if (!name) continue;
          if (std::find(r.phases.begin(), r.phases.end(), *name) != r.phases.end())
            d_.add(child(at, i), fmt::format("\"{}\" is listed twice", *name));
          else
            r.phases.push_back(*name);
        }
      }
    }
    s_.rails = std::move(r);
  }

  void tcp_window(const json& v) {
    const std::string path = "/tcp_window";
    std::uint64_t bytes = 0;
    if (v.is_string()) {
      const auto b = parse_bytes(v.get<std::string>());
      if (!b) {
        d_.add(path, b.error);
        return;
      }
      bytes = b.value.value;
    } else if (v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
      bytes = v.get<std::uint64_t>();
    } else {
      d_.add(path, fmt::format("expected a size such as \"3MiB\" (the most one TCP connection keeps in flight at "
                               "full size), got {}",
                               v.dump()));
      return;
    }
    if (bytes < 4096 || bytes > (std::uint64_t{1} << 30)) {
      d_.add(path, fmt::format("{} bytes: give 4KiB to 1GiB", bytes));
      return;
    }
    s_.tcp_window = bytes;
  }

  void placement(const json* v) {
    const std::string path = "/placement";
    if (v == nullptr) return;
    if (!v->is_array()) {
      d_.add(path, fmt::format("expected an array with one entry per stage, each an array of DC names (one per DP "
                               "replica), got {}",
                               describe(*v)));
      return;
    }
    const auto& p = s_.parallelism;
    if (parallel_ok_ && v->size() != static_cast<std::size_t>(p.pp))
      d_.add(path, fmt::format("{} entries for pp {}: give one per stage", v->size(), p.pp));
    std::vector<std::vector<std::string>> out;
    for (std::size_t stage = 0; stage < v->size(); ++stage) {
      const auto& entry = (*v)[stage];
      const std::string at = child(path, stage);
      auto& dcs = out.emplace_back();
      if (!entry.is_array()) {
        d_.add(at, fmt::format("expected an array of DC names, one per DP replica, got {}", describe(entry)));
        continue;
      }
      if (parallel_ok_ && entry.size() != static_cast<std::size_t>(p.dp))
        d_.add(at,
               fmt::format("{} DC names for dp {}: give one per DP replica of stage {}", entry.size(), p.dp, stage));
      for (std::size_t r = 0; r < entry.size(); ++r)
        if (auto dc = as_string(entry[r], child(at, r), "a DC name such as \"use\"", d_)) dcs.push_back(*dc);
    }
    s_.placement = std::move(out);
  }

  void prefill(const json* v) {
    const std::string path = "/prefill";
    if (v == nullptr) return;
    if (!is_object(*v, path, "an object such as {\"rate_per_s\": 200, \"prompt_tokens\": 1024}", d_)) return;
    check_keys(*v, path, kPrefillKeys, d_);
    PrefillSpec p;
    if (const json* m = find(*v, "model")) {
      ModelFields f;
      model(m, child(path, "model"), p.model, f);
    } else {
      p.model = s_.model;  // read before this section
    }
    if (const json* a = find(*v, "arrival"))
      if (auto arrival = as_choice(*a, child(path, "arrival"), "an arrival process", kArrivals, d_))
        p.arrival = *arrival == "trace" ? PrefillSpec::Arrival::trace : PrefillSpec::Arrival::poisson;
    if (p.arrival == PrefillSpec::Arrival::poisson) {
      if (const json* r = find(*v, "rate_per_s")) {
        if (auto rate = as_number(*r, child(path, "rate_per_s"), 1e-6, 1e6, "mean prefill requests per second", d_))
          p.rate_per_s = *rate;
      } else {
        d_.add(child(path, "rate_per_s"), "missing: a Poisson arrival process needs its mean rate (requests per second)");
      }
      if (find(*v, "trace") != nullptr)
        d_.add(child(path, "trace"), "a trace of arrivals needs \"arrival\": \"trace\"");
    } else {
      if (find(*v, "rate_per_s") != nullptr)
        d_.add(child(path, "rate_per_s"), "arrivals come from the trace; drop the rate or use \"arrival\": \"poisson\"");
      if (const json* t = find(*v, "trace")) {
        if (auto file = as_string(*t, child(path, "trace"), "a CSV file of arrivals", d_)) {
          std::error_code ec;
          fs::path resolved = base_dir_ / *file;
          if (auto abs = fs::absolute(resolved, ec); !ec) resolved = abs;
          p.trace_file = resolved.lexically_normal().string();
          read_arrivals(p.trace_file, child(path, "trace"), p.trace);
        }
      } else {
        d_.add(child(path, "trace"), "missing: \"arrival\": \"trace\" needs a CSV file of arrivals (time_s,prompt_tokens)");
      }
    }
    if (const json* l = find(*v, "loop"))
      if (auto loop = as_bool(*l, child(path, "loop"), d_)) p.loop = *loop;
    if (const json* t = find(*v, "prompt_tokens")) prompt_tokens(*t, child(path, "prompt_tokens"), p.prompt);
    if (const json* x = find(*v, "deadline_s"))
      if (auto dl = as_number(*x, child(path, "deadline_s"), 1e-3, 3600, "seconds to the first token", d_))
        p.deadline_s = *dl;
    if (const json* x = find(*v, "margin"))
      if (auto m = as_number(*x, child(path, "margin"), 0, 10, "the admission margin over the predicted run time", d_))
        p.margin = *m;
    if (const json* x = find(*v, "loadgen"))
      if (auto n = as_string(*x, child(path, "loadgen"), "a node name such as \"use-0\"", d_)) p.loadgen_node = *n;
    if (const json* x = find(*v, "decode")) {
      const auto at = child(path, "decode");
      if (x->is_string()) {
        p.decode_nodes.push_back(x->get<std::string>());
      } else if (x->is_array() && !x->empty()) {
        for (std::size_t i = 0; i < x->size(); ++i)
          if (auto n = as_string((*x)[i], child(at, i), "a node name such as \"use-1\"", d_)) p.decode_nodes.push_back(*n);
      } else {
        d_.add(at, fmt::format("expected a node name or a non-empty array of node names (one per DC), got {}", describe(*x)));
      }
    }
    if (const json* x = find(*v, "inference_nodes")) {
      if (!x->is_array()) {
        d_.add(child(path, "inference_nodes"), fmt::format("expected an array of node names, got {}", describe(*x)));
      } else {
        for (std::size_t i = 0; i < x->size(); ++i)
          if (auto n = as_string((*x)[i], child(child(path, "inference_nodes"), i), "a node name", d_))
            p.inference_nodes.push_back(*n);
      }
    }
    if (const json* x = find(*v, "scale"))
      if (auto sc = as_fraction(*x, child(path, "scale"), "it multiplies prompt and KV-cache bytes", d_)) p.scale = *sc;
    s_.prefill = std::move(p);
  }

  void prompt_tokens(const json& v, const std::string& path, PromptTokens& out) {
    if (v.is_number_integer()) {
      if (auto t = as_integer(v, path, 1, kMaxPromptTokens, "prompt tokens", d_)) out = PromptTokens{PromptTokens::Kind::fixed, static_cast<int>(*t)};
      return;
    }
    if (!is_object(v, path, "a token count or an object such as {\"distribution\": \"lognormal\", \"median\": 1024, \"sigma\": 0.5}", d_))
      return;
    check_keys(v, path, kPromptKeys, d_);
    std::string dist = "fixed";
    if (const json* x = find(v, "distribution")) {
      auto d = as_choice(*x, child(path, "distribution"), "a distribution", kPromptDistributions, d_);
      if (!d) return;
      dist = *d;
    }
    const auto need = [&](std::string_view key) {
      if (find(v, key) == nullptr) d_.add(child(path, key), fmt::format("missing: the {} distribution needs \"{}\"", dist, key));
    };
    if (dist == "fixed") {
      out.kind = PromptTokens::Kind::fixed;
      need("tokens");
      read_int(v, path, "tokens", 1, kMaxPromptTokens, "prompt tokens", out.tokens, d_);
    } else {
      out.kind = dist == "uniform" ? PromptTokens::Kind::uniform : PromptTokens::Kind::lognormal;
      if (dist == "uniform") {
        need("min");
        need("max");
      } else {
        need("median");
        need("sigma");
        out.min = 1;
        out.max = 1 << 17;
      }
      read_int(v, path, "min", 1, kMaxPromptTokens, "prompt tokens", out.min, d_);
      read_int(v, path, "max", 1, kMaxPromptTokens, "prompt tokens", out.max, d_);
      if (out.min > out.max) d_.add(child(path, "min"), fmt::format("{} is above max {}", out.min, out.max));
      if (const json* x = find(v, "median"))
        if (auto m = as_number(*x, child(path, "median"), 1, kMaxPromptTokens, "prompt tokens", d_)) out.median = *m;
      if (const json* x = find(v, "sigma"))
        if (auto sg = as_number(*x, child(path, "sigma"), 0, 5, "the spread of log(tokens)", d_)) out.sigma = *sg;
    }
  }

  // A CSV of arrivals: a header "time_s,prompt_tokens", then one request per line, times
  // in seconds from the run's start, non-decreasing.
  void read_arrivals(const fs::path& file, const std::string& path, std::vector<PrefillArrival>& out) {
    std::ifstream in(file);
    if (!in) {
      d_.add(path, fmt::format("cannot read the arrivals file {}", file.string()));
      return;
    }
    std::string line;
    int line_no = 0;
    bool header = false;
    const std::size_t before = d_.items().size();
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || line.front() == '#') continue;
      const auto where = fmt::format("{}:{}", file.string(), line_no);
      if (!header) {
        header = true;
        if (line != "time_s,prompt_tokens")
          d_.add(path, fmt::format("{}: the header must be \"time_s,prompt_tokens\", got \"{}\"", where, line));
        continue;
      }
      const auto comma = line.find(',');
      double t = -1;
      long tokens = 0;
      bool ok = comma != std::string::npos;
      if (ok) {
        char* end = nullptr;
        const std::string a = line.substr(0, comma), b = line.substr(comma + 1);
        t = std::strtod(a.c_str(), &end);
        ok = !a.empty() && *end == '\0';
        tokens = std::strtol(b.c_str(), &end, 10);
        ok = ok && !b.empty() && *end == '\0';
      }
      if (!ok) {
        d_.add(path, fmt::format("{}: expected \"seconds,tokens\", got \"{}\"", where, line));
      } else if (!(t >= 0) || (!out.empty() && t < out.back().at_s)) {
        d_.add(path, fmt::format("{}: time {} must be >= 0 and not before the previous row", where, t));
      } else if (tokens < 1 || tokens > kMaxPromptTokens) {
        d_.add(path, fmt::format("{}: {} prompt tokens is outside 1..{}", where, tokens, kMaxPromptTokens));
      } else {
        out.push_back({t, static_cast<int>(tokens)});
      }
      if (d_.items().size() - before >= 10) {
        d_.add(path, fmt::format("{}: stopping after 10 problems", where));
        return;
      }
    }
    if (!header) d_.add(path, fmt::format("{}: empty; expected a header \"time_s,prompt_tokens\" and rows", file.string()));
    else if (out.empty() && d_.items().size() == before) d_.add(path, fmt::format("{}: no arrivals", file.string()));
  }

  void cross_checks() {
    const auto& m = s_.model;
    const auto& p = s_.parallelism;
    if (model_.ok) {
      if (m.hidden % m.heads != 0)
        d_.add("/model/hidden",
               fmt::format("{} does not divide by heads {}: every head needs the same width", m.hidden, m.heads));
      if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)
        d_.add("/model/kv_heads", fmt::format("{} must divide heads {} (grouped-query attention shares each KV head "
                                              "among a whole number of query heads)",
                                              m.kv_heads, m.heads));
    }
    if (parallel_ok_ && static_cast<std::int64_t>(p.pp) * p.dp * p.tp > kMaxGpus) {
      d_.add("/parallelism", fmt::format("pp {} x dp {} x tp {} is more than {} GPUs", p.pp, p.dp, p.tp, kMaxGpus));
      parallel_ok_ = false;
    }
    if (model_.ok && parallel_ok_) {
      if (m.layers < p.pp)
        d_.add("/parallelism/pp",
               fmt::format("{} stages for a model of {} layers: every stage needs a layer", p.pp, m.layers));
      if (m.heads % p.tp != 0 || m.kv_heads % p.tp != 0)
        d_.add("/parallelism/tp", fmt::format("{} does not divide heads {} and kv_heads {}: tensor parallelism splits "
                                              "the attention heads",
                                              p.tp, m.heads, m.kv_heads));
    }
    if (model_.ok && parallel_ok_ && layers_ok_ && !s_.layers_per_stage.empty()) {
      const auto& l = s_.layers_per_stage;
      int sum = 0;
      for (int n : l) sum += n;
      if (static_cast<int>(l.size()) != p.pp)
        d_.add("/parallelism/layers_per_stage",
               fmt::format("{} entries for pp {}: give one layer count per stage", l.size(), p.pp));
      else if (sum != m.layers)
        d_.add("/parallelism/layers_per_stage",
               fmt::format("the stages hold {} layers but the model has {}", sum, m.layers));
    }
    if (virtual_ok_) {
      const int v = s_.virtual_stages;
      if (s_.schedule == Schedule::interleaved_1f1b) {
        if (v < 2)
          d_.add("/virtual_stages", fmt::format("{}: interleaved-1f1b needs at least 2 model chunks per GPU "
                                                "(1 is plain 1f1b)",
                                                v));
        if (parallel_ok_ && p.pp < 2)
          d_.add("/schedule", "interleaved-1f1b needs pp >= 2: with one stage there is nothing to interleave");
        if (parallel_ok_ && micro_batches_ok_ && s_.micro_batches % p.pp != 0)
          d_.add("/micro_batches", fmt::format("{} does not divide by pp {}: interleaved-1f1b runs the micro-batches "
                                               "in groups of pp (as Megatron-LM requires)",
                                               s_.micro_batches, p.pp));
        if (model_.ok && parallel_ok_ && layers_ok_ && v >= 2) {
          const auto layers = s_.layers_per_stage.empty() ? std::vector<int>{} : s_.layers_per_stage;
          int fewest = m.layers / p.pp;
          for (int n : layers) fewest = std::min(fewest, n);
          if (fewest < v)
            d_.add("/virtual_stages", fmt::format("{} chunks per GPU, but a stage holds only {} layers: every chunk "
                                                  "needs a layer",
                                                  v, fewest));
        }
      } else if (v != 1) {
        d_.add("/virtual_stages", fmt::format("{}: only interleaved-1f1b runs several model chunks per GPU; leave "
                                              "it out (or 1) for {}",
                                              v, to_string(s_.schedule)));
      }
    }
    if (iterations_ok_ && warmup_ok_ && s_.warmup >= s_.iterations)
      d_.add("/warmup",
             fmt::format("{} warm-up iterations leave none of the {} iterations to measure", s_.warmup, s_.iterations));
  }

  Scenario& s_;
  const fs::path& base_dir_;
  core::Diagnostics& d_;
  ModelFields model_;
  bool parallel_ok_ = true;
  bool programs_given_ = false;  // a `programs` file replaces the model's programs
  bool layers_ok_ = true;
  bool virtual_ok_ = true;
  bool micro_batches_ok_ = true;
  bool iterations_ok_ = true;
  bool warmup_ok_ = true;
};

}  // namespace

Scenario parse_scenario(const json& doc, const std::string& file, const fs::path& base_dir) {
  core::Diagnostics d(file);
  Scenario s;
  s.source_file = file;
  if (!is_object(doc, "", "a JSON object with \"name\", \"topology\", \"model\" and \"parallelism\"", d))
    d.throw_if_any();
  ScenarioParser(s, base_dir, d).parse(doc);
  d.throw_if_any();
  return s;
}

Scenario load_scenario(const fs::path& file) {
  core::Diagnostics d(file.string());
  const json doc = read_document(file.string(), d);
  Scenario s = parse_scenario(doc, file.string(), file.parent_path());
  for (const auto& w : s.warnings) fmt::print(stderr, "wanlab: warning: {}\n", w);
  return s;
}

}  // namespace wanlab::workload
