// The control channel over beast's in-memory test stream: the far end is either another
// channel or a raw peer that writes bytes and collects the frames it gets back.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <thread>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/fail_count.hpp>
#include <boost/beast/_experimental/test/stream.hpp>

#include "wanlab/common/channel.hpp"

using namespace wanlab::protocol;
using namespace std::chrono_literals;
using nlohmann::json;
namespace net = boost::asio;
using TestStream = boost::beast::test::stream;

namespace {

// The tests provoke many refusals, which the channel logs.
const bool quiet_channel_log = [] {
  auto logger = spdlog::get("channel");
  if (!logger) logger = spdlog::stderr_color_mt("channel");
  logger->set_level(spdlog::level::off);
  return true;
}();

ChannelOptions fast(std::optional<Sender> side = std::nullopt) {
  ChannelOptions o;
  o.idle = 50ms;
  o.read_timeout = 150ms;
  o.side = side;
  return o;
}

template <class Pred>
bool run_until(net::io_context& ioc, Pred pred, std::chrono::milliseconds limit = 1000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ioc.run_one_for(5ms);
  }
  return true;
}

void run_for(net::io_context& ioc, std::chrono::milliseconds d) {
  run_until(
      ioc, [] { return false; }, d);
}

std::string frame_of(std::string_view text) {
  const auto n = static_cast<std::uint32_t>(text.size());
  std::string out = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                     static_cast<char>(n)};
  out += text;
  return out;
}

std::string type_of(const json& m) {
  return m.is_object() ? m.value("type", "") : "";
}

// The far end of a channel, speaking bytes.
struct RawPeer {
  explicit RawPeer(net::io_context& ioc) : stream(ioc) {}
  TestStream stream;
  FrameDecoder decoder;
  std::vector<json> got;     // every message received, pings included
  std::size_t messages = 0;  // ... of them not ping or pong
  bool eof = false;
  std::array<char, 4096> buf{};

  void read() {
    stream.async_read_some(net::buffer(buf), [this](const boost::system::error_code& ec, std::size_t n) {
      if (ec) {
        eof = true;
        return;
      }
      decoder.feed(std::string_view(buf.data(), n));
      while (auto m = decoder.next()) {
        got.push_back(m->ok() ? m->message : json("undecodable"));
        if (type_of(got.back()) != "ping" && type_of(got.back()) != "pong") ++messages;
      }
      read();
    });
  }
  void write(const std::string& bytes) { net::write(stream, net::buffer(bytes)); }
  void send(const json& m) { write(encode(m)); }
  std::vector<json> without_keepalive() const {
    std::vector<json> out;
    for (const auto& m : got)
      if (type_of(m) != "ping" && type_of(m) != "pong") out.push_back(m);
    return out;
  }
  std::size_t count(std::string_view type) const {
    return static_cast<std::size_t>(
        std::count_if(got.begin(), got.end(), [&](const json& m) { return type_of(m) == type; }));
  }
};

// A channel under test and a raw peer on the other end of the stream.
struct Fixture {
  explicit Fixture(ChannelOptions options = fast()) : raw(ioc) {
    TestStream local(ioc);
    local.connect(raw.stream);
    channel = make_channel(std::move(local), options, "test");
    raw.read();
  }
  void start() {
    channel->start([this](const json& m) { received.push_back(m); },
                   [this](const std::string& r) {
                     closed = r;
                     ++close_calls;
                   });
  }

  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work = net::make_work_guard(ioc);
  RawPeer raw;
  std::shared_ptr<Channel> channel;
  std::vector<json> received;
  std::optional<std::string> closed;
  int close_calls = 0;
};

json ready(const std::string& run = "r1") {
  return message("ready", {{"run", run}});
}

}  // namespace

