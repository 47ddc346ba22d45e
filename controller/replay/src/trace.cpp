// Trace files: parsing, validation (every problem at once, with line and column), the
// canonical CSV form, and how a step changes a link.
#include "wanlab/replay/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "text.hpp"
#include "wanlab/common/printable.hpp"

namespace wanlab::replay {
namespace {

enum class Column { time, rate, delay, jitter, loss };
constexpr std::string_view kColumnNames[] = {"time", "rate", "delay", "jitter", "loss"};
constexpr std::string_view kHeaderExample = "time,rate,delay,jitter,loss";

std::string_view name_of(Column c) {
  return kColumnNames[static_cast<int>(c)];
}

std::optional<Column> column_named(std::string_view s) {
  for (int i = 0; i < 5; ++i)
    if (s == kColumnNames[i]) return static_cast<Column>(i);
  return std::nullopt;
}

// The known column an unknown one was probably meant to be ("rate_mbit" -> "rate").
std::string_view closest_column(std::string_view s) {
  for (auto k : kColumnNames)
    if (s.size() > k.size() && s.starts_with(k) && !std::isalnum(static_cast<unsigned char>(s[k.size()]))) return k;
  std::string_view best;
  std::size_t best_d = 3;
  for (auto k : kColumnNames) {
    const auto d = text::edit_distance(s, k);
    if (d < best_d) best = k, best_d = d;
  }
  return best;
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& file) : text_(text), p_(file) { trace_.source = file; }

  Trace parse() {
    std::size_t lineno = 0;
    bool header_ok = false;
    for (std::string_view raw : text::lines(text_)) {
      ++lineno;
      const auto line = text::trim(raw);
      if (line.empty()) continue;
      if (line.starts_with("#@")) {
        directive(line.substr(2), lineno);
        continue;
      }
      if (line.starts_with('#')) continue;
      if (!header_seen_) {
        header_seen_ = true;
        header_ok = header(line, lineno);
        if (!header_ok) break;  // rows cannot be read without their columns
        continue;
      }
      row(line, lineno);
    }
    finish(header_ok);
    p_.throw_if_any();
    return std::move(trace_);
  }

 private:
  void directive(std::string_view body, std::size_t lineno) {
    if (header_seen_) {
      p_.add(location(lineno), "directives (#@ ...) go before the header line");
      return;
    }
    for (auto token : text::words(body)) {
      const auto eq = token.find('=');
      if (eq == std::string_view::npos) {
        p_.add(location(lineno),
               fmt::format("'{}': write directives as key=value, e.g. \"#@ mode=loop end=30s\"", token));
        continue;
      }
      const auto key = token.substr(0, eq);
      const auto value = token.substr(eq + 1);
      const std::string where = location(lineno, 0, fmt::format("#@ {}", key));
      if (key != "mode" && key != "end") {
        p_.add(location(lineno), fmt::format("unknown directive '{}'; known: mode (hold or loop), end (a time)", key));
        continue;
      }
      if (auto [it, fresh] = directive_lines_.try_emplace(std::string(key), lineno); !fresh) {
        p_.add(where, fmt::format("'{}' already given at line {}", key, it->second));
        continue;
      }
      if (key == "mode") {
        if (auto m = parse_end_mode(value))
          trace_.mode = *m;
        else
          p_.add(where, fmt::format("'{}': mode is hold (keep the last values) or loop (start over at end)", value));
      } else {
        auto t = parse_trace_time(value);
        if (!t)
          p_.add(where, t.error);
        else if (t.value.count() <= 0)
          p_.add(where, "end must be after the start of the trace");
        else
          trace_.end = t.value;
      }
    }
  }

