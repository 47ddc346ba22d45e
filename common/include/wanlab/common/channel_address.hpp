#pragma once
// Where a control channel connects: "unix:/run/wanlab/agents.sock" (the default for agents
// in the lab's namespaces, which share the host's filesystem) or "tcp:HOST:PORT" (agents
// on other machines or in containers; the hello must then carry the controller's token).
#include <cstdint>
#include <string>
#include <string_view>

namespace wanlab::protocol {

struct Address {
  enum class Kind { unix_socket, tcp };
  Kind kind = Kind::unix_socket;
  std::string path;        // unix_socket
  std::string host;        // tcp: a name or an IP literal (without brackets)
  std::uint16_t port = 0;  // tcp
  /// The text parse_address() reads back.
  std::string to_string() const;
  bool operator==(const Address&) const = default;
};

/// Parses "unix:PATH", "tcp:HOST:PORT" or "tcp:[IPV6]:PORT". Throws std::invalid_argument
/// saying what is wrong and what is expected.
Address parse_address(std::string_view text);

}  // namespace wanlab::protocol
