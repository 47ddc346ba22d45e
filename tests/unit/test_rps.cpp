// Receive packet steering masks (netlink/rps.hpp): the kernel's rps_cpus format.
#include <catch2/catch.hpp>

#include <algorithm>

#include "wanlab/netlink/rps.hpp"

using wanlab::netlink::allowed_cpus_except;
using wanlab::netlink::rps_mask;

TEST_CASE("rps_cpus masks in the kernel's format", "[unit][rps]") {
  CHECK(rps_mask({}) == "0");
  CHECK(rps_mask({0}) == "1");
  CHECK(rps_mask({1}) == "2");
  CHECK(rps_mask({0, 2, 3}) == "d");
  CHECK(rps_mask({31}) == "80000000");
  // Words of 32 CPUs, most significant first, the lower ones zero-padded.
  CHECK(rps_mask({0, 33}) == "2,00000001");
  CHECK(rps_mask({64}) == "1,00000000,00000000");
  CHECK(rps_mask({3, 1, 3}) == "a");  // order and repeats do not matter
}

TEST_CASE("the CPUs other than the engine's are the allowed ones less that one", "[unit][rps]") {
  const auto all = allowed_cpus_except(-1);
  REQUIRE_FALSE(all.empty());
  CHECK(std::is_sorted(all.begin(), all.end()));
  const auto others = allowed_cpus_except(all.back());
  CHECK(others.size() == all.size() - 1);
  CHECK(std::find(others.begin(), others.end(), all.back()) == others.end());
}
