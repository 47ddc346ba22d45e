// Workload cards (card.yaml) and launch.sh: what a card holds, that it reads back, and one
// error with file, line and reason for a malformed one.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <fstream>

#include "temp_dir.hpp"
#include "wanlab/core/round_trip.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/evidence/analyze.hpp"
#include "wanlab/evidence/card.hpp"
#include "wanlab/evidence/trace_import.hpp"
#include "wanlab/sim/simulator.hpp"
#include "wanlab/workload/gpu.hpp"
#include "wanlab/workload/metrics.hpp"
#include "wanlab/workload/plan.hpp"
#include "wanlab/workload/scenario.hpp"

using namespace wanlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = WANLAB_SOURCE_DIR;

workload::Plan shipped_plan(const std::string& policy, int connections) {
  auto s = workload::load_scenario(kSource + "/bench/scenarios/two-dc-1b.json");
  s.policy = policy;
  s.connections = connections;
  return workload::build_plan(s, core::load_topology(s.topology_path));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const evidence::EvidenceError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("card: a shipped scenario's card reads back with every field", "[evidence][card]") {
  const auto plan = shipped_plan("atlas", 4);
  evidence::CardInputs in;
  in.command = "run";
  in.plan = &plan;
  in.topology = &plan.topology;
  in.summary = {{"backend", "userspace"}, {"run", "r1"}, {"iteration_time_s", {{"mean", 0.9}}}};
  in.framework = "wanlab agents";
  in.invocation = {{"build/controller/wanlab", "run", "bench/scenarios/two-dc-1b.json", "--out", "it's here"}, "/tmp/x y"};
  const auto card = evidence::make_card(in);
  const auto back = evidence::parse_card(evidence::card_yaml(card), "card.yaml");
  CHECK(back == card);
  CHECK(back["model"]["layers"] == 24);
  CHECK(back["parallelism"]["pp"] == 2);
  CHECK(back["parallelism"]["gpus"] == 32);
  CHECK(back["schedule"]["name"] == "1f1b");
  CHECK(back["placement"]["stages"].size() == 2);
  CHECK(back["hardware"]["gpus"][0]["kind"] == plan.topology.dcs[0].gpu);
  CHECK(back["hardware"]["mfu"] == 0.4);
  CHECK(back["network"]["backend"] == "userspace");
  CHECK(back["network"]["scale"] == 0.05);
  CHECK(back["network"]["wan"].size() == plan.topology.links.size());
  CHECK(back["network"]["wan"][0]["rtt_ms"].get<double>() > 0);
  // The card's RTT is the one the arbiter and the simulator use (core::round_trip).
  for (std::size_t i = 0; i < plan.topology.links.size(); ++i)
    CHECK(back["network"]["wan"][i]["rtt_ms"].get<double>() ==
          Approx(static_cast<double>(core::round_trip(plan.topology, plan.topology.links[i]).count()) / 1e6));
  // A link without its reverse: its ACKs are taken to come back the same way (twice its delay).
  auto one_way = plan.topology;
  const auto src = one_way.links[0].src, dst = one_way.links[0].dst;
  std::erase_if(one_way.links, [&](const auto& l) { return l.src == dst && l.dst == src; });
  in.topology = &one_way;
  const auto lone = evidence::make_card(in);
  CHECK(lone["network"]["wan"][0]["rtt_ms"].get<double>() ==
        Approx(2 * static_cast<double>(one_way.links[0].params.delay.count()) / 1e6));
  in.topology = &plan.topology;
  CHECK(back["bandwidth_policy"] == "atlas");
  CHECK(back["wanlab"]["commit"] == std::string(commit()));
  CHECK(back["wanlab"]["version"] == std::string(version()));
  CHECK(back["host"]["kernel"] == kernel_release());
  CHECK(back["results"]["iteration_time_s"] == 0.9);

  const auto sh = evidence::launch_script(in);
  CHECK(sh.starts_with("#!/bin/sh\n"));
  CHECK(sh.find("cd '/tmp/x y'\n") != std::string::npos);
  CHECK(sh.find("build/controller/wanlab run bench/scenarios/two-dc-1b.json --out 'it'\\''s here'\n") !=
        std::string::npos);
}

TEST_CASE("card: a malformed card gets one error with file, line and reason", "[evidence][card]") {
  CHECK(error_of([] { evidence::parse_card("card: 1\ncommand: [run\n", "a/card.yaml"); })
            .starts_with("a/card.yaml:3:1: not YAML"));
  CHECK(error_of([] { evidence::parse_card("- 1\n", "c.yaml"); }) == "c.yaml:1:1: (top level): a card is a mapping (key: value lines)");
  const std::string good_head =
      "card: 1\ncommand: run\nwanlab: {version: 0.1.0, commit: abc}\nhost: {name: h}\nframework: {name: x}\n";
  CHECK_NOTHROW(evidence::parse_card(good_head, "c.yaml"));
  CHECK(error_of([] { evidence::parse_card("card: 2\n", "c.yaml"); }) ==
        "c.yaml:1:7: card: unknown card version '2' (this wanlab reads 1)");
  CHECK(error_of([] { evidence::parse_card("card: 1\ncommand: fly\n", "c.yaml"); }) ==
        "c.yaml:2:10: command: 'fly' is not one of run, bench, simulate, launch, import");
  CHECK(error_of([] { evidence::parse_card("card: 1\ncommand: run\n", "c.yaml"); }) == "c.yaml:1:1: wanlab: missing");
  CHECK(error_of([&] { evidence::parse_card(good_head + "parallelism:\n  pp: two\n  dp: 1\n  tp: 1\n", "c.yaml"); }) ==
        "c.yaml:7:7: parallelism.pp: 'two' is not a positive integer");
  CHECK(error_of([&] {
          evidence::parse_card(good_head + "network:\n  wan:\n    - {src: a, dst: b, rate_bps: fast}\n", "c.yaml");
        }) == "c.yaml:8:34: network.wan[0].rate_bps: 'fast' is not a number");
}
