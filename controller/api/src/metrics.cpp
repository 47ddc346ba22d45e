#include "wanlab/api/metrics.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "wanlab/common/printable.hpp"

namespace wanlab::api {
namespace {

bool name_char(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool valid_name(std::string_view n, bool colon) {
  if (n.empty()) return false;
  for (std::size_t i = 0; i < n.size(); ++i)
    if (!name_char(n[i], i == 0, colon)) return false;
  return true;
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integers (counters) exactly, without an exponent, up to 2^53.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return fmt::format("{}", static_cast<std::int64_t>(v));
  return fmt::format("{}", v);
}

void MetricsText::family(std::string_view name, std::string_view type, std::string_view help) {
  name_ = std::string(name);
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void MetricsText::sample(const MetricLabels& labels, double value, std::string_view suffix) {
  text_ += name_;
  text_ += suffix;
  if (!labels.empty()) {
    text_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) text_ += ',';
      first = false;
      text_ += k;
      text_ += "=\"";
      text_ += escape_label_value(v);
      text_ += '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += format_metric_value(value);
  text_ += '\n';
}

void MetricsText::histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                            const std::vector<std::uint64_t>& counts, double sum) {
  std::uint64_t cumulative = 0;
  bool inf = false;
  for (std::size_t i = 0; i < bounds.size() && i < counts.size(); ++i) {
    cumulative += counts[i];
    auto l = labels;
    l.emplace_back("le", format_metric_value(bounds[i]));
    inf |= std::isinf(bounds[i]);
    sample(l, static_cast<double>(cumulative), "_bucket");
  }
  if (!inf) {
    auto l = labels;
    l.emplace_back("le", "+Inf");
    sample(l, static_cast<double>(cumulative), "_bucket");
  }
  sample(labels, sum, "_sum");
  sample(labels, static_cast<double>(cumulative), "_count");
}

const MetricSample* ParsedMetrics::find(std::string_view name, const std::map<std::string, std::string>& labels) const {
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : labels) {
      const auto it = s.labels.find(k);
      all &= it != s.labels.end() && it->second == v;
    }
    if (all) return &s;
  }
  return nullptr;
}

ParsedMetrics parse_metrics_text(std::string_view text) {
  ParsedMetrics out;
  std::size_t line_no = 0;
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(fmt::format("metrics line {}: {}", line_no, what));
  };
  auto family_of = [&](const std::string& name) -> std::string {
    if (out.types.count(name)) return name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string_view s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        const auto base = name.substr(0, name.size() - s.size());
        const auto it = out.types.find(base);
        if (it != out.types.end() && (it->second == "histogram" || it->second == "summary")) return base;
      }
    }
    return {};
  };
  std::set<std::string> seen_series;
  while (!text.empty()) {
    ++line_no;
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) fail("the last line has no newline");
    const std::string line(text.substr(0, nl));
    text.remove_prefix(nl + 1);
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::string_view rest(line);
      rest.remove_prefix(1);
      while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
      const bool is_help = rest.substr(0, 5) == "HELP ", is_type = rest.substr(0, 5) == "TYPE ";
      if (!is_help && !is_type) continue;  // a comment
      rest.remove_prefix(5);
      const auto sp = rest.find(' ');
      const std::string name(rest.substr(0, sp));
      if (!valid_name(name, true)) fail(fmt::format("'{}' is not a metric name", printable(name, 80)));
      const std::string value = sp == std::string_view::npos ? std::string{} : std::string(rest.substr(sp + 1));
      if (is_help) {
        if (out.help.count(name)) fail(fmt::format("HELP of {} given twice", name));
        out.help[name] = value;
      } else {
        static const std::set<std::string> types = {"counter", "gauge", "histogram", "summary", "untyped"};
        if (!types.count(value)) fail(fmt::format("TYPE of {}: '{}' is not a type", name, printable(value, 40)));
        if (out.types.count(name)) fail(fmt::format("TYPE of {} given twice", name));
        out.types[name] = value;
      }
      continue;
    }
    MetricSample s;
    std::size_t i = 0;
    while (i < line.size() && name_char(line[i], i == 0, true)) ++i;
    s.name = line.substr(0, i);
    if (s.name.empty()) fail(fmt::format("'{}' does not start with a metric name", printable(line, 80)));
    if (family_of(s.name).empty()) fail(fmt::format("sample of {} before its TYPE", s.name));
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const auto start = i;
        while (i < line.size() && name_char(line[i], i == start, false)) ++i;
        const auto key = line.substr(start, i - start);
        if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"')
          fail(fmt::format("{}: a label must be name=\"value\"", s.name));
        i += 2;
        std::string value;
        bool closed = false;
        while (i < line.size()) {
          const char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (i >= line.size()) break;
            const char e = line[i++];
            if (e == 'n') value += '\n';
            else if (e == '\\' || e == '"') value += e;
            else fail(fmt::format("{}: label {}: unknown escape \\{}", s.name, key, e));
          } else {
            value += c;
          }
        }
        if (!closed) fail(fmt::format("{}: label {}: value not terminated", s.name, key));
        if (s.labels.count(key)) fail(fmt::format("{}: label {} given twice", s.name, key));
        s.labels[key] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) fail(fmt::format("{}: labels not closed with '}}'", s.name));
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') fail(fmt::format("{}: no value", s.name));
    while (i < line.size() && line[i] == ' ') ++i;
    auto end = line.find(' ', i);  // a timestamp may follow
    const auto v = line.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (v == "+Inf" || v == "Inf") s.value = HUGE_VAL;
    else if (v == "-Inf") s.value = -HUGE_VAL;
    else if (v == "NaN") s.value = std::nan("");
    else {
      const auto r = std::from_chars(v.data(), v.data() + v.size(), s.value);
      if (r.ec != std::errc{} || r.ptr != v.data() + v.size())
        fail(fmt::format("{}: '{}' is not a number", s.name, printable(v, 40)));
    }
    std::string key = s.name;
    for (const auto& [k, lv] : s.labels) key += "\x1f" + k + "=" + lv;
    if (!seen_series.insert(key).second) fail(fmt::format("{}: the same series twice", s.name));
    out.samples.push_back(std::move(s));
  }
  return out;
}

}  // namespace wanlab::api

