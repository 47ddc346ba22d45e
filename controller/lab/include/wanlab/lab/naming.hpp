#pragma once
// Names of the kernel objects of a lab. Namespaces carry the lab name as prefix,
// "<lab>.": lab names cannot contain '.', so the prefix never matches another lab's.
// Every interface, bridge, qdisc and route lives inside those namespaces; deleting them
// deletes everything, and nothing of a lab ever exists in the host's namespace.
#include <string>
#include <string_view>

namespace wanlab::lab {

std::string ns_prefix(std::string_view lab);                          // "demo."
std::string ns_router(std::string_view lab);                          // "demo.router"
std::string ns_gateway(std::string_view lab, std::string_view dc);    // "demo.gw-use"
std::string ns_node(std::string_view lab, std::string_view node);     // "demo.use-0"
std::string ns_rails(std::string_view lab, std::string_view dc);      // a DC's rail switch: "demo.rails-dc"

std::string if_router_to(std::string_view dc);                   // router side: "to-use"
std::string if_gateway_wan(std::string_view dc);                 // gateway side: "use-wan"
std::string if_gateway_bridge(std::string_view dc);              // LAN bridge: "use-lan"
std::string if_gateway_port(std::string_view dc, int node);      // bridge port: "use-0-p"
std::string if_node(std::string_view dc, int node);              // in the node: "use-0"
std::string if_rail(int rail);                                   // in the node, its port on rail r: "rail3"
std::string if_rail_port(int node, int rail);                    // the rail switch's side: "n12r3"

}  // namespace wanlab::lab