  bool header(std::string_view line, std::size_t lineno) {
    const auto fields = text::split(line, ',');
    const std::string first = text::lower(text::trim(fields[0]));
    if (first != "time") {
      if (fields.size() == 1 && !first.empty() &&
          std::all_of(first.begin(), first.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }))
        p_.add(location(lineno),
               "not a CSV trace: it looks like a Mahimahi link trace (one delivery time in milliseconds per line); "
               "give --format mahimahi (API: \"format\": \"mahimahi\"), or convert it with `wanlab trace "
               "import-mahimahi`");
      else if (!first.empty() && (std::isdigit(static_cast<unsigned char>(first[0])) != 0))
        p_.add(location(lineno),
               fmt::format("missing header line: the first line must name the columns, e.g. \"{}\"", kHeaderExample));
      else  // not quoted: until its header is read, the file may not be a trace at all
        p_.add(location(lineno, 1),
               fmt::format("the first column must be \"time\" (header e.g. \"{}\")", kHeaderExample));
      return false;
    }
    bool ok = true;
    std::set<Column> seen{Column::time};
    columns_.push_back(Column::time);
    for (std::size_t i = 1; i < fields.size(); ++i) {
      const std::string name = text::lower(text::trim(fields[i]));
      const auto col = column_named(name);
      const auto where = location(lineno, i + 1, name);
      if (!col) {
        const auto guess = closest_column(name);
        p_.add(where, fmt::format("unknown column \"{}\"{}; columns are time, then any of rate, delay, jitter, loss",
                                  name, guess.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", guess)));
        ok = false;
      } else if (!seen.insert(*col).second) {
        p_.add(where, fmt::format("column \"{}\" appears twice", name));
        ok = false;
      }
      columns_.push_back(col.value_or(Column::time));
    }
    if (ok && columns_.size() == 1) {
      p_.add(location(lineno), "no parameter columns: give any of rate, delay, jitter, loss after time");
      ok = false;
    }
    return ok;
  }

  void row(std::string_view line, std::size_t lineno) {
    rows_seen_ = true;
    if (line.find('"') != std::string_view::npos) {
      p_.add(location(lineno), "quoted fields are not supported (no value needs a comma)");
      return;
    }
    const auto fields = text::split(line, ',');
    if (fields.size() > columns_.size()) {
      p_.add(location(lineno, columns_.size() + 1),
             fmt::format("{} fields, but the header names {} columns", fields.size(), columns_.size()));
      return;
    }
    Step s;
    s.line = lineno;
    bool time_ok = false;
    const std::size_t problems_before = p_.count();
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const auto cell = text::trim(fields[i]);
      const auto col = columns_[i];
      const auto where = location(lineno, i + 1, name_of(col));
      if (col == Column::time) {
        time_ok = time(cell, where, lineno, s);
        continue;
      }
      if (cell.empty()) continue;  // this step leaves the parameter as it is
      switch (col) {
        case Column::rate:
          if (auto r = parse_rate(cell))
            s.rate = r.value;
          else
            p_.add(where, r.error);
          break;
        case Column::delay:
          if (auto d = parse_duration(cell))
            s.delay = d.value;
          else
            p_.add(where, d.error);
          break;
        case Column::jitter:
          if (auto d = parse_duration(cell))
            s.jitter = d.value;
          else
            p_.add(where, d.error);
          break;
        case Column::loss:
          if (auto l = parse_percent(cell))
            s.loss = l.value;
          else
            p_.add(where, l.error);
          break;
        case Column::time:
          break;
      }
    }
    if (s.delay && s.jitter && *s.jitter > *s.delay) {
      const auto i = std::find(columns_.begin(), columns_.end(), Column::jitter) - columns_.begin();
      p_.add(location(lineno, static_cast<std::size_t>(i) + 1, "jitter"),
             fmt::format("jitter {} exceeds the delay {} of the same step; a packet cannot arrive before it was sent",
                         wanlab::to_string(*s.jitter), wanlab::to_string(*s.delay)));
    }
    if (s.empty() && time_ok && p_.count() == problems_before) {
      p_.add(location(lineno), "the step sets nothing: give at least one of rate, delay, jitter, loss");
    }
    if (time_ok) trace_.steps.push_back(s);
  }

  bool time(std::string_view cell, const std::string& where, std::size_t lineno, Step& s) {
    if (cell.empty()) {
      p_.add(where, "missing time: every step needs one, e.g. \"1.5s\"");
      return false;
    }
    auto t = parse_trace_time(cell);
    if (!t) {
      p_.add(where, t.error);
      return false;
    }
    s.at = t.value;
    if (have_last_ && s.at <= last_at_) {
      p_.add(where, fmt::format("time {} is not after the previous step's {} (line {}): times must strictly increase",
                                format_trace_time(s.at), format_trace_time(last_at_), last_line_));
      // Keep the order for later rows; the step itself is dropped.
      return false;
    }
    have_last_ = true;
    last_at_ = s.at;
    last_line_ = lineno;
    return true;
  }

  void finish(bool header_ok) {
    if (!header_seen_) {
      p_.add("",
             fmt::format("no header line and no steps: a trace starts with a header such as \"{}\"", kHeaderExample));
      return;
    }
    if (!header_ok) return;
    if (!rows_seen_) {
      p_.add("", "no steps: add rows such as \"0s,100Mbit\" after the header");
      return;
    }
    const auto end_line = directive_lines_.contains("end") ? directive_lines_.at("end") : 0;
    const auto mode_line = directive_lines_.contains("mode") ? directive_lines_.at("mode") : 0;
    if (trace_.mode == EndMode::loop && !trace_.end && mode_line > 0)
      p_.add(location(mode_line, 0, "#@ mode"),
             "mode=loop needs the loop's period: add end=<time>, when the trace starts over, e.g. \"#@ mode=loop "
             "end=30s\"");
    if (trace_.end && have_last_ && *trace_.end <= last_at_)
      p_.add(location(end_line, 0, "#@ end"),
             fmt::format("end {} must be after the last step ({} at line {})", format_trace_time(*trace_.end),
                         format_trace_time(last_at_), last_line_));
  }