#include "wanlab/lab/wan_tc.hpp"
#include "wanlab/shaping/engine.hpp"

namespace wanlab::api {

void write_link_metrics(MetricsText& out, const core::Topology& topo, const std::vector<shaping::LinkCounters>& counters,
                        const std::string& backend, double rate_scale) {
  std::vector<MetricLabels> labels;
  for (const auto& l : topo.links) labels.push_back({{"src", topo.dcs[l.src].name}, {"dst", topo.dcs[l.dst].name}});
  const std::size_t n = std::min(topo.links.size(), counters.size());
  auto each = [&](const char* name, const char* type, const char* help, auto value) {
    out.family(name, type, help);
    for (std::size_t i = 0; i < n; ++i) out.sample(labels[i], static_cast<double>(value(topo.links[i], counters[i])));
  };
  using L = core::WanLink;
  using C = shaping::LinkCounters;
  each("wanlab_link_bytes_total", "counter", "Bytes sent on the directed WAN link (frames as the link carries them).",
       [](const L&, const C& c) { return c.bytes; });
  each("wanlab_link_packets_total", "counter", "Packets sent on the directed WAN link.",
       [](const L&, const C& c) { return c.packets; });
  each("wanlab_link_payload_bytes_total", "counter", "TCP and UDP payload bytes sent on the directed WAN link.",
       [](const L&, const C& c) { return c.payload_bytes; });
  const bool apart = backend == "userspace";
  out.family("wanlab_link_dropped_packets_total", "counter",
             "Packets the link dropped, by reason: queue (overflow) and loss (emulated); the kernel backend counts "
             "both as reason=\"queue_or_loss\".");
  for (std::size_t i = 0; i < n; ++i) {
    if (apart) {
      auto q = labels[i], lo = labels[i];
      q.emplace_back("reason", "queue");
      lo.emplace_back("reason", "loss");
      out.sample(q, static_cast<double>(counters[i].dropped_queue));
      out.sample(lo, static_cast<double>(counters[i].dropped_loss));
    } else {
      auto b = labels[i];
      b.emplace_back("reason", "queue_or_loss");
      out.sample(b, static_cast<double>(counters[i].drops));
    }
  }
  each("wanlab_link_queue_packets", "gauge", "Packets waiting in the link's queue now.",
       [](const L&, const C& c) { return c.queued_packets; });
  each("wanlab_link_queue_bytes", "gauge", "Bytes waiting in the link's queue now.",
       [](const L&, const C& c) { return c.queued_bytes; });
  each("wanlab_link_rate_bytes_per_second", "gauge",
       "The link's configured rate (bytes per second; a run's scale is wanlab_link_rate_scale).",
       [](const L& l, const C&) { return static_cast<double>(l.params.rate.bps) / 8.0; });
  out.family("wanlab_link_rate_scale", "gauge", "The factor the running scenario scales every WAN rate by (1: none).");
  out.sample({}, rate_scale);
  each("wanlab_link_delay_seconds", "gauge", "The link's configured one-way delay.",
       [](const L& l, const C&) { return std::chrono::duration<double>(l.params.delay).count(); });
  each("wanlab_link_jitter_seconds", "gauge", "The link's configured delay jitter.",
       [](const L& l, const C&) { return std::chrono::duration<double>(l.params.jitter).count(); });
  each("wanlab_link_loss_ratio", "gauge", "The link's configured random loss probability (0..1).",
       [](const L& l, const C&) { return l.params.loss.fraction(); });
  each("wanlab_link_queue_limit_packets", "gauge", "The link's queue limit in force, in packets.",
       [&](const L& l, const C&) { return lab::queue_limit_packets(topo, l); });
}

void write_engine_metrics(MetricsText& out, const std::vector<std::pair<std::string, std::uint64_t>>& stats) {
  if (stats.empty()) return;
  std::map<std::string, std::uint64_t> s(stats.begin(), stats.end());
  auto get = [&](const char* k) { return static_cast<double>(s.count(k) ? s.at(k) : 0); };
  if (!s.count("releases")) return;
  out.family("wanlab_engine_release_lateness_seconds", "histogram",
             "How late the userspace engine handed packets to the kernel against the time their link's model made "
             "them due.");
  std::vector<double> bounds;
  std::vector<std::uint64_t> counts;
  for (std::size_t i = 0; i < shaping::kReleaseLateBoundsNs.size(); ++i) {
    const bool last = i + 1 == shaping::kReleaseLateBoundsNs.size();
    bounds.push_back(last ? HUGE_VAL : static_cast<double>(shaping::kReleaseLateBoundsNs[i]) / 1e9);
    const auto key = last ? std::string("release_late_le_inf")
                          : fmt::format("release_late_le_{}ns", shaping::kReleaseLateBoundsNs[i]);
    counts.push_back(s.count(key) ? s.at(key) : 0);
  }
  out.histogram({}, bounds, counts, get("release_late_ns_total") / 1e9);
  out.family("wanlab_engine_release_lateness_max_seconds", "gauge", "The latest release so far.");
  out.sample({}, get("release_late_ns_max") / 1e9);
  out.family("wanlab_engine_cpu_seconds_total", "counter", "CPU time of the engine thread (user and system).");
  out.sample({}, get("cpu_us") / 1e6);
  out.family("wanlab_engine_ring_dropped_frames_total", "counter",
             "Frames the kernel dropped because an engine receive ring was full, by ring (mtu, big), or that found "
             "the transmit ring full (tx).");
  out.sample({{"ring", "mtu"}}, get("rx_ring_dropped"));
  out.sample({{"ring", "big"}}, get("rx_big_ring_dropped"));
  out.sample({{"ring", "tx"}}, get("tx_ring_full"));
  out.family("wanlab_engine_frames_total", "counter",
             "Frames by what the engine did with them: received, forwarded, not_for_wan, unroutable, truncated, "
             "ttl_expired, pool_exhausted.");
  for (const char* k : {"rx_frames", "forwarded", "not_for_wan", "unroutable", "truncated", "ttl_expired", "pool_exhausted"})
    out.sample({{"what", std::string_view(k) == "rx_frames" ? "received" : k}}, get(k));
  out.family("wanlab_engine_sleeps_total", "counter", "Times the engine thread slept waiting for packets or deadlines.");
  out.sample({}, get("sleeps"));
  out.family("wanlab_engine_gated_flows", "gauge", "Flows the arbiter's windows gate now, by state (open, closed).");
  out.sample({{"state", "open"}}, get("open_gates"));
  out.sample({{"state", "closed"}}, get("gated_flows") - get("open_gates"));
  out.family("wanlab_engine_gate_held_packets", "gauge", "Packets held at closed gates now.");
  out.sample({}, get("held_packets"));
  out.family("wanlab_engine_gate_dropped_packets_total", "counter", "Packets dropped at full closed gates.");
  out.sample({}, get("gate_dropped"));
}

}  // namespace wanlab::api
