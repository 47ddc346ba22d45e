// wanlab-gpu-probe: lists this machine's GPUs, or times a stage shape's GEMMs on one of
// them (what a cuda-mode stage worker runs per micro-batch), to fit the modeled compute's
// MFU. Exit status: 0 done, 1 a CUDA/cuBLAS failure, 2 bad arguments, 3 no GPU.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <barrier>
#include <charconv>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "wanlab/common/program.hpp"
#include "wanlab/common/text.hpp"
#include "wanlab/gpu/gpu_compute.hpp"

namespace {

using wanlab::gpu::GpuInfo;
namespace program = wanlab::program;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 3;

// --shape "layers=4,tokens=4096,...": each key once; the long names of StageShape's fields
// are accepted too.
struct ShapeKey {
  std::string_view name;
  std::string_view alias;
  std::int64_t min;
};
constexpr ShapeKey kShapeKeys[] = {
    {"layers", "", 1},   {"tokens", "", 1},     {"hidden", "", 1}, {"ffn", "ffn_hidden", 1},  {"heads", "", 1},
    {"kv_heads", "", 1}, {"seq", "seq_len", 1}, {"vocab", "", 0},  {"gated", "gated_mlp", 0}, {"tp", "", 1},
};
constexpr std::string_view kRequiredKeys[] = {"layers", "tokens", "hidden", "ffn", "heads"};

const ShapeKey* find_key(std::string_view key) {
  for (const ShapeKey& k : kShapeKeys) {
    if (key == k.name || (!k.alias.empty() && key == k.alias)) return &k;
  }
  return nullptr;
}

std::string unknown_key_message(std::string_view key) {
  std::string text = fmt::format("--shape: unknown key '{}'", key);
  std::string_view best;
  std::size_t best_distance = 3;  // suggest only near misses
  for (const ShapeKey& k : kShapeKeys) {
    for (std::string_view name : {k.name, k.alias}) {
      if (name.empty()) continue;
      if (const std::size_t d = wanlab::edit_distance(key, name); d < best_distance) {
        best = name;
        best_distance = d;
      }
    }
  }
  if (!best.empty()) text += fmt::format(" (did you mean '{}'?)", best);
  std::string names;
  for (const ShapeKey& k : kShapeKeys) names += (names.empty() ? "" : ", ") + std::string(k.name);
  return text + "; keys: " + names;
}

/// Throws std::invalid_argument naming the item that is wrong.
program::StageShape parse_shape(std::string_view spec) {
  std::vector<std::pair<const ShapeKey*, std::int64_t>> values;
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw std::invalid_argument(fmt::format("--shape: '{}' is not key=value", item));
    }
    const std::string_view key = item.substr(0, eq), text = item.substr(eq + 1);
    const ShapeKey* k = find_key(key);
    if (k == nullptr) throw std::invalid_argument(unknown_key_message(key));
    for (const auto& [seen, value] : values) {
      if (seen == k) throw std::invalid_argument(fmt::format("--shape: '{}' given twice", k->name));
    }
    std::int64_t value = 0;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (err != std::errc{} || end != text.data() + text.size()) {
      throw std::invalid_argument(fmt::format("--shape: {}: '{}' is not a whole number", k->name, text));
    }
    const std::int64_t max = k->name == "tokens"  ? std::numeric_limits<std::int64_t>::max()
                             : k->name == "gated" ? 1
                                                  : std::numeric_limits<int>::max();
    if (value < k->min || value > max) {
      throw std::invalid_argument(
          fmt::format("--shape: {}={} is out of range ({} to {})", k->name, value, k->min, max));
    }
    values.emplace_back(k, value);
  }
  const auto get = [&](std::string_view name) -> std::optional<std::int64_t> {
    for (const auto& [k, value] : values) {
      if (k->name == name) return value;
    }
    return std::nullopt;
  };
  for (std::string_view name : kRequiredKeys) {
    if (!get(name)) throw std::invalid_argument(fmt::format("--shape: '{}' is missing", name));
  }
  const auto as_int = [](std::int64_t v) { return static_cast<int>(v); };  // ranges checked above
  program::StageShape shape;
  shape.layers = as_int(*get("layers"));
  shape.tokens = *get("tokens");
  shape.hidden = as_int(*get("hidden"));
  shape.ffn_hidden = as_int(*get("ffn"));
  shape.heads = as_int(*get("heads"));
  shape.kv_heads = as_int(get("kv_heads").value_or(shape.heads));
  shape.seq_len = as_int(get("seq").value_or(std::min<std::int64_t>(shape.tokens, std::numeric_limits<int>::max())));
  shape.vocab = as_int(get("vocab").value_or(0));
  shape.gated_mlp = get("gated").value_or(0) == 1;
  shape.tp = as_int(get("tp").value_or(1));
  return shape;
}

std::string shape_text(const program::StageShape& s) {
  return fmt::format("layers={},tokens={},hidden={},ffn={},heads={},kv_heads={},seq={},vocab={},gated={},tp={}",
                     s.layers, s.tokens, s.hidden, s.ffn_hidden, s.heads, s.kv_heads, s.seq_len, s.vocab,
                     s.gated_mlp ? 1 : 0, s.tp);
}

