#include "wanlab/lab/naming.hpp"

#include <fmt/format.h>

namespace wanlab::lab {

std::string ns_prefix(std::string_view lab) { return fmt::format("{}.", lab); }
std::string ns_router(std::string_view lab) { return fmt::format("{}.router", lab); }
std::string ns_gateway(std::string_view lab, std::string_view dc) { return fmt::format("{}.gw-{}", lab, dc); }
std::string ns_node(std::string_view lab, std::string_view node) { return fmt::format("{}.{}", lab, node); }
std::string ns_rails(std::string_view lab, std::string_view dc) { return fmt::format("{}.rails-{}", lab, dc); }

std::string if_router_to(std::string_view dc) { return fmt::format("to-{}", dc); }
std::string if_gateway_wan(std::string_view dc) { return fmt::format("{}-wan", dc); }
std::string if_gateway_bridge(std::string_view dc) { return fmt::format("{}-lan", dc); }
std::string if_gateway_port(std::string_view dc, int node) { return fmt::format("{}-{}-p", dc, node); }
std::string if_node(std::string_view dc, int node) { return fmt::format("{}-{}", dc, node); }
std::string if_rail(int rail) { return fmt::format("rail{}", rail); }
std::string if_rail_port(int node, int rail) { return fmt::format("n{}r{}", node, rail); }

}  // namespace wanlab::lab