  std::string_view text_;
  Problems p_;
  Trace trace_;
  bool header_seen_ = false;
  std::vector<Column> columns_;
  std::map<std::string, std::size_t> directive_lines_;
  bool rows_seen_ = false;
  bool have_last_ = false;
  Duration last_at_{};
  std::size_t last_line_ = 0;
};

}  // namespace

std::string to_string(EndMode m) {
  return m == EndMode::loop ? "loop" : "hold";
}

std::optional<EndMode> parse_end_mode(std::string_view text) {
  if (text == "hold") return EndMode::hold;
  if (text == "loop") return EndMode::loop;
  return std::nullopt;
}

Duration Trace::length() const {
  if (end) return *end;
  return steps.empty() ? Duration{} : steps.back().at;
}

std::string location(std::size_t line, std::size_t column, std::string_view name) {
  std::string out = fmt::format("line {}", line);
  if (column > 0) out += fmt::format(", column {}", column);
  if (!name.empty()) out += fmt::format(" ({})", name);
  return out;
}

void Problems::add(std::string where, std::string reason) {
  if (d_.items().size() >= kMaxDiagnostics) {
    ++dropped_;
    return;
  }
  // What a reason quotes from the file (one token) is escaped: the message may go into a
  // JSON answer, a log or a terminal.
  d_.add(printable(where, 200), printable(reason, 400));
}

void Problems::throw_if_any() {
  if (dropped_ > 0) {
    d_.add("", fmt::format("... and {} more problem{} not listed", dropped_, dropped_ == 1 ? "" : "s"));
    dropped_ = 0;
  }
  d_.throw_if_any();
}

Parsed<Duration> parse_trace_time(std::string_view text) {
  Parsed<Duration> out;
  const auto t = text::trim(text);
  auto fail = [&](std::string reason) {
    out.error = fmt::format("'{}': {}", t, reason);
    return out;
  };
  if (t.empty()) return fail("empty time");
  if (t.front() == '-') return fail("must not be negative");
  auto digits = [&](std::size_t from) {
    std::size_t i = from;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
    return i;
  };
  const std::size_t whole_end = digits(0);
  std::string_view whole_digits = t.substr(0, whole_end), frac_digits;
  std::size_t i = whole_end;
  if (i < t.size() && t[i] == '.') {
    const std::size_t frac_end = digits(i + 1);
    frac_digits = t.substr(i + 1, frac_end - i - 1);
    i = frac_end;
  }
  if (whole_digits.empty() && frac_digits.empty()) return fail("does not start with a number");
  if (whole_digits.size() > 12 || frac_digits.size() > 12) return fail("too many digits");
  const std::string unit = text::lower(text::trim(t.substr(i)));
  std::int64_t ns_per_unit = 0;
  if (unit == "ms") ns_per_unit = 1'000'000;
  if (unit == "s") ns_per_unit = 1'000'000'000;
  if (unit == "min" || unit == "m") ns_per_unit = 60'000'000'000;
  if (unit == "h") ns_per_unit = 3'600'000'000'000;
  __extension__ using i128 = __int128;
  i128 whole = 0, frac = 0, scale = 1;
  for (char c : whole_digits) whole = whole * 10 + (c - '0');
  for (char c : frac_digits) frac = frac * 10 + (c - '0'), scale *= 10;
  if (unit.empty()) {
    if (whole == 0 && frac == 0) {
      out.value = Duration{0};
      return out;
    }
    return fail("missing unit; write e.g. \"1.5s\" or \"250ms\" (ms, s, min or h)");
  }
  if (unit == "us" || unit == "ns" || unit == "\u00b5s")
    return fail("trace times are whole milliseconds (1 ms granularity); use ms, s, min or h");
  if (ns_per_unit == 0) return fail(fmt::format("unknown time unit '{}'; use ms, s, min or h", unit));
  // Exact: whole * unit + frac * unit / 10^digits, in 128-bit nanoseconds.
  const i128 frac_ns_scaled = frac * ns_per_unit;
  const i128 total_scaled = whole * ns_per_unit * scale + frac_ns_scaled;
  constexpr std::int64_t kMaxNs = std::chrono::duration_cast<Duration>(kMaxTraceTime).count();
  if (total_scaled > static_cast<i128>(kMaxNs) * scale) return fail("longer than 30 days");
  if (total_scaled % (scale * 1'000'000) != 0) return fail("trace times are whole milliseconds (1 ms granularity)");
  out.value = Duration{static_cast<std::int64_t>(total_scaled / scale)};
  return out;
}

