// Chakra execution traces in: the hand-made two-rank trace (traces/chakra/two-rank, written
// by traces/chakra/make_test_traces.py), replayed in the simulator, and malformed traces.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "temp_dir.hpp"
#include "wanlab/evidence/card.hpp"
#include "wanlab/evidence/chakra_import.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/metrics.hpp"

using namespace wanlab;
using program::OpKind;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(WANLAB_SOURCE_DIR) + "/traces/chakra/two-rank/";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const evidence::EvidenceError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The protobuf wire format, as the script writes it.
std::string varint(std::uint64_t v) {
  std::string out;
  do {
    const auto b = static_cast<char>(v & 0x7f);
    v >>= 7;
    out += v ? static_cast<char>(b | 0x80) : b;
  } while (v);
  return out;
}
std::string field(int f, const std::string& payload) { return varint(static_cast<std::uint64_t>(f) << 3 | 2) + varint(payload.size()) + payload; }
std::string number(int f, std::uint64_t v) { return varint(static_cast<std::uint64_t>(f) << 3) + varint(v); }
std::string attr(const std::string& name, std::int64_t v) { return field(1, name) + number(9, static_cast<std::uint64_t>(v)); }
std::string node(std::uint64_t id, int type, std::vector<std::uint64_t> deps, std::vector<std::string> attrs = {}) {
  std::string m = number(1, id) + field(2, fmt::format("n{}", id)) + number(3, static_cast<std::uint64_t>(type));
  std::string packed;
  for (auto d : deps) packed += varint(d);
  if (!deps.empty()) m += field(4, packed);
  m += number(7, 100);
  for (const auto& a : attrs) m += field(10, a);
  return m;
}
std::string et(const std::vector<std::string>& nodes) {
  std::string out = varint(7) + field(1, "0.0.4");
  for (const auto& n : nodes) out += varint(n.size()) + n;
  return out;
}

}  // namespace

TEST_CASE("chakra: the hand-made two-rank trace becomes programs, its unsupported nodes listed",
          "[evidence][chakra]") {
  evidence::ImportOptions o;
  o.effective_flops = 1e12;
  const auto job = evidence::import_chakra_traces({kDir + "rank.0.et", kDir + "rank.1.et"}, o);
  REQUIRE(job.programs.size() == 2);
  CHECK(job.source == "chakra execution trace (protobuf)");
  std::vector<OpKind> kinds;
  for (const auto& op : job.programs[0].ops) kinds.push_back(op.kind);
  CHECK(kinds == std::vector<OpKind>{OpKind::forward, OpKind::send, OpKind::forward, OpKind::send, OpKind::recv,
                                     OpKind::backward, OpKind::recv, OpKind::backward, OpKind::allreduce,
                                     OpKind::forward, OpKind::forward, OpKind::optimizer});
  const auto& r0 = job.programs[0].ops;
  CHECK(r0[0].flops == Approx(1000e-6 * 1e12));  // duration_micros 1000 at 1e12 FLOP/s
  CHECK(r0[1].peer == 1);
  CHECK(r0[1].bytes == 64 * 1024);
  CHECK(r0[4].bytes == 64 * 1024);  // the gradient's size: its send's comm_size
  CHECK(r0[8].bytes == 1 << 20);
  CHECK(r0[8].ring == std::vector<int>{0, 1});
  CHECK(job.measured_iteration_mean_s == Approx(0.01282));
  std::string all;
  for (const auto& u : job.unsupported) all += u + "\n";
  CHECK(all.find(kDir + "rank.0.et: 1 x COMM_COLL_NODE ALL_GATHER (wanlab programs lack it): its duration is kept "
                        "as compute") != std::string::npos);
  CHECK(all.find(kDir + "rank.1.et: 1 x MEM_LOAD_NODE") != std::string::npos);

  // It replays: every send meets its receive, the all-reduce its ring.
  const auto topo = core::load_topology(std::string(WANLAB_SOURCE_DIR) + "/topologies/two-dc.json");
  const auto plan = evidence::replay_plan(job, topo, {"use", "euw"}, o.effective_flops, 2, 1);
  const auto summary = workload::summarize(plan, sim::simulate(plan).by_worker());
  CHECK(summary["iteration_time_s"]["mean"].get<double>() > 0.0128);
  CHECK(evidence::is_chakra_trace(kDir + "rank.0.et"));
  CHECK_FALSE(evidence::is_chakra_trace(std::string(WANLAB_SOURCE_DIR) + "/traces/pytorch/two-stage-gloo/rank0.json"));
}

TEST_CASE("chakra: a malformed trace is one error with the file, the byte, the node and the reason",
          "[evidence][chakra]") {
  evidence::ImportOptions o;
  const auto one = [&](const std::string& data) {
    return error_of([&] { evidence::import_chakra_documents({data}, {"r0.et"}, o); });
  };
  auto good = read(kDir + "rank.0.et");
  CHECK(one(good.substr(0, good.size() - 3)).starts_with("r0.et: byte "));
  CHECK(one(good.substr(0, good.size() - 3)).find("truncated") != std::string::npos);
  CHECK(one("") == "r0.et: byte 0: empty: not a Chakra execution trace");
  CHECK(one(et({node(1, 4, {}), node(2, 4, {9})})) ==
        "r0.et: byte 20: node 1 (id 2, 'n2'): depends on node id 9, which the trace does not have");
  CHECK(one(et({node(1, 4, {2}), node(2, 4, {1})})) == "r0.et: byte 9: node 0 (id 1, 'n1'): in a dependency cycle (or after one)");
  CHECK(one(et({node(1, 4, {}), node(1, 4, {})})) == "r0.et: byte 20: node 1 (id 1, 'n1'): a second node with id 1");
  const auto two = [&](const std::string& a, const std::string& b) {
    return error_of([&] { evidence::import_chakra_documents({a, b}, {"r0.et", "r1.et"}, o); });
  };
  const std::string recv = et({node(1, 6, {}, {attr("comm_src", 0), attr("comm_size", 64)})});
  CHECK(two(et({node(1, 5, {}, {attr("comm_dst", 1)})}), recv) ==
        "r0.et: byte 9: node 0 (id 1, 'n1'): no comm_size attribute (bytes) and no message size was given "
        "(--message-bytes)");
  CHECK(two(et({node(1, 5, {}, {attr("comm_dst", 0), attr("comm_size", 64)})}), recv) ==
        "r0.et: byte 9: node 0 (id 1, 'n1'): comm_dst 0 is not another of the 2 ranks");
  CHECK(two(et({node(1, 4, {})}), recv) == "r1.et: rank 1 receives 1 messages from rank 0, which sends none");
  CHECK(two(et({node(1, 7, {}, {attr("comm_size", 64)})}), et({})) ==
        "r0.et: byte 9: node 0 (id 1, 'n1'): a collective without a comm_type attribute");
}
