// The control channel over real sockets: the controller's ChannelServer and the agent's
// ChannelClient over a Unix socket in a temp dir and over TCP on 127.0.0.1 (no privileges).
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "wanlab/common/channel_client.hpp"
#include "wanlab/common/channel_server.hpp"

using namespace wanlab::protocol;
using namespace std::chrono_literals;
using nlohmann::json;
namespace net = boost::asio;
using Local = net::local::stream_protocol;
using Tcp = net::ip::tcp;

namespace {

const bool quiet_channel_log = [] {
  auto logger = spdlog::get("channel");
  if (!logger) logger = spdlog::stderr_color_mt("channel");
  logger->set_level(spdlog::level::off);
  return true;
}();

struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "wanlab-channel-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

ChannelOptions fast() {
  ChannelOptions o;
  o.idle = 50ms;
  o.read_timeout = 200ms;
  return o;
}

template <class Pred>
bool run_until(net::io_context& ioc, Pred pred, std::chrono::milliseconds limit = 1500ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ioc.run_one_for(5ms);
  }
  return true;
}

json hello(const std::string& node = "use-n0") {
  return message("hello", {{"node", node}, {"pid", 4242}, {"agent_version", "0.1.0"}, {"gpus", 8}});
}

json welcome() {
  return message("welcome", {{"controller_version", "0.1.0"}});
}

// The controller side of a test: admits every hello, answers welcome, records messages.
struct Controller {
  std::vector<json> hellos;
  std::vector<json> messages;
  std::vector<std::shared_ptr<Channel>> channels;
  std::vector<std::string> closes;

  ChannelServer::HelloHandler handler() {
    return [this](std::shared_ptr<Channel> channel, const json& h) {
      hellos.push_back(h);
      channels.push_back(channel);
      channel->start([this](const json& m) { messages.push_back(m); },
                     [this](const std::string& reason) { closes.push_back(reason); });
      channel->send(welcome());
    };
  }
};

// The agent side of a test.
struct Agent {
  std::vector<json> messages;
  std::vector<std::string> disconnects;
  int connects = 0;

  ChannelClientHandlers handlers() {
    return {[this](std::shared_ptr<Channel>) { ++connects; }, [this](const json& m) { messages.push_back(m); },
            [this](const std::string& reason) { disconnects.push_back(reason); }, {}};
  }
  bool got(std::string_view type) const {
    return std::any_of(messages.begin(), messages.end(), [&](const json& m) { return m["type"] == type; });
  }
};

ChannelClientOptions client_options(std::string address, std::string token = "") {
  ChannelClientOptions o;
  o.address = std::move(address);
  o.hello = hello();
  o.token = std::move(token);
  o.channel = fast();
  o.initial_backoff = 20ms;
  o.max_backoff = 100ms;
  return o;
}

// A raw connection, for what a well-behaved client would never send.
template <class Socket>
json read_message(Socket& s) {
  std::array<unsigned char, 4> header{};
  net::read(s, net::buffer(header));
  std::string text(
      (std::size_t{header[0]} << 24) | (std::size_t{header[1]} << 16) | (std::size_t{header[2]} << 8) | header[3],
      '\0');
  net::read(s, net::buffer(text));
  return json::parse(text);
}

}  // namespace

