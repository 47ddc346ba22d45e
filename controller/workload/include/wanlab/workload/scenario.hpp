#pragma once
// A training scenario: which lab, which model, how it is split (PP x DP x TP), the pipeline
// schedule, and how the run is shaped (iterations, scale, policy). Parsed and validated from
// JSON (bench/scenarios/README.md documents the format); pure, no I/O beyond reading files.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/program.hpp"
#include "wanlab/core/diagnostics.hpp"

namespace wanlab::workload {

enum class Dtype { bf16, fp16, fp32 };
std::string to_string(Dtype dtype);
int dtype_bytes(Dtype dtype);

/// A decoder-only transformer.
struct ModelSpec {
  std::string preset;  // the preset it started from, "" for a fully custom model
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // < heads: grouped-query attention
  int ffn_hidden = 0;
  bool gated_mlp = false;  // SwiGLU
  int seq_len = 0;
  int vocab = 0;
  Dtype dtype = Dtype::bf16;
  bool operator==(const ModelSpec&) const = default;
};

/// The named models ("1.3b", "7b", "8b", "13b", "70b"); sources in bench/scenarios/README.md.
const std::vector<ModelSpec>& model_presets();
const ModelSpec* find_preset(std::string_view name);

/// The FFN width when none is given: 4 h, or for a gated MLP 8/3 h rounded up to a
/// multiple of 256 (as Llama does: 4096 -> 11008).
int default_ffn_hidden(int hidden, bool gated_mlp);

struct Parallelism {
  int pp = 1;
  int dp = 1;
  int tp = 1;
  int gpus() const { return pp * dp * tp; }
  bool operator==(const Parallelism&) const = default;
};

/// Pipeline schedules (docs/workloads.md): GPipe; Megatron's non-interleaved 1F1B; its
/// interleaved 1F1B with `virtual_stages` model chunks per GPU; zero-bubble ZB-H1 (backward
/// split into an input-gradient and a weight-gradient pass, 1F1B's memory).
enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b, zb_h1 };
std::string to_string(Schedule schedule);  // "gpipe", "1f1b", "interleaved-1f1b", "zb-h1"

/// What the memory model (memory.hpp) assumes of a run beyond the model and the split.
struct MemorySpec {
  /// Optimizer state per parameter; nullopt: mixed-precision Adam (12 bytes: fp32 master
  /// weights, momentum, variance), or 8 (momentum, variance) when the model trains in fp32.
  std::optional<double> optimizer_bytes_per_parameter;
  bool distributed_optimizer = false;  // the optimizer state sharded over the dp replicas (ZeRO-1)
  /// Full activation recomputation, as Varuna and Megatron-LM's full recomputation run it:
  /// only each layer's input is kept (memory.hpp), and every backward runs its
  /// micro-batch's forward again first (backward FLOPs + forward FLOPs, plan.hpp). The
  /// scenario's only recomputation switch; a top-level "recompute" (deprecated) sets it.
  bool recompute = false;
  /// Megatron-LM's sequence parallelism with TP: the norms' activations split tp ways too.
  bool sequence_parallel = true;
  std::uint64_t reserve_bytes = 0;     // per GPU, for the CUDA context and allocator slack
  bool operator==(const MemorySpec&) const = default;
};

/// How a DP all-reduce among a stage's replicas runs (Scenario::allreduce).
///   ring: one ring over all replicas in replica order, 2(n-1) steps of bytes/n each;
///   hierarchical: as NCCL and stock frameworks run it across DCs: a reduce-scatter among
///     the replicas in each DC (m-1 steps of bytes/m), an all-reduce across DCs among the
///     replicas holding the same shard (one per DC: 2(D-1) steps of bytes/(m D)), then an
///     all-gather inside each DC (m-1 steps of bytes/m). The programs carry it as two ring
///     all-reduces: one inside the DC over the whole buffer (its 2(m-1) steps are the
///     reduce-scatter's and the all-gather's, the same bytes and the same time in a
///     blocking program), then one across DCs over bytes/m (workload/plan.hpp).
enum class AllReduce { ring, hierarchical };
std::string to_string(AllReduce a);  // "ring", "hierarchical"

enum class ComputeMode { modeled, cuda };