nlohmann::json gpu_json(const GpuInfo& g) {
  return {{"index", g.index},
          {"name", g.name},
          {"sm_clock_ghz", g.sm_clock_ghz},
          {"memory_bytes", g.memory_bytes},
          {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)}};
}

std::string gpu_line(const GpuInfo& g) {
  return fmt::format("GPU {}: {} (sm_{}{}, {:.2f} GHz, {:.1f} GiB)", g.index, g.name, g.cc_major, g.cc_minor,
                     g.sm_clock_ghz, static_cast<double>(g.memory_bytes) / (1024.0 * 1024 * 1024));
}

struct PassResult {
  program::OpKind pass = program::OpKind::forward;
  std::size_t gemms = 0;
  double flops = 0;
  std::int64_t median_ns = 0, min_ns = 0, max_ns = 0;
  double flops_per_s() const { return median_ns > 0 ? flops / (static_cast<double>(median_ns) * 1e-9) : 0; }
};

std::int64_t median(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Args {
  int device = 0;
  std::string shape;
  int repeat = 20;
  int warmup = 2;
  int workers = 1;
  std::optional<double> peak;
  bool json = false;
};

int report_no_gpu(const Args& args) {
  const std::string reason = wanlab::gpu::gpu_unavailable_reason();
  if (args.json) {
    fmt::print("{}\n", nlohmann::json{{"built_with_cuda", wanlab::gpu::built_with_cuda()},
                                      {"gpus", nlohmann::json::array()},
                                      {"unavailable_reason", reason}}
                           .dump(2));
  } else {
    fmt::print("no GPU: {}\n", reason);
  }
  return kExitNoGpu;
}

int list(const Args& args, const std::vector<GpuInfo>& gpus) {
  if (args.json) {
    nlohmann::json out{{"built_with_cuda", true}, {"gpus", nlohmann::json::array()}};
    for (const GpuInfo& g : gpus) out["gpus"].push_back(gpu_json(g));
    fmt::print("{}\n", out.dump(2));
  } else {
    for (const GpuInfo& g : gpus) fmt::print("{}\n", gpu_line(g));
  }
  return 0;
}

// One worker's timed runs, per pass (the order of `passes`), after its warm-up.
std::vector<std::vector<std::int64_t>> time_passes(wanlab::gpu::GpuCompute& gpu, const Args& args,
                                                   const program::StageShape& shape,
                                                   const std::vector<PassResult>& passes, std::barrier<>* start) {
  gpu.prepare(shape);
  if (start != nullptr) start->arrive_and_wait();  // every worker ready: they run at once
  std::vector<std::vector<std::int64_t>> ns(passes.size());
  for (std::size_t p = 0; p < passes.size(); ++p) {
    for (int i = 0; i < args.warmup; ++i) gpu.run(shape, passes[p].pass);
    ns[p].reserve(static_cast<std::size_t>(args.repeat));
    for (int i = 0; i < args.repeat; ++i) ns[p].push_back(gpu.run(shape, passes[p].pass).count());
  }
  return ns;
}

int measure(const Args& args, const program::StageShape& shape, std::vector<PassResult> results) {
  const auto gpu = wanlab::gpu::GpuCompute::open(args.device);
  std::vector<std::vector<std::int64_t>> all;
  if (args.workers == 1) {
    all = time_passes(*gpu, args, shape, results, nullptr);
  } else {
    // --workers N: N stage workers sharing the device, as in a lab whose emulated GPUs
    // outnumber the real ones; each has its own GpuCompute (stream, handle, buffers).
    std::vector<std::unique_ptr<wanlab::gpu::GpuCompute>> others;
    std::vector<wanlab::gpu::GpuCompute*> gpus{gpu.get()};
    for (int w = 1; w < args.workers; ++w) {
      others.push_back(wanlab::gpu::GpuCompute::open(args.device));
      gpus.push_back(others.back().get());
    }
    std::barrier<> start(args.workers);
    std::vector<std::vector<std::vector<std::int64_t>>> per(gpus.size());
    std::vector<std::exception_ptr> errors(gpus.size());
    std::vector<std::thread> threads;
    for (std::size_t w = 0; w < gpus.size(); ++w) {
      threads.emplace_back([&, w] {
        try {
          per[w] = time_passes(*gpus[w], args, shape, results, &start);
        } catch (...) {
          errors[w] = std::current_exception();
          start.arrive_and_drop();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    all.resize(results.size());
    for (const auto& w : per)
      for (std::size_t p = 0; p < w.size(); ++p) all[p].insert(all[p].end(), w[p].begin(), w[p].end());
  }
  for (std::size_t p = 0; p < results.size(); ++p) {
    PassResult& r = results[p];
    const std::vector<std::int64_t>& ns = all[p];
    r.median_ns = median(ns);
    r.min_ns = *std::min_element(ns.begin(), ns.end());
    r.max_ns = *std::max_element(ns.begin(), ns.end());
  }
  const auto mfu = [&](const PassResult& r) -> std::optional<double> {
    if (!args.peak) return std::nullopt;
    return r.flops_per_s() / *args.peak;
  };

  if (args.json) {
    nlohmann::json passes = nlohmann::json::array();
    for (const PassResult& r : results) {
      const auto m = mfu(r);
      passes.push_back({{"pass", program::to_string(r.pass)},
                        {"gemms", r.gemms},
                        {"flops", r.flops},
                        {"median_ns", r.median_ns},
                        {"min_ns", r.min_ns},
                        {"max_ns", r.max_ns},
                        {"flops_per_s", r.flops_per_s()},
                        {"tflops", r.flops_per_s() / 1e12},
                        {"mfu", m ? nlohmann::json(*m) : nlohmann::json(nullptr)}});
    }
    const nlohmann::json out{{"gpu", gpu_json(gpu->info())},
                             {"shape", shape_text(shape)},
                             {"repeat", args.repeat},
                             {"workers", args.workers},
                             {"warmup", args.warmup},
                             {"peak_flops_per_s", args.peak ? nlohmann::json(*args.peak) : nlohmann::json(nullptr)},
                             {"passes", passes},
                             {"measured_flops_per_s", gpu->measured_flops_per_s()}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }

  fmt::print("{}\nshape: {}\n", gpu_line(gpu->info()), shape_text(shape));
  if (args.workers > 1) fmt::print("{} workers sharing the GPU at once; times are per worker\n", args.workers);
  fmt::print("median of {} runs per pass, after {} warm-up runs{}\n", args.repeat, args.warmup,
             args.peak ? fmt::format("; MFU against {:.0f} TFLOP/s", *args.peak / 1e12) : std::string{});
  fmt::print("{:<9} {:>6} {:>11} {:>10} {:>10} {:>10} {:>9} {:>6}\n", "pass", "GEMMs", "GFLOP/run", "median ms",
             "min ms", "max ms", "TFLOP/s", "MFU");
  for (const PassResult& r : results) {
    const auto m = mfu(r);
    fmt::print("{:<9} {:>6} {:>11.1f} {:>10.3f} {:>10.3f} {:>10.3f} {:>9.1f} {:>6}\n", program::to_string(r.pass),
               r.gemms, r.flops / 1e9, static_cast<double>(r.median_ns) / 1e6, static_cast<double>(r.min_ns) / 1e6,
               static_cast<double>(r.max_ns) / 1e6, r.flops_per_s() / 1e12,
               m ? fmt::format("{:.1f}%", *m * 100) : std::string{"-"});
  }
  fmt::print("measured over the last runs: {:.1f} TFLOP/s\n", gpu->measured_flops_per_s() / 1e12);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "wanlab-gpu-probe: lists the GPUs, or times a stage shape's GEMMs (cuBLAS, bf16 in and out, fp32 "
      "accumulate) on one, the work a cuda-mode stage worker does per micro-batch.\n"
      "Exit status: 0 done, 1 CUDA/cuBLAS failure, 2 bad arguments, 3 no GPU (the reason is printed)."};
  Args args;
  app.add_option("--device", args.device, "CUDA device to measure on")->check(CLI::Range(0, 1023));
  app.add_option("--shape", args.shape,
                 "Stage shape to time, e.g. layers=4,tokens=4096,hidden=4096,ffn=11008,heads=32,kv_heads=32,"
                 "seq=4096,vocab=0,gated=1,tp=1 (kv_heads defaults to heads, seq to tokens, vocab 0, gated 0, tp 1)");
  app.add_option("--repeat", args.repeat, "Timed runs per pass (the median is reported)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", args.warmup, "Untimed runs per pass first (after one that loads the kernels)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--workers", args.workers,
                 "Stage workers sharing the GPU at once, each with its own stream, cuBLAS handle and buffers (as "
                 "in a lab with more emulated GPUs than real ones); times are per worker, over all workers' runs")
      ->check(CLI::Range(1, 256));
  app.add_option("--peak", args.peak, "Peak FLOP/s to compute MFU against, e.g. 989e12 (H100 SXM dense bf16)")
      ->check(CLI::Range(1e9, 1e18));
  app.add_flag("--json", args.json, "Machine-readable output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  try {
    std::optional<program::StageShape> shape;
    std::vector<PassResult> passes;
    if (!args.shape.empty()) {
      shape = parse_shape(args.shape);
      for (program::OpKind pass : {program::OpKind::forward, program::OpKind::backward}) {
        const std::vector<program::Gemm> gemms = program::stage_gemms(*shape, pass);
        passes.push_back({.pass = pass, .gemms = gemms.size(), .flops = program::gemm_flops(gemms)});
      }
    }
    const std::vector<GpuInfo> gpus = wanlab::gpu::list_gpus();
    if (gpus.empty()) return report_no_gpu(args);
    if (!shape) return list(args, gpus);
    return measure(args, *shape, std::move(passes));
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "wanlab-gpu-probe: {}\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab-gpu-probe: {}\n", e.what());
    return kExitFailure;
  }
}