TEST_CASE("channel: messages both ways between two channels, keep-alive hidden", "[unit][protocol][channel]") {
  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  TestStream a(ioc), b(ioc);
  a.connect(b);
  auto agent = make_channel(std::move(a), fast(Sender::agent), "agent");
  auto controller = make_channel(std::move(b), fast(Sender::controller), "controller");
  std::vector<json> at_agent, at_controller;
  std::optional<std::string> agent_closed, controller_closed;
  agent->start([&](const json& m) { at_agent.push_back(m); }, [&](const std::string& r) { agent_closed = r; });
  controller->start(
      [&](const json& m) {
        at_controller.push_back(m);
        if (m["type"] == "hello") controller->send(message("welcome", {{"controller_version", "0.1.0"}}));
      },
      [&](const std::string& r) { controller_closed = r; });

  REQUIRE(agent->send(message("hello", {{"node", "n0"}, {"pid", 1}, {"agent_version", "0.1.0"}, {"gpus", 2}})));
  REQUIRE(run_until(ioc, [&] { return !at_agent.empty(); }));
  CHECK(at_agent.front()["type"] == "welcome");
  REQUIRE(at_controller.size() == 1);
  CHECK(at_controller.front()["node"] == "n0");

  // Quiet for twice the read timeout: pings keep both open, and neither application sees one.
  run_for(ioc, 300ms);
  CHECK(agent->is_open());
  CHECK(controller->is_open());
  CHECK_FALSE(agent_closed);
  CHECK(at_agent.size() == 1);
  CHECK(at_controller.size() == 1);

  agent->close("agent done");
  REQUIRE(run_until(ioc, [&] { return agent_closed && controller_closed; }));
  CHECK(*agent_closed == "agent done");
  CHECK(*controller_closed == "peer closed the connection");
}

TEST_CASE("channel: ping is answered with pong, an idle channel pings, neither is delivered",
          "[unit][protocol][channel]") {
  Fixture f;
  f.start();
  f.raw.send(message("ping"));
  f.raw.send(message("pong"));
  f.raw.send(ready());
  REQUIRE(run_until(f.ioc, [&] { return f.raw.count("pong") == 1; }));
  REQUIRE(run_until(
      f.ioc, [&] { return f.raw.count("ping") >= 1; }, 200ms));  // after idle (50 ms)
  REQUIRE(f.received.size() == 1);
  CHECK(f.received.front() == ready());
  CHECK(f.raw.without_keepalive().empty());
}

TEST_CASE("channel: silence for the read timeout closes", "[unit][protocol][channel]") {
  Fixture f;
  const auto begin = std::chrono::steady_clock::now();
  f.start();
  REQUIRE(run_until(f.ioc, [&] { return f.closed.has_value(); }));
  const auto took = std::chrono::steady_clock::now() - begin;
  CHECK(*f.closed == "no message from peer in 150 ms");
  CHECK(took >= 150ms);
  CHECK(took < 500ms);
  CHECK_FALSE(f.channel->is_open());
  REQUIRE(run_until(f.ioc, [&] { return f.raw.eof; }));
  CHECK(f.raw.count("ping") >= 1);  // it kept pinging meanwhile
}

TEST_CASE("channel: traffic from the peer keeps it open", "[unit][protocol][channel]") {
  Fixture f;
  f.start();
  for (int i = 0; i < 6; ++i) {
    run_for(f.ioc, 50ms);
    f.raw.send(message("ping"));
  }
  CHECK_FALSE(f.closed);
  CHECK(f.channel->is_open());
}

TEST_CASE("channel: invalid JSON is answered, the channel goes on", "[unit][protocol][channel]") {
  Fixture f;
  f.start();
  f.raw.write(frame_of("{\"v\": 1, \"type\": \"ready\", \"run\": "));
  f.raw.send(ready());
  REQUIRE(run_until(f.ioc, [&] { return !f.received.empty() && !f.raw.without_keepalive().empty(); }));
  const auto replies = f.raw.without_keepalive();
  REQUIRE(replies.size() == 1);
  CHECK(replies[0]["type"] == "error");
  CHECK(replies[0]["code"] == "bad_json");
  CHECK_FALSE(replies[0].contains("field"));
  CHECK(f.received == std::vector<json>{ready()});
  CHECK(f.channel->is_open());
}

TEST_CASE("channel: invalid messages are answered naming the field, the channel goes on", "[unit][protocol][channel]") {
  Fixture f(fast(Sender::controller));
  f.start();
  f.raw.send(message("hello", {{"node", "n0"}, {"pid", "1"}, {"agent_version", "0.1"}, {"gpus", 1}}));
  f.raw.send(message("progress", {{"run", "r"}, {"iteration", 1}}));
  f.raw.send(json({{"v", 2}, {"type", "ready"}, {"run", "r"}}));
  f.raw.send(message("assign", {{"run", "r"}, {"assignment", json::object()}}));  // the controller's own type
  f.raw.send(message("whatever"));
  f.raw.send(json::array({1}));
  f.raw.send(ready());
  REQUIRE(run_until(f.ioc, [&] { return !f.received.empty() && f.raw.without_keepalive().size() == 6; }));
  const auto replies = f.raw.without_keepalive();
  const std::vector<std::pair<std::string, std::string>> want = {
      {"wrong_type", "pid"},       {"missing_field", "worker"}, {"unsupported_version", "v"},
      {"wrong_direction", "type"}, {"unknown_type", "type"},    {"not_object", ""}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(replies[i].dump());
    CHECK(replies[i]["type"] == "error");
    CHECK(replies[i]["code"] == want[i].first);
    CHECK(replies[i].value("field", "") == want[i].second);
  }
  CHECK(f.received == std::vector<json>{ready()});
  CHECK(f.channel->is_open());
}

