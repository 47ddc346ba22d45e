// The lab's IPv4 plan inside 198.18.0.0/15: exact addresses at the edges of the plan.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "wanlab/core/address_plan.hpp"

using namespace wanlab::core;

TEST_CASE("DC subnets and gateways", "[unit][address_plan]") {
  CHECK(dc_subnet(0).to_string() == "198.18.0.0/22");
  CHECK(dc_subnet(1).to_string() == "198.18.4.0/22");
  CHECK(dc_subnet(63).to_string() == "198.18.252.0/22");
  CHECK(dc_gateway(0).to_string() == "198.18.0.1");
  CHECK(dc_gateway(1).to_string() == "198.18.4.1");
  CHECK(dc_gateway(63).to_string() == "198.18.252.1");
}

TEST_CASE("node addresses", "[unit][address_plan]") {
  CHECK(node_address(0, 0).to_string() == "198.18.0.2");
  CHECK(node_address(0, 1).to_string() == "198.18.0.3");
  CHECK(node_address(0, 1020).to_string() == "198.18.3.254");
  CHECK(node_address(1, 0).to_string() == "198.18.4.2");
  CHECK(node_address(1, 1020).to_string() == "198.18.7.254");
  CHECK(node_address(63, 0).to_string() == "198.18.252.2");
  CHECK(node_address(63, 1020).to_string() == "198.18.255.254");
  // The last node stays below the /22's broadcast address.
  CHECK(node_address(1, kMaxNodesPerDc - 1).value + 1 == dc_subnet(1).address.value + 1023);
}

TEST_CASE("router-gateway transit /30s", "[unit][address_plan]") {
  CHECK(transit_router_side(0).to_string() == "198.19.0.1/30");
  CHECK(transit_gateway_side(0).to_string() == "198.19.0.2/30");
  CHECK(transit_router_side(1).to_string() == "198.19.0.5/30");
  CHECK(transit_gateway_side(1).to_string() == "198.19.0.6/30");
  CHECK(transit_router_side(63).to_string() == "198.19.0.253/30");
  CHECK(transit_gateway_side(63).to_string() == "198.19.0.254/30");
  CHECK(transit_router_side(5).contains(transit_gateway_side(5).address));
  CHECK_FALSE(transit_router_side(5).contains(transit_gateway_side(6).address));
  CHECK(lab_supernet().to_string() == "198.18.0.0/15");
}

TEST_CASE("indices outside the plan throw", "[unit][address_plan]") {
  CHECK_THROWS_AS(dc_subnet(-1), std::out_of_range);
  CHECK_THROWS_AS(dc_subnet(kMaxDcs), std::out_of_range);
  CHECK_THROWS_AS(dc_gateway(64), std::out_of_range);
  CHECK_THROWS_AS(transit_router_side(64), std::out_of_range);
  CHECK_THROWS_AS(transit_gateway_side(-1), std::out_of_range);
  CHECK_THROWS_AS(node_address(0, kMaxNodesPerDc), std::out_of_range);
  CHECK_THROWS_AS(node_address(0, -1), std::out_of_range);
  CHECK_THROWS_AS(node_address(64, 0), std::out_of_range);
  CHECK_THROWS_WITH(node_address(0, 1021), Catch::Matchers::Contains("node index 1021"));
  CHECK_NOTHROW(node_address(63, 1020));
}

TEST_CASE("prefix containment", "[unit][address_plan]") {
  CHECK(dc_subnet(1).contains(node_address(1, 0)));
  CHECK(dc_subnet(1).contains(node_address(1, 1020)));
  CHECK(dc_subnet(1).contains(dc_gateway(1)));
  CHECK_FALSE(dc_subnet(1).contains(node_address(0, 1020)));
  CHECK_FALSE(dc_subnet(1).contains(node_address(2, 0)));
  for (int dc : {0, 1, 63}) {
    CHECK(lab_supernet().contains(node_address(dc, 1020)));
    CHECK(lab_supernet().contains(transit_router_side(dc).address));
    // Transit addresses are outside every DC LAN.
    CHECK_FALSE(dc_subnet(dc).contains(transit_gateway_side(dc).address));
  }
  CHECK(lab_supernet().contains(Ipv4{(198U << 24) | (19U << 16) | 0xffffU}));
  CHECK_FALSE(lab_supernet().contains(Ipv4{(198U << 24) | (20U << 16)}));
  CHECK_FALSE(lab_supernet().contains(Ipv4{(198U << 24) | (17U << 16) | 0xffffU}));
  CHECK(Ipv4Prefix{Ipv4{0}, 0}.contains(Ipv4{0xffffffffU}));
  CHECK(Ipv4Prefix{node_address(0, 7), 32}.contains(node_address(0, 7)));
  CHECK_FALSE(Ipv4Prefix{node_address(0, 7), 32}.contains(node_address(0, 8)));
}