TEST_CASE("sockets: an agent and the controller over a Unix socket", "[unit][protocol][sockets]") {
  TempDir dir;
  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  Controller controller;
  ChannelServerOptions so;
  so.unix_path = dir.path / "agents.sock";
  so.channel = fast();
  ChannelServer server(ioc, so, controller.handler());
  CHECK(std::filesystem::is_socket(*so.unix_path));

  Agent agent;
  ChannelClient client(ioc, client_options("unix:" + so.unix_path->string()), agent.handlers());
  REQUIRE(run_until(ioc, [&] { return agent.got("welcome"); }));
  REQUIRE(controller.hellos.size() == 1);
  CHECK(controller.hellos[0] == hello());
  CHECK(agent.connects == 1);
  CHECK_THAT(controller.channels[0]->peer(), Catch::StartsWith("unix:" + so.unix_path->string() + " #"));

  REQUIRE(client.send(message("ready", {{"run", "r1"}})));
  REQUIRE(run_until(ioc, [&] { return !controller.messages.empty(); }));
  CHECK(controller.messages[0] == message("ready", {{"run", "r1"}}));

  // Quiet for longer than the read timeout: the keep-alive holds the connection.
  run_until(
      ioc, [] { return false; }, 400ms);
  CHECK(agent.disconnects.empty());
  CHECK(controller.closes.empty());

  client.stop();
  REQUIRE(run_until(ioc, [&] { return !controller.closes.empty(); }));
  // A reset when the agent closed with a ping from the controller still unread; a broken
  // pipe when the controller was writing a ping as the agent closed.
  CHECK_THAT(controller.closes[0], Catch::Equals("peer closed the connection") ||
                                       Catch::Equals("connection reset by peer") ||
                                       Catch::Equals("write failed: Broken pipe"));
  CHECK(agent.disconnects.empty());  // no callbacks after stop()
  CHECK(client.channel() == nullptr);

  server.close();
  CHECK_FALSE(std::filesystem::exists(*so.unix_path));
}

TEST_CASE("sockets: TCP needs the right token", "[unit][protocol][sockets]") {
  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  Controller controller;
  ChannelServerOptions so;
  so.tcp = Tcp::endpoint(net::ip::make_address("127.0.0.1"), 0);
  so.token = "s3cret";
  so.channel = fast();
  ChannelServer server(ioc, so, controller.handler());
  REQUIRE(server.tcp_endpoint());
  const std::string address = "tcp:127.0.0.1:" + std::to_string(server.tcp_endpoint()->port());
  CHECK(server.tcp_endpoint()->port() != 0);

  SECTION("right token: admitted, and on_hello does not see it") {
    Agent agent;
    ChannelClient client(ioc, client_options(address, "s3cret"), agent.handlers());
    REQUIRE(run_until(ioc, [&] { return agent.got("welcome"); }));
    REQUIRE(controller.hellos.size() == 1);
    CHECK_FALSE(controller.hellos[0].contains("token"));
    CHECK(controller.hellos[0]["node"] == "use-n0");
    CHECK_THAT(controller.channels[0]->peer(), Catch::StartsWith("tcp:127.0.0.1:"));
    REQUIRE(client.send(message("progress", {{"run", "r"}, {"worker", 0}, {"iteration", 1}})));
    REQUIRE(run_until(ioc, [&] { return !controller.messages.empty(); }));
  }
  for (const std::string token : {"wrong!", "s3cre", ""}) {
    DYNAMIC_SECTION("token '" << token << "': unauthorized, then closed") {
      Agent agent;
      ChannelClient client(ioc, client_options(address, token), agent.handlers());
      REQUIRE(run_until(ioc, [&] { return !agent.disconnects.empty(); }));
      REQUIRE(agent.messages.size() == 1);
      CHECK(agent.messages[0]["type"] == "error");
      CHECK(agent.messages[0]["code"] == "unauthorized");
      CHECK(agent.messages[0]["field"] == "token");
      CHECK(agent.disconnects[0] == "peer closed the connection");
      CHECK(controller.hellos.empty());
    }
  }
}

TEST_CASE("sockets: over the Unix socket the token is optional, but a wrong one is refused",
          "[unit][protocol][sockets]") {
  TempDir dir;
  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  Controller controller;
  ChannelServerOptions so;
  so.unix_path = dir.path / "agents.sock";
  so.token = "s3cret";
  so.channel = fast();
  ChannelServer server(ioc, so, controller.handler());
  const std::string address = "unix:" + so.unix_path->string();

  Agent without, wrong;
  ChannelClient a(ioc, client_options(address), without.handlers());
  ChannelClient b(ioc, client_options(address, "guess"), wrong.handlers());
  REQUIRE(run_until(ioc, [&] { return without.got("welcome") && !wrong.disconnects.empty(); }));
  REQUIRE_FALSE(wrong.messages.empty());
  CHECK(wrong.messages[0]["code"] == "unauthorized");
  CHECK(controller.hellos.size() == 1);
}