TEST_CASE("channel: an invalid error message is not answered", "[unit][protocol][channel]") {
  Fixture f;
  f.start();
  f.raw.send(message("error", {{"message", "no code"}}));
  f.raw.send(message("error", {{"code", "x"}, {"message", "valid"}}));
  REQUIRE(run_until(f.ioc, [&] { return !f.received.empty(); }));
  run_for(f.ioc, 20ms);
  CHECK(f.raw.without_keepalive().empty());
  REQUIRE(f.received.size() == 1);
  CHECK(f.received[0]["code"] == "x");  // a valid one reaches the application
}

TEST_CASE("channel: an oversized length is answered, then the channel closes", "[unit][protocol][channel]") {
  auto options = fast();
  options.max_message_bytes = 1024;
  Fixture f(options);
  f.start();
  f.raw.send(ready());
  f.raw.write(std::string("\x00\x10\x00\x00", 4));  // 1 MiB announced
  f.raw.send(ready("never"));
  REQUIRE(run_until(f.ioc, [&] { return f.closed && f.raw.eof; }));
  const auto replies = f.raw.without_keepalive();
  REQUIRE(replies.size() == 1);
  CHECK(replies[0]["code"] == "too_large");
  CHECK_THAT(replies[0]["message"].get<std::string>(), Catch::Contains("1048576 bytes"));
  CHECK_THAT(*f.closed, Catch::StartsWith("protocol error: message of 1048576 bytes"));
  CHECK(f.received == std::vector<json>{ready()});
  CHECK(f.close_calls == 1);
}

TEST_CASE("channel: send refuses what the peer would refuse", "[unit][protocol][channel]") {
  auto options = fast(Sender::agent);
  options.max_message_bytes = 1024;
  Fixture f(options);
  f.start();
  CHECK_FALSE(f.channel->send(message("nope")));
  CHECK_FALSE(f.channel->send(message("ready")));                                                        // no run
  CHECK_FALSE(f.channel->send(message("connect", {{"run", "r"}})));                                      // controller's
  CHECK_FALSE(f.channel->send(message("failed", {{"run", "r"}, {"message", std::string(2000, 'x')}})));  // too big
  CHECK(f.channel->send(ready()));
  REQUIRE(run_until(f.ioc, [&] { return !f.raw.without_keepalive().empty(); }));
  CHECK(f.raw.without_keepalive() == std::vector<json>{ready()});
}

