#pragma once
// iperf3 client results (-J --get-server-output), as the netns tests read them.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process.hpp"

namespace wanlab::test {

struct Iperf {
  int code = -1;
  std::vector<double> interval_bps;  // receiver side, one per whole reporting interval
  double received_bytes = 0;
  std::string error;
};

inline Iperf parse_iperf(const Run& r) {
  Iperf out;
  out.code = r.code;
  try {
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    if (j.contains("error")) out.error = j["error"].get<std::string>();
    const auto& intervals = j["server_output_json"]["intervals"];
    for (const auto& i : intervals) out.interval_bps.push_back(i["sum"]["bits_per_second"].get<double>());
    // The server reports the stub of an interval after the client stopped: not a whole
    // interval's goodput.
    if (intervals.size() >= 2 &&
        intervals.back()["sum"]["seconds"].get<double>() < 0.9 * intervals.front()["sum"]["seconds"].get<double>())
      out.interval_bps.pop_back();
    out.received_bytes = j["end"]["sum_received"]["bytes"].get<double>();
  } catch (const std::exception& e) {
    out.error = std::string("unparseable iperf3 output: ") + e.what() + ": " + r.out;
  }
  return out;
}

}  // namespace wanlab::test