/// When a pipeline message's bytes leave: `eager` as soon as the sender reaches its send
/// (wanlab's agents; a framework loop whose receives are posted ahead, e.g. all irecv at
/// the start of the iteration); `rendezvous` only once the receiver has reached its recv
/// and told the sender (gloo's and NCCL's send/recv with each recv posted where it is
/// waited for: the naive loop). program::Op::rendezvous.
enum class SendMode { eager, rendezvous };
std::string to_string(SendMode mode);  // "eager", "rendezvous"
std::string to_string(ComputeMode mode);

/// Bandwidth policies the arbiter offers (arbiter::policy_names(): a new policy registers there).
const std::vector<std::string>& known_policies();

/// How many prompt tokens a prefill request carries.
struct PromptTokens {
  enum class Kind { fixed, uniform, lognormal };
  Kind kind = Kind::fixed;
  int tokens = 1024;     // fixed
  int min = 1;           // uniform, lognormal (clamp)
  int max = 1 << 20;     // uniform, lognormal (clamp)
  double median = 1024;  // lognormal: exp(mu)
  double sigma = 0.5;    // lognormal
  bool operator==(const PromptTokens&) const = default;
};

/// One prefill request of an arrival trace: when (seconds from the run's start) and how long.
struct PrefillArrival {
  double at_s = 0;
  int prompt_tokens = 0;
  bool operator==(const PrefillArrival&) const = default;
};

/// BubbleTea's prefill load (bench/scenarios/README.md, `prefill`): requests from a load
/// generator on one node, run in the training GPUs' bubbles (or on dedicated inference
/// nodes), their KV caches sent to decode nodes.
struct PrefillSpec {
  ModelSpec model;                  // the inference model (default: the training model)
  enum class Arrival { poisson, trace };
  Arrival arrival = Arrival::poisson;
  double rate_per_s = 0;            // poisson: mean requests per second
  std::string trace_file;           // trace: as given (resolved path below)
  std::vector<PrefillArrival> trace;  // trace: its rows, in time order
  bool loop = false;                // trace: start over after its last row
  PromptTokens prompt;              // poisson: the prompt length distribution
  double deadline_s = 2;            // time to first token a request asks for
  double margin = 0.1;              // admission: predicted run time x (1 + margin) must fit the bubble
  std::string loadgen_node;         // "" = the first node of the first DC
  /// Nodes that receive KV caches: a GPU sends to the one in its own DC, else to the
  /// first. Empty: the load generator's node.
  std::vector<std::string> decode_nodes;
  std::vector<std::string> inference_nodes;  // nodes without training workers whose GPUs only run prefill
  double scale = 0;                 // multiplies prompt and KV bytes on the wire; 0 = the scenario's scale
  bool operator==(const PrefillSpec&) const = default;
};

