// The control API: pure handlers against a fake controller, and the Unix-socket
// transport end to end (no privileges needed).
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <filesystem>
#include <thread>

#include "wanlab/api/handler.hpp"
#include "wanlab/api/server.hpp"

using namespace wanlab;
using namespace std::chrono_literals;

namespace {
struct FakeController : api::Controller {
  std::vector<std::string> calls;
  api::LinkChange last;
  nlohmann::json status() override {
    calls.push_back("status");
    return {{"lab", "fake"}};
  }
  nlohmann::json set_link(const std::string& src, const std::string& dst, const api::LinkChange& c) override {
    calls.push_back("set " + src + "->" + dst);
    if (src == "nope") throw api::ApiError(404, "unknown_dc", "no DC named 'nope'", "src");
    last = c;
    return {{"src", src}, {"dst", dst}};
  }
  nlohmann::json shutdown() override {
    calls.push_back("shutdown");
    return {{"removed_namespaces", 3}};
  }
};
}  // namespace

TEST_CASE("API handlers", "[unit][api]") {
  FakeController c;
  SECTION("status") {
    auto r = api::handle({"GET", "/v1/status", ""}, c);
    CHECK(r.status == 200);
    CHECK(r.body["lab"] == "fake");
  }
  SECTION("link change parses units and passes only what was given") {
    auto r = api::handle({"POST", "/v1/links/use/euw", R"({"rate": "50Mbit", "delay": "30ms"})"}, c);
    CHECK(r.status == 200);
    REQUIRE(c.last.rate);
    CHECK(c.last.rate->bps == 50'000'000);
    CHECK(c.last.delay == std::chrono::milliseconds(30));
    CHECK_FALSE(c.last.loss);
    CHECK_FALSE(c.last.loss_burst);
    CHECK(c.calls.back() == "set use->euw");
  }
  SECTION("bursty loss: set, or turned off") {
    CHECK(api::handle({"POST", "/v1/links/use/euw", R"({"loss_burst": "1% 30% 50%"})"}, c).status == 200);
    REQUIRE(c.last.loss_burst);
    REQUIRE(*c.last.loss_burst);
    CHECK((*c.last.loss_burst)->r == Probability{300'000'000});
    CHECK(api::handle({"POST", "/v1/links/use/euw", R"({"loss_burst": "off"})"}, c).status == 200);
    REQUIRE(c.last.loss_burst);
    CHECK_FALSE(*c.last.loss_burst);
    auto r = api::handle({"POST", "/v1/links/use/euw", R"({"loss_burst": "1% 0%"})"}, c);
    CHECK(r.status == 400);
    CHECK(r.body["error"]["field"] == "loss_burst");
  }
  SECTION("bad field names the field") {
    auto r = api::handle({"POST", "/v1/links/use/euw", R"({"rate": "50Gbps"})"}, c);
    CHECK(r.status == 400);
    CHECK(r.body["error"]["field"] == "rate");
    CHECK_THAT(r.body["error"]["message"].get<std::string>(), Catch::Contains("ambiguous"));
    r = api::handle({"POST", "/v1/links/use/euw", R"({"rate": 50})"}, c);
    CHECK(r.status == 400);
    CHECK(r.body["error"]["field"] == "rate");
    r = api::handle({"POST", "/v1/links/use/euw", R"({"rtt": "5ms"})"}, c);
    CHECK(r.status == 400);
    CHECK(r.body["error"]["field"] == "rtt");
    r = api::handle({"POST", "/v1/links/use/euw", R"({"rate": "0bit"})"}, c);
    CHECK(r.status == 400);
    r = api::handle({"POST", "/v1/links/use/euw", R"({})"}, c);
    CHECK(r.status == 400);
  }
  SECTION("malformed JSON, wrong methods, unknown paths, controller errors") {
    CHECK(api::handle({"POST", "/v1/links/use/euw", "{rate"}, c).body["error"]["code"] == "bad_json");
    // A number no double holds is the client's error too (was 500 "internal").
    auto overflow = api::handle({"POST", "/v1/links/use/euw", R"({"loss": 1e999})"}, c);
    CHECK(overflow.status == 400);
    CHECK(overflow.body["error"]["code"] == "bad_json");
    CHECK(api::handle({"POST", "/v1/status", ""}, c).status == 405);
    CHECK(api::handle({"GET", "/v1/links/use/euw", ""}, c).status == 405);
    CHECK(api::handle({"GET", "/v2/status", ""}, c).status == 404);
    CHECK(api::handle({"GET", "/", ""}, c).status == 404);
    auto r = api::handle({"POST", "/v1/links/nope/euw", R"({"rate": "1Mbit"})"}, c);
    CHECK(r.status == 404);
    CHECK(r.body["error"]["field"] == "src");
  }
  SECTION("shutdown answers what was removed") {
    auto r = api::handle({"POST", "/v1/shutdown", "{}"}, c);
    CHECK(r.status == 200);
    CHECK(r.body["removed_namespaces"] == 3);
  }
}

TEST_CASE("API over a Unix socket: requests, oversized and malformed input, timeouts", "[unit][api]") {
  const auto dir = std::filesystem::temp_directory_path() / ("wanlab-api-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto sock = dir / "c.sock";
  FakeController c;
  boost::asio::io_context ioc;
  api::Server server(ioc, sock, c, 300ms);
  std::thread t([&] { ioc.run(); });
  // However the test ends (an exception from a call included), the server's thread is
  // joined, so Catch reports the failure instead of the process aborting.
  struct Join {
    api::Server& server;
    boost::asio::io_context& ioc;
    std::thread& t;
    ~Join() {
      server.close();
      ioc.stop();
      if (t.joinable()) t.join();
    }
  } join{server, ioc, t};

  auto r = api::call(sock, "GET", "/v1/status");
  CHECK(r.status == 200);
  CHECK(r.body["lab"] == "fake");

  r = api::call(sock, "POST", "/v1/links/use/euw", std::string(api::kMaxBodyBytes + 10, 'x'));
  CHECK(r.status == 413);
  // Far over the limit: the server answers and closes while the client is still writing;
  // the client still reads the answer (a CI run aborted here once, on the write's error).
  r = api::call(sock, "POST", "/v1/links/use/euw", std::string(8 * api::kMaxBodyBytes, 'x'));
  CHECK(r.status == 413);

  {
    // Garbage instead of HTTP: an error reply, and the server keeps serving.
    boost::asio::io_context cio;
    boost::asio::local::stream_protocol::socket s(cio);
    s.connect(sock.string());
    boost::asio::write(s, boost::asio::buffer(std::string("NOT HTTP AT ALL\r\n\r\n")));
    std::array<char, 512> buf{};
    boost::system::error_code ec;
    auto n = s.read_some(boost::asio::buffer(buf), ec);
    CHECK(std::string(buf.data(), n).find("400") != std::string::npos);
  }
  {
    // A client that connects and says nothing is dropped after the read timeout.
    boost::asio::io_context cio;
    boost::asio::local::stream_protocol::socket s(cio);
    s.connect(sock.string());
    std::array<char, 16> buf{};
    boost::system::error_code ec;
    const auto t0 = std::chrono::steady_clock::now();
    s.read_some(boost::asio::buffer(buf), ec);
    CHECK(ec);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  CHECK(api::call(sock, "GET", "/v1/status").status == 200);

  server.close();
  ioc.stop();
  t.join();
  CHECK_THROWS_WITH(api::call(sock, "GET", "/v1/status", {}, 1s), Catch::Contains("cannot connect"));
  std::filesystem::remove_all(dir);
}
