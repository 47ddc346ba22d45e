#pragma once
// `wanlab analyze`: what a run's timeline says about where its step time went.
//
// Per GPU and measured iteration i (the window [end of i-1, end of i] of summary.json's
// iteration times, as workload::summarize() counts them), every instant is exactly one of:
//   compute            forward, backward, optimizer or prefill spans;
//   exposed pipeline   waiting for a pipeline message (recv_wait) while not computing;
//   exposed allreduce  in a gradient all-reduce while not computing nor waiting;
//   idle               the rest (a send of its own may be in flight: `idle_sending`).
// So the four add up to the iteration's time on every GPU, and their means over GPUs to the
// measured step time. Overlapped communication: this GPU's sends in flight while it computes;
// overlap = overlapped / (overlapped + exposed pipeline + exposed allreduce).
// WAN: every send between GPUs in different DCs is a transfer (bytes / its span = its bus
// bandwidth), held against its link's rate as run; per link, the bytes over the time any
// transfer was on it. Critical path: from the GPU that ends an iteration last, back through
// its blocking spans; a wait for a message jumps to the sender's send span, then on along
// the sender. Its segments add up to the iteration's time.
// Comparison (two or more runs): each phase's mean per iteration side by side, the
// difference to the first run, and the phase whose difference is the largest part of the
// step-time difference.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wanlab::evidence {

/// A run folder's analysis from its summary.json and timeline.json (card.yaml and
/// scenario.json when there). Throws EvidenceError naming the file, the JSON path and the reason.
nlohmann::json analyze_run(const std::filesystem::path& dir);
/// The same from documents already read; `dir` names them in errors and in the result.
nlohmann::json analyze_documents(const nlohmann::json& summary, const nlohmann::json& timeline,
                                 const nlohmann::json& card, const std::string& dir);

/// The side-by-side comparison of analyses (the first is the reference).
nlohmann::json compare_runs(const std::vector<nlohmann::json>& runs);

/// Run folders under `path`: itself if it holds summary.json and timeline.json, else every
/// such folder below it (sorted). Folders without a timeline are returned in `skipped`.
std::vector<std::filesystem::path> find_run_folders(const std::filesystem::path& path,
                                                    std::vector<std::string>* skipped = nullptr);

/// Markdown of analyses (and of their comparison when there are two or more).
std::string analysis_markdown(const nlohmann::json& report);

}  // namespace wanlab::evidence