TEST_CASE("sockets: the first message must be hello, in time", "[unit][protocol][sockets]") {
  TempDir dir;
  net::io_context ioc;
  Controller controller;
  ChannelServerOptions so;
  so.unix_path = dir.path / "agents.sock";
  so.channel = fast();
  ChannelServer server(ioc, so, controller.handler());
  std::thread io([&] { ioc.run_for(1500ms); });

  SECTION("not hello") {
    Local::socket s(ioc);
    s.connect(Local::endpoint(so.unix_path->string()));
    const std::string f = encode(message("ready", {{"run", "r"}}));
    net::write(s, net::buffer(f));
    const json reply = read_message(s);
    CHECK(reply["code"] == "expected_hello");
    CHECK(reply["field"] == "type");
    CHECK_THAT(reply["message"].get<std::string>(), Catch::Contains("not \"ready\""));
    std::array<char, 16> buf{};
    boost::system::error_code ec;
    s.read_some(net::buffer(buf), ec);
    CHECK(ec == net::error::eof);
  }
  SECTION("nothing but pings") {
    Local::socket s(ioc);
    s.connect(Local::endpoint(so.unix_path->string()));
    const auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < 6; ++i) {
      const std::string f = encode(message("ping"));
      boost::system::error_code ec;
      net::write(s, net::buffer(f), ec);
      std::this_thread::sleep_for(50ms);
    }
    json reply;
    do reply = read_message(s);
    while (reply["type"] == "pong" || reply["type"] == "ping");
    CHECK(reply["code"] == "hello_timeout");
    CHECK(reply["message"] == "no \"hello\" within 200 ms");
    CHECK(std::chrono::steady_clock::now() - begin >= 200ms);
  }
  ioc.stop();
  io.join();
  CHECK(controller.hellos.empty());
}

TEST_CASE("sockets: the server's options and socket file", "[unit][protocol][sockets]") {
  TempDir dir;
  net::io_context ioc;
  Controller controller;
  const auto path = dir.path / "agents.sock";

  SECTION("nothing to listen on, or TCP without a token") {
    CHECK_THROWS_AS(ChannelServer(ioc, {}, controller.handler()), std::invalid_argument);
    ChannelServerOptions so;
    so.tcp = Tcp::endpoint(net::ip::make_address("127.0.0.1"), 0);
    CHECK_THROWS_WITH(ChannelServer(ioc, so, controller.handler()), Catch::Contains("needs a token"));
  }
  SECTION("a stale socket file is replaced") {
    { Local::acceptor stale(ioc, Local::endpoint(path.string())); }  // closed without removing its file
    REQUIRE(std::filesystem::is_socket(path));
    ChannelServerOptions so;
    so.unix_path = path;
    CHECK_NOTHROW(ChannelServer(ioc, so, controller.handler()));
  }
  SECTION("a live server's socket is not taken over") {
    ChannelServerOptions so;
    so.unix_path = path;
    ChannelServer first(ioc, so, controller.handler());
    CHECK_THROWS_WITH(ChannelServer(ioc, so, controller.handler()), Catch::Contains("another server is listening"));
    CHECK(std::filesystem::is_socket(path));
  }
  SECTION("a file that is not a socket is left alone") {
    std::ofstream(path) << "precious";
    ChannelServerOptions so;
    so.unix_path = path;
    CHECK_THROWS_WITH(ChannelServer(ioc, so, controller.handler()), Catch::Contains("is not a socket"));
    CHECK(std::filesystem::is_regular_file(path));
  }
  SECTION("an old server does not remove a newer server's socket") {
    ChannelServerOptions so;
    so.unix_path = path;
    auto old = std::make_unique<ChannelServer>(ioc, so, controller.handler());
    std::filesystem::remove(path);  // as if replaced while it was hung
    ChannelServer newer(ioc, so, controller.handler());
    old.reset();
    CHECK(std::filesystem::is_socket(path));
  }
}