/// How the scenario's DCs with photonic rails switch their circuits (`"rails"` in the
/// scenario file; docs/rails.md): a rail policy (arbiter::make_rail_policy: packet, static,
/// phase) and, for phase, the phases that get a configuration (arbiter::RailPhase names;
/// empty: every phase whose traffic crosses the rails). Only for topologies with OCS rails.
struct RailsSpec {
  std::string policy = "phase";
  std::vector<std::string> phases;
  bool operator==(const RailsSpec&) const = default;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source_file;              // as given, for messages
  std::filesystem::path topology_path;  // resolved against the scenario file's folder
  ModelSpec model;
  /// Model FLOP utilization, effective / peak FLOP/s. nullopt (no gpu.mfu): the GPU table's
  /// default for each DC's GPU kind and the model's dtype (workload/gpu.hpp: default_mfu).
  std::optional<double> mfu;
  Parallelism parallelism;
  Schedule schedule = Schedule::one_f_one_b;
  int virtual_stages = 1;  // model chunks per GPU: > 1 only with interleaved-1f1b
  /// Layers of each stage (pp entries, summing to the model's layers); empty: as even as
  /// possible, earlier stages taking the extra layers (split_layers).
  std::vector<int> layers_per_stage;
  MemorySpec memory;
  int micro_batch_size = 1;
  int micro_batches = 1;
  int iterations = 1;
  int warmup = 0;
  int connections = 1;  // TCP connections per WAN peer
  std::string policy = "fair";
  ComputeMode compute = ComputeMode::modeled;
  SendMode send_mode = SendMode::eager;
  double scale = 1;  // multiplies bytes and link rates
  /// Multiplies the bytes of the traffic that stays inside a DC (each DP all-reduce ring
  /// whose GPUs are all in one DC) in place of `scale`; only with an unshaped LAN (the
  /// topology sets no lan.rate or lan.delay), whose model time is zero whatever the bytes,
  /// so it changes only what the lab's machine must copy. nullopt: `scale`.
  std::optional<double> lan_scale;
  std::uint64_t seed = 1;
  /// Linux's net.ipv4.tcp_slow_start_after_idle on the nodes during the run. Off by
  /// default, as on hosts tuned for WAN transfers: a connection idle between two pipeline
  /// messages keeps its congestion window instead of starting over from 10 segments.
  bool tcp_slow_start_after_idle = false;
  /// TCP's own pacing on the WAN data connections, as Linux paces with the fq qdisc
  /// (cwnd / SRTT x 200 % in slow start, x 120 % after). On by default: the lab enables it
  /// per connection (SO_MAX_PACING_RATE with no cap that binds), the ns-3 reference and the
  /// simulator's paced model model it. false: a host without fq (fq_codel, pfifo), whose
  /// senders put each window on the wire at once (lab and ns-3 only).
  bool tcp_pacing = true;
  /// TCP congestion control of the data connections (TCP_CONGESTION): Linux's default,
  /// cubic, unless the scenario names another the kernel has (bbr, reno...).
  std::string tcp_congestion = "cubic";
  /// The most one WAN TCP connection keeps in flight, at full size (bytes); the lab clamps
  /// each WAN data connection's receive window to this x scale (TCP_WINDOW_CLAMP), so the
  /// window keeps its ratio to the bandwidth-delay product when bytes and rates are scaled.
  /// nullopt: the nodes' own buffers (Linux's default tcp_rmem allows about 3 MiB), not scaled.
  std::optional<std::uint64_t> tcp_window;
  /// The DP all-reduce's algorithm (AllReduce); "ring" by default.
  AllReduce allreduce = AllReduce::ring;
  /// placement[stage][dp replica] = DC name; empty: the Atlas rule places the stages.
  std::vector<std::vector<std::string>> placement;
  /// BubbleTea prefill load; none: training only.
  std::optional<PrefillSpec> prefill;
  /// Worker programs replayed as given (`programs`: a file of them, as `wanlab import-trace`
  /// writes; workload/program_file.hpp) in place of those built from the model; the model
  /// and parallelism may then be left out (pp = the programs' count, dp = tp = 1). Empty:
  /// built from the model.
  std::filesystem::path programs_file;  // resolved against the scenario file's folder
  std::vector<program::WorkerProgram> programs;
  std::optional<double> programs_effective_flops;  // the file's effective_flops
  /// Deprecated fields the file used, one line each ("file: /path: what to write instead");
  /// load_scenario prints them to stderr.
  std::vector<std::string> warnings;
  /// The rail policy of DCs with OCS rails; none: phase, every phase configured.
  std::optional<RailsSpec> rails;
};

/// Linux's default receive buffer (tcp_rmem max 6 MiB) keeps about half in flight.
inline constexpr double kDefaultTcpWindowBytes = 3.0 * 1024 * 1024;
/// The window one WAN TCP connection of the run keeps in flight (bytes on the wire, as
/// run): the scenario's tcp_window x scale, or Linux's default when it sets none.
inline double run_tcp_window(const Scenario& s) {
  return s.tcp_window ? static_cast<double>(*s.tcp_window) * s.scale : kDefaultTcpWindowBytes;
}

/// The multiplier of the bytes of all-reduce rings inside one DC: lan_scale, else scale.
inline double run_lan_scale(const Scenario& s) { return s.lan_scale.value_or(s.scale); }

/// Reads, parses and validates a scenario file. Throws core::ConfigError listing every
/// problem (unreadable file, bad JSON with line/column, all validation errors at once).
Scenario load_scenario(const std::filesystem::path& file);

/// Parses and validates an already-read document. `file` names it in diagnostics; the
/// topology path resolves against `base_dir`.
Scenario parse_scenario(const nlohmann::json& doc, const std::string& file, const std::filesystem::path& base_dir);

/// Canonical JSON (every field explicit, the topology path absolute); parse_scenario
/// accepts it back.
nlohmann::json to_json(const Scenario& scenario);

}  // namespace wanlab::workload
