// The agent's data plane over the loopback path: which connections TCP paces.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <set>

#include "data_plane.hpp"

using namespace wanlab;
using namespace std::chrono_literals;

TEST_CASE("agent: WAN connections are paced as asked, the others are not", "[agent]") {
  agent::DataPlane receiver;
  const auto port = receiver.listen(0, {1, 3, 5}, 4);
  const std::map<int, agent::PeerAddress> peers = {
      {1, {"127.0.0.1", port, "euw"}}, {3, {"127.0.0.1", port, "euw"}}, {5, {"127.0.0.1", port, "use"}}};
  agent::DataPlane sender;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  // As Agent::plan_connections asks: TCP's own pacing with no cap (tcp_pacing), a pair's
  // share of the link (windowed runs), and none (inside a DC).
  sender.connect({{0, 1, 2, -1, 0, agent::kPacingWithoutCap}, {2, 3, 1, -1, 0, 12'500'000}, {4, 5, 1, -1, 0, 0}},
                 peers, deadline);
  receiver.wait_incoming(deadline);

  const auto uncapped = sender.tcp_states(0);
  REQUIRE(uncapped.size() == 2);
  for (const auto& t : uncapped) {
    CHECK(t.dst == 1);
    CHECK(t.paced());
    CHECK(t.max_pacing_rate == agent::kPacingWithoutCap);
  }
  const auto capped = sender.tcp_states(2);
  REQUIRE(capped.size() == 1);
  CHECK(capped[0].paced());
  CHECK(capped[0].max_pacing_rate == 12'500'000);
  const auto unpaced = sender.tcp_states(4);
  REQUIRE(unpaced.size() == 1);
  CHECK_FALSE(unpaced[0].paced());
  CHECK(unpaced[0].mss > 0);
}
