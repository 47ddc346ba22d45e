#pragma once
// The controller's metrics in the Prometheus text exposition format (version 0.0.4):
// `GET /metrics` on the control API, and over TCP with `wanlab up --metrics HOST:PORT`.
// Names follow Prometheus' conventions: a `wanlab_` prefix, base units (seconds, bytes,
// ratios) in the name, `_total` on counters. Every metric is described in docs/metrics.md.
//
// MetricsText writes one family at a time (HELP and TYPE once, then its samples);
// parse_metrics_text() reads such text back (tests, the bench, the dashboard's checks).
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace wanlab::api {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsText {
 public:
  /// Starts a family: `type` is counter, gauge, histogram or summary. A family already
  /// started is not announced again (its samples follow the earlier ones' HELP and TYPE
  /// only if written next to them: callers write each family in one go).
  void family(std::string_view name, std::string_view type, std::string_view help);
  /// One sample of the family last started (`suffix`: "_bucket", "_sum", "_count" or "").
  void sample(const MetricLabels& labels, double value, std::string_view suffix = {});
  /// A cumulative histogram from per-bucket counts: `bounds[i]` (in the family's unit) is the
  /// upper bound of `counts[i]`; the last bound may be +inf. Writes _bucket, _sum, _count.
  void histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                 const std::vector<std::uint64_t>& counts, double sum);
  const std::string& text() const { return text_; }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
  std::string name_;
};

/// A label value escaped for the text format (backslash, double quote, newline).
std::string escape_label_value(std::string_view v);
/// A sample value as the text format writes it (+Inf, -Inf, NaN, else shortest round trip).
std::string format_metric_value(double v);

struct MetricSample {
  std::string name;  // with its suffix: wanlab_engine_release_lateness_seconds_bucket
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct ParsedMetrics {
  std::vector<MetricSample> samples;
  std::map<std::string, std::string> types;  // family -> counter|gauge|histogram|summary|untyped
  std::map<std::string, std::string> help;
  /// The first sample named `name` whose labels include every one of `labels`; nullptr if none.
  const MetricSample* find(std::string_view name, const std::map<std::string, std::string>& labels = {}) const;
};

/// Parses the text format. Throws std::invalid_argument naming the line number and what is
/// wrong (a bad name, an unterminated label value, a value that is not a number, a sample
/// with no TYPE, a family whose TYPE comes twice).
ParsedMetrics parse_metrics_text(std::string_view text);

}  // namespace wanlab::api

// The lab's series, from what the controller reads (pure: tests feed them directly).
#include "wanlab/core/topology.hpp"
#include "wanlab/shaping/link_shaper.hpp"

namespace wanlab::api {

/// Per directed WAN link: wanlab_link_* (traffic counters, queue depth, configured rate,
/// delay, jitter, loss, queue limit). `counters[i]` belongs to topo.links[i]; `backend`
/// "userspace" tells drops by queue and by loss apart (the kernel's count them together).
void write_link_metrics(MetricsText& out, const core::Topology& topo, const std::vector<shaping::LinkCounters>& counters,
                        const std::string& backend, double rate_scale);
/// The userspace engine's wanlab_engine_* from LinkShaper::stats() (nothing for others).
void write_engine_metrics(MetricsText& out, const std::vector<std::pair<std::string, std::uint64_t>>& stats);

}  // namespace wanlab::api
