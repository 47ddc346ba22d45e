#pragma once
// iperf3 client results (-J --get-server-output), as the netns tests read them.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process.hpp"

namespace wanlab::test {

struct Iperf {
  int code = -1;
  std::vector<double> interval_bps;  // receiver side, one per reporting interval
  double received_bytes = 0;
  std::string error;
};

inline Iperf parse_iperf(const Run& r) {
  Iperf out;
  out.code = r.code;
  try {
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    if (j.contains("error")) out.error = j["error"].get<std::string>();
    for (const auto& i : j["server_output_json"]["intervals"])
      out.interval_bps.push_back(i["sum"]["bits_per_second"].get<double>());
    out.received_bytes = j["end"]["sum_received"]["bytes"].get<double>();
  } catch (const std::exception& e) {
    out.error = std::string("unparseable iperf3 output: ") + e.what() + ": " + r.out;
  }
  return out;
}

}  // namespace wanlab::test