TEST_CASE("sockets: the client reconnects with backoff until a server is back", "[unit][protocol][sockets]") {
  TempDir dir;
  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  const auto path = dir.path / "agents.sock";
  ChannelServerOptions so;
  so.unix_path = path;
  so.channel = fast();

  Agent agent;
  auto options = client_options("unix:" + path.string());
  ChannelClient client(ioc, options, agent.handlers());

  // No server yet: attempts fail, spaced by a growing backoff (20, 40, 80, 100 ms).
  REQUIRE(run_until(ioc, [&] { return agent.disconnects.size() >= 3; }));
  CHECK_THAT(agent.disconnects[0], Catch::Contains("connect to unix:" + path.string()));
  CHECK(agent.connects == 0);

  Controller first;
  auto server = std::make_unique<ChannelServer>(ioc, so, first.handler());
  REQUIRE(run_until(ioc, [&] { return agent.got("welcome"); }));
  CHECK(agent.connects == 1);

  // The controller restarts: the connection drops, and the agent comes back to the new one
  // with the hello it was given since.
  client.set_hello(
      message("hello", {{"node", "use-n0"}, {"pid", 4242}, {"agent_version", "0.1.0"}, {"gpus", 8}, {"run", "r7"}}));
  const auto drops = agent.disconnects.size();
  server.reset();
  REQUIRE(run_until(ioc, [&] { return agent.disconnects.size() > drops; }));
  CHECK(agent.disconnects[drops] == "peer closed the connection");
  CHECK(first.closes.size() == 1);
  CHECK(first.closes[0] == "server closed");

  Controller second;
  agent.messages.clear();
  server = std::make_unique<ChannelServer>(ioc, so, second.handler());
  const auto begin = std::chrono::steady_clock::now();
  REQUIRE(run_until(ioc, [&] { return agent.got("welcome"); }));
  CHECK(std::chrono::steady_clock::now() - begin < 500ms);
  CHECK(agent.connects == 2);
  REQUIRE(second.hellos.size() == 1);
  CHECK(second.hellos[0]["run"] == "r7");
}

TEST_CASE("sockets: with give_up_after the client stops once the server has been gone that long",
          "[unit][protocol][sockets]") {
  TempDir dir;
  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  const auto path = dir.path / "agents.sock";
  ChannelServerOptions so;
  so.unix_path = path;
  so.channel = fast();
  Controller controller;
  auto server = std::make_unique<ChannelServer>(ioc, so, controller.handler());

  Agent agent;
  std::vector<std::string> gave_up;
  auto handlers = agent.handlers();
  handlers.on_gave_up = [&](const std::string& reason) { gave_up.push_back(reason); };
  auto options = client_options("unix:" + path.string());
  options.give_up_after = 300ms;
  ChannelClient client(ioc, options, handlers);
  REQUIRE(run_until(ioc, [&] { return agent.got("welcome"); }));
  // A connection that lasts longer than the bound is no reason to give up.
  run_until(ioc, [] { return false; }, 400ms);
  CHECK(gave_up.empty());

  server.reset();  // the controller dies
  const auto lost = std::chrono::steady_clock::now();
  REQUIRE(run_until(ioc, [&] { return !gave_up.empty(); }, 3000ms));
  const auto took = std::chrono::steady_clock::now() - lost;
  CHECK(took >= 300ms);
  CHECK(took < 1500ms);
  CHECK_THAT(gave_up[0], Catch::Contains("no connection to unix:" + path.string()) && Catch::Contains("giving up"));
  // Stopped: no attempt after that, even with a server back.
  Controller second;
  server = std::make_unique<ChannelServer>(ioc, so, second.handler());
  const auto attempts = agent.disconnects.size();
  run_until(ioc, [] { return false; }, 300ms);
  CHECK(agent.disconnects.size() == attempts);
  CHECK(second.hellos.empty());
  CHECK(gave_up.size() == 1);
}

TEST_CASE("sockets: the client refuses a bad address or hello at once", "[unit][protocol][sockets]") {
  net::io_context ioc;
  Agent agent;
  CHECK_THROWS_WITH(ChannelClient(ioc, client_options("http://controller"), agent.handlers()),
                    Catch::Contains("expected unix:/path/to.sock or tcp:HOST:PORT"));
  auto o = client_options("unix:/tmp/x.sock");
  o.hello.erase("gpus");
  CHECK_THROWS_WITH(ChannelClient(ioc, o, agent.handlers()), Catch::Contains("\"gpus\""));
  o = client_options("unix:/tmp/x.sock");
  o.hello = message("ready", {{"run", "r"}});
  CHECK_THROWS_WITH(ChannelClient(ioc, o, agent.handlers()), Catch::Contains("not a hello"));
}