std::string format_trace_time(Duration t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t).count();
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  auto s = fmt::format("{}.{:03}", ms / 1000, ms % 1000);
  while (s.back() == '0') s.pop_back();
  return s + "s";
}

std::string human_trace_time(Duration t) {
  using namespace std::chrono;
  if (t >= hours(1) && t % hours(1) == Duration{0}) return fmt::format("{}h", duration_cast<hours>(t).count());
  if (t >= minutes(1) && t % minutes(1) == Duration{0}) return fmt::format("{}min", duration_cast<minutes>(t).count());
  return format_trace_time(t);
}

Trace parse_trace(std::string_view text, const std::string& file) {
  return Parser(text, file).parse();
}

Trace load_trace(const std::filesystem::path& file) {
  std::string text;
  if (auto err = text::read_file(file, text); !err.empty()) {
    core::Diagnostics d(file.string());
    d.add("", fmt::format("cannot read the file: {}", err));
    d.throw_if_any();
  }
  return parse_trace(text, file.string());
}

std::string to_csv(const Trace& trace, const std::vector<std::string>& comment) {
  std::string out;
  for (const auto& c : comment) out += c.empty() ? "#\n" : "# " + c + "\n";
  out += "#@ mode=" + to_string(trace.mode);
  if (trace.end) out += " end=" + format_trace_time(*trace.end);
  out += "\n";
  bool rate = false, delay = false, jitter = false, loss = false;
  for (const auto& s : trace.steps) {
    rate = rate || s.rate.has_value();
    delay = delay || s.delay.has_value();
    jitter = jitter || s.jitter.has_value();
    loss = loss || s.loss.has_value();
  }
  out += "time";
  if (rate) out += ",rate";
  if (delay) out += ",delay";
  if (jitter) out += ",jitter";
  if (loss) out += ",loss";
  out += "\n";
  for (const auto& s : trace.steps) {
    out += format_trace_time(s.at);
    if (rate) out += "," + (s.rate ? wanlab::to_string(*s.rate) : "");
    if (delay) out += "," + (s.delay ? wanlab::to_string(*s.delay) : "");
    if (jitter) out += "," + (s.jitter ? wanlab::to_string(*s.jitter) : "");
    if (loss) out += "," + (s.loss ? wanlab::to_string(*s.loss) : "");
    out += "\n";
  }
  return out;
}

core::LinkParams apply_step(const core::LinkParams& current, const Step& step) {
  core::LinkParams p = current;
  if (step.rate) p.rate = *step.rate;
  if (step.delay) p.delay = *step.delay;
  if (step.jitter) p.jitter = *step.jitter;
  if (step.loss) p.loss = *step.loss;
  return p;
}

void check_against(const Trace& trace, const core::LinkParams& initial, const std::string& link_name) {
  Problems p(trace.source);
  std::set<std::size_t> reported;
  core::LinkParams cur = initial;
  const int passes = trace.mode == EndMode::loop ? 2 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    for (std::size_t i = 0; i < trace.steps.size(); ++i) {
      const auto& s = trace.steps[i];
      cur = apply_step(cur, s);
      if (cur.jitter > cur.delay && reported.insert(i).second)
        p.add(s.line > 0 ? location(s.line) : fmt::format("step {}", i + 1),
              fmt::format("on link {} this step leaves jitter {} above delay {}{}; a packet cannot arrive before it "
                          "was sent: set delay or jitter in this step",
                          link_name, wanlab::to_string(cur.jitter), wanlab::to_string(cur.delay),
                          pass > 0 ? " (when the trace loops)" : ""));
    }
  }
  p.throw_if_any();
}

TraceSummary summarize(const Trace& trace) {
  TraceSummary s;
  s.steps = trace.steps.size();
  s.length = trace.length();
  for (const auto& st : trace.steps) {
    if (st.rate) {
      if (!s.min_rate || *st.rate < *s.min_rate) s.min_rate = st.rate;
      if (!s.max_rate || *st.rate > *s.max_rate) s.max_rate = st.rate;
    }
    if ((st.rate && st.rate->bps == 0) || (st.loss && st.loss->ppb == Probability::kOne)) ++s.outages;
  }
  return s;
}

}  // namespace wanlab::replay