TEST_CASE("channel: close sends what is queued, then closes; on_close runs once", "[unit][protocol][channel]") {
  Fixture f;
  f.start();
  for (int i = 0; i < 100; ++i) REQUIRE(f.channel->send(ready("r" + std::to_string(i))));
  f.channel->close("done");
  f.channel->close("again");
  CHECK_FALSE(f.channel->is_open());
  CHECK_FALSE(f.channel->send(ready()));
  REQUIRE(run_until(f.ioc, [&] { return f.closed && f.raw.eof; }));
  run_for(f.ioc, 10ms);
  CHECK(*f.closed == "done");
  CHECK(f.close_calls == 1);
  const auto got = f.raw.without_keepalive();
  REQUIRE(got.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(got[static_cast<std::size_t>(i)]["run"] == "r" + std::to_string(i));
}

TEST_CASE("channel: the peer closing is reported", "[unit][protocol][channel]") {
  Fixture f;
  f.start();
  f.raw.send(ready());
  f.raw.stream.close();
  REQUIRE(run_until(f.ioc, [&] { return f.closed.has_value(); }));
  CHECK(*f.closed == "peer closed the connection");
  CHECK(f.received == std::vector<json>{ready()});
}

TEST_CASE("channel: start inside on_message hands the next message to the new handler", "[unit][protocol][channel]") {
  Fixture f;
  std::vector<json> first, second;
  std::optional<std::string> second_closed;
  f.channel->start(
      [&](const json& m) {
        first.push_back(m);
        f.channel->start([&](const json& n) { second.push_back(n); }, [&](const std::string& r) { second_closed = r; });
      },
      [&](const std::string&) { FAIL("the replaced close handler ran"); });
  // One write: all three arrive in one read and are decoded together.
  f.raw.write(encode(ready("a")) + encode(ready("b")) + encode(ready("c")));
  REQUIRE(run_until(f.ioc, [&] { return second.size() == 2; }));
  CHECK(first == std::vector<json>{ready("a")});
  CHECK(second == std::vector<json>{ready("b"), ready("c")});
  f.channel->close("bye");
  REQUIRE(run_until(f.ioc, [&] { return second_closed.has_value(); }));
}

TEST_CASE("channel: pause holds messages until start, and suspends the read timeout", "[unit][protocol][channel]") {
  Fixture f;
  std::vector<json> got;
  f.channel->start(
      [&](const json& m) {
        got.push_back(m);
        f.channel->pause();
      },
      [&](const std::string& r) { f.closed = r; });
  f.raw.write(encode(ready("a")) + encode(ready("b")));
  f.raw.send(ready("c"));
  run_for(f.ioc, 250ms);  // longer than the read timeout: a paused channel does not time out
  CHECK(got == std::vector<json>{ready("a")});
  CHECK_FALSE(f.closed);
  f.channel->start([&](const json& m) { got.push_back(m); }, [&](const std::string& r) { f.closed = r; });
  REQUIRE(run_until(f.ioc, [&] { return got.size() == 3; }));
  CHECK(got == std::vector<json>{ready("a"), ready("b"), ready("c")});
  CHECK(f.channel->is_open());
}

TEST_CASE("channel: a throwing handler closes the channel, nothing escapes the io_context",
          "[unit][protocol][channel]") {
  Fixture f;
  f.channel->start([](const json&) { throw std::runtime_error("boom"); }, [&](const std::string& r) { f.closed = r; });
  f.raw.send(ready());
  REQUIRE_NOTHROW(run_until(f.ioc, [&] { return f.closed.has_value(); }));
  CHECK(*f.closed == "the \"ready\" handler failed: boom");
}

TEST_CASE("channel: start on a closed channel reports the close", "[unit][protocol][channel]") {
  Fixture f;
  f.channel->close("refused early");
  run_for(f.ioc, 5ms);
  f.start();
  REQUIRE(run_until(f.ioc, [&] { return f.closed.has_value(); }));
  CHECK(*f.closed == "refused early");
  CHECK(f.received.empty());
}

TEST_CASE("channel: send from many threads, each thread's messages in order", "[unit][protocol][channel]") {
  auto options = fast();
  options.read_timeout = 5s;  // the raw peer sends nothing; only the sending is under test
  Fixture f(options);
  f.start();
  constexpr int kThreads = 4, kEach = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        f.channel->send(message("progress", {{"run", "r"}, {"worker", t}, {"iteration", i}}));
    });
  std::thread io([&] { run_until(f.ioc, [&] { return f.raw.messages == kThreads * kEach; }); });
  for (auto& t : threads) t.join();
  io.join();
  const auto got = f.raw.without_keepalive();
  REQUIRE(got.size() == kThreads * kEach);
  std::vector<int> next(kThreads, 0);
  for (const auto& m : got) {
    const int w = m["worker"];
    CHECK(m["iteration"] == next[static_cast<std::size_t>(w)]);
    ++next[static_cast<std::size_t>(w)];
  }
}

TEST_CASE("channel: a stream that fails at step N closes the channel once, with a reason",
          "[unit][protocol][channel]") {
  for (std::size_t n = 1; n <= 12; ++n) {
    INFO("fails at operation " << n);
    net::io_context ioc;
    auto work = net::make_work_guard(ioc);
    boost::beast::test::fail_count fc(n);
    TestStream a(ioc, fc), b(ioc);
    a.connect(b);
    auto options = fast();
    options.idle = 5ms;  // pings bring the failing operation sooner
    auto left = make_channel(std::move(a), options, "left");
    auto right = make_channel(std::move(b), options, "right");
    int left_closes = 0, right_got = 0;
    std::string reason;
    left->start([](const json&) {},
                [&](const std::string& r) {
                  ++left_closes;
                  reason = r;
                });
    right->start(
        [&](const json& m) {
          ++right_got;
          right->send(m);  // echo: left reads too
        },
        [](const std::string&) {});
    for (int i = 0; i < 5; ++i) left->send(ready("r" + std::to_string(i)));
    REQUIRE_NOTHROW(run_until(
        ioc, [&] { return left_closes > 0; }, 400ms));
    run_until(
        ioc, [] { return false; }, 10ms);
    CHECK(left_closes == 1);
    CHECK_THAT(reason, Catch::Contains("unit test failure"));
    CHECK(right_got <= 5);
    right->close();
  }
}