TEST_CASE("sockets: before hello, a connection's memory is bounded and waiting connections are capped",
          "[unit][protocol][sockets][security]") {
  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  Controller controller;
  ChannelServerOptions so;
  so.tcp = Tcp::endpoint(net::ip::make_address("127.0.0.1"), 0);
  so.token = "s3cret";
  so.channel = fast();
  so.channel.read_timeout = 5s;  // no connection times out during the test
  so.max_pending = 4;
  ChannelServer server(ioc, so, controller.handler());
  REQUIRE(server.tcp_endpoint());
  std::thread io([&] { ioc.run_for(4s); });
  struct Stop {
    net::io_context& ioc;
    std::thread& io;
    ~Stop() {
      ioc.stop();
      if (io.joinable()) io.join();
    }
  } stop{ioc, io};

  net::io_context cio;
  auto connect = [&] {
    Tcp::socket s(cio);
    s.connect(*server.tcp_endpoint());
    return s;
  };
  // Closed by the server: readable, and at its end.
  auto closed = [](Tcp::socket& s) {
    pollfd p{s.native_handle(), POLLIN, 0};
    char c = 0;
    return ::poll(&p, 1, 0) == 1 && ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  };
  auto count_closed = [&](std::vector<Tcp::socket>& socks, std::size_t want) {
    std::size_t n = 0;
    for (int i = 0; i < 200; ++i) {
      n = static_cast<std::size_t>(std::count_if(socks.begin(), socks.end(), closed));
      if (n >= want) break;
      std::this_thread::sleep_for(10ms);
    }
    std::this_thread::sleep_for(100ms);  // and no more than that
    return static_cast<std::size_t>(std::count_if(socks.begin(), socks.end(), closed));
  };

  SECTION("a first frame over max_hello_bytes: refused from its length, not buffered") {
    auto s = connect();
    const std::uint32_t length = 1 << 20;  // 1 MiB: under kMaxMessageBytes, over a hello's 64 KiB
    const std::array<unsigned char, 4> header{static_cast<unsigned char>(length >> 24),
                                              static_cast<unsigned char>(length >> 16),
                                              static_cast<unsigned char>(length >> 8),
                                              static_cast<unsigned char>(length)};
    net::write(s, net::buffer(header));
    net::write(s, net::buffer(std::string(1000, '{')));
    const json reply = read_message(s);
    CHECK(reply["code"] == "too_large");
    CHECK_THAT(reply["message"].get<std::string>(), Catch::Contains("over the limit of 65536 bytes"));
    std::vector<Tcp::socket> one;
    one.push_back(std::move(s));
    CHECK(count_closed(one, 1) == 1);
  }
  SECTION("connections beyond max_pending are closed at once; a hello frees a place") {
    std::vector<Tcp::socket> socks;
    for (int i = 0; i < 10; ++i) socks.push_back(connect());
    CHECK(count_closed(socks, 6) == 6);
    auto open = std::find_if(socks.begin(), socks.end(), [&](Tcp::socket& s) { return !closed(s); });
    REQUIRE(open != socks.end());
    // An admitted agent: the full message size again (100 KiB here).
    json h = hello();
    h["token"] = "s3cret";
    net::write(*open, net::buffer(encode(h)));
    json reply;
    do reply = read_message(*open);
    while (reply["type"] == "ping");
    CHECK(reply["type"] == "welcome");
    net::write(*open,
               net::buffer(encode(message("failed", {{"run", "r"}, {"message", std::string(100 * 1024, 'x')}}))));
    std::vector<Tcp::socket> more;
    more.push_back(connect());  // takes the place the hello freed
    more.push_back(connect());  // over the cap again
    CHECK(count_closed(more, 1) == 1);
    CHECK_FALSE(closed(more[0]));
    ioc.stop();
    io.join();
    REQUIRE(controller.hellos.size() == 1);
    REQUIRE(controller.messages.size() == 1);
    CHECK(controller.messages[0]["message"].get<std::string>().size() == 100 * 1024);
  }
}
