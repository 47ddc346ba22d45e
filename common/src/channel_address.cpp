#include "wanlab/common/channel_address.hpp"

#include <sys/un.h>

#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

namespace wanlab::protocol {

std::string Address::to_string() const {
  if (kind == Kind::unix_socket) return "unix:" + path;
  if (host.find(':') != std::string::npos) return fmt::format("tcp:[{}]:{}", host, port);
  return fmt::format("tcp:{}:{}", host, port);
}

Address parse_address(std::string_view text) {
  auto fail = [&](std::string_view why) {
    return std::invalid_argument(
        fmt::format("address \"{}\": {} (expected unix:/path/to.sock or tcp:HOST:PORT)", text, why));
  };
  Address a;
  if (text.starts_with("unix:")) {
    a.kind = Address::Kind::unix_socket;
    a.path = text.substr(5);
    if (a.path.empty()) throw fail("no socket path after \"unix:\"");
    // sun_path holds the path and its terminating NUL.
    if (a.path.size() >= sizeof(sockaddr_un{}.sun_path))
      throw fail(fmt::format("a socket path is at most {} bytes", sizeof(sockaddr_un{}.sun_path) - 1));
    return a;
  }
  if (!text.starts_with("tcp:")) throw fail("unknown scheme");
  a.kind = Address::Kind::tcp;
  std::string_view rest = text.substr(4);
  std::string_view port;
  if (rest.starts_with("[")) {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) throw fail("no ']' after an IPv6 address");
    a.host = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
    if (!rest.starts_with(":")) throw fail("no \":PORT\" after the host");
    port = rest.substr(1);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) throw fail("no \":PORT\" after the host");
    a.host = rest.substr(0, colon);
    if (a.host.find(':') != std::string::npos) throw fail("an IPv6 address goes in brackets, as tcp:[::1]:PORT");
    port = rest.substr(colon + 1);
  }
  if (a.host.empty()) throw fail("no host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    throw fail(fmt::format("port \"{}\" is not a number from 1 to 65535", port));
  a.port = static_cast<std::uint16_t>(value);
  return a;
}

}  // namespace wanlab::protocol
