// The control API: pure handlers against a fake controller, and the Unix-socket
// transport end to end (no privileges needed).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <filesystem>
#include <thread>

#include "wanlab/api/handler.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/io_loop.hpp"

#include <spdlog/spdlog.h>

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
  api::RailsChange rails;
  nlohmann::json set_rails(const std::string& dc, const api::RailsChange& c) override {
    calls.push_back("rails " + dc);
    rails = c;
    return {{"dc", dc}};
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
  SECTION("rails change: the reconfiguration latency, nothing else") {
    auto r = api::handle({"POST", "/v1/rails/dc", R"({"reconfiguration": "25ms"})"}, c);
    CHECK(r.status == 200);
    REQUIRE(c.rails.reconfiguration);
    CHECK(*c.rails.reconfiguration == std::chrono::milliseconds(25));
    CHECK(c.calls.back() == "rails dc");
    r = api::handle({"POST", "/v1/rails/dc", R"({"reconfiguration": "soon"})"}, c);
    CHECK(r.status == 400);
    CHECK(r.body["error"]["field"] == "reconfiguration");
    r = api::handle({"POST", "/v1/rails/dc", R"({"policy": "phase"})"}, c);
    CHECK(r.status == 400);
    CHECK(r.body["error"]["field"] == "policy");
    CHECK(api::handle({"POST", "/v1/rails/dc", "{}"}, c).status == 400);
    CHECK(api::handle({"GET", "/v1/rails/dc", ""}, c).status == 405);
    // A controller without rails says so.
    struct Plain : api::Controller {
      nlohmann::json status() override { return {}; }
      nlohmann::json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
      nlohmann::json shutdown() override { return {}; }
    } plain;
    CHECK(api::handle({"POST", "/v1/rails/dc", R"({"reconfiguration": "1ms"})"}, plain).status == 501);
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

namespace {
// A controller that echoes what it is given, raw, as a careless one would: the handler and
// the server must still answer with valid JSON.
struct EchoController : api::Controller {
  nlohmann::json status() override { return {{"lab", "fake"}}; }
  nlohmann::json set_link(const std::string& src, const std::string& dst, const api::LinkChange&) override {
    if (dst == "raw") throw std::runtime_error("kernel said \xff\xfe");
    if (dst == "rawbody") return {{"src", src}, {"dst", std::string("\xff")}};
    throw api::ApiError(404, "unknown_dc", "no DC named '" + dst + "'", "dst");
  }
  nlohmann::json shutdown() override { return {}; }
};

bool dumps(const nlohmann::json& j) {
  try {
    (void)j.dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}
}  // namespace

TEST_CASE("API: bytes that are not UTF-8 in the path or body get a 4xx naming them, escaped", "[unit][api][security]") {
  EchoController c;
  auto r = api::handle({"POST", "/v1/links/use/\xff", R"({"delay": "1ms"})"}, c);
  CHECK(r.status == 400);
  CHECK(r.body["error"]["field"] == "path");
  CHECK(r.body["error"]["message"] == "path /v1/links/use/\\xff: not valid UTF-8 (no DC or run name has such bytes)");
  CHECK(dumps(r.body));

  r = api::handle({"POST", "/v1/links/use/euw", "{\"delay\": \"\xff\"}"}, c);
  CHECK(r.status == 400);
  CHECK(r.body["error"]["code"] == "bad_json");
  CHECK_THAT(r.body["error"]["message"].get<std::string>(), Catch::Contains("\\xff"));
  CHECK(dumps(r.body));

  r = api::handle({"GET", "/\xc3\x28", ""}, c);  // a broken two-byte sequence
  CHECK(r.status == 400);
  CHECK(dumps(r.body));

  // A controller's message with raw bytes is escaped whole.
  r = api::handle({"POST", "/v1/links/use/raw", R"({"delay": "1ms"})"}, c);
  CHECK(r.status == 500);
  CHECK(r.body["error"]["message"] == "kernel said \\xff\\xfe");
  CHECK(dumps(r.body));

  r = api::handle({"POST", "/v1/replays", R"({"link": "use:euw", "trace": "rel\u0001/x.csv"})"}, c);
  CHECK(r.status == 400);
  CHECK_THAT(r.body["error"]["message"].get<std::string>(), Catch::Contains("'rel\\x01/x.csv'"));
}

TEST_CASE("API over a Unix socket: a request with bytes that are not UTF-8 gets a 4xx and the server goes on",
          "[unit][api][security]") {
  const auto dir = std::filesystem::temp_directory_path() / ("wanlab-api-utf8-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto sock = dir / "c.sock";
  EchoController c;
  boost::asio::io_context ioc;
  api::Server server(ioc, sock, c, 2s);
  // The daemon's loop: an exception escaping a handler would end ioc.run() (and, on this
  // thread, the test).
  std::size_t failures = 0;
  std::thread t([&] { failures = run_surviving(ioc, {}); });
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

  auto r = api::call(sock, "POST", "/v1/links/use/\xff", R"({"delay": "1ms"})");
  CHECK(r.status == 400);
  CHECK_THAT(r.body["error"]["message"].get<std::string>(), Catch::Contains("/v1/links/use/\\xff"));
  r = api::call(sock, "POST", "/v1/links/use/euw", "{\"delay\": \"1ms\xff\"}");
  CHECK(r.status == 400);
  CHECK(r.body["error"]["code"] == "bad_json");
  // A success whose body carries raw bytes (no real controller does): written with U+FFFD.
  r = api::call(sock, "POST", "/v1/links/use/rawbody", R"({"delay": "1ms"})");
  CHECK(r.status == 200);
  CHECK(r.body["dst"] == "\xef\xbf\xbd");
  CHECK(api::call(sock, "GET", "/v1/status").status == 200);
  server.close();
  ioc.stop();
  t.join();
  CHECK(failures == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("run_surviving: a handler that throws is reported and the loop goes on", "[unit][api][security]") {
  boost::asio::io_context ioc;
  std::vector<std::string> errors;
  bool after = false;
  boost::asio::post(ioc, [] { throw std::runtime_error("boom"); });
  boost::asio::post(ioc, [&] { after = true; });
  CHECK(run_surviving(ioc, [&](const std::string& what) { errors.push_back(what); }) == 1);
  CHECK(errors == std::vector<std::string>{"boom"});
  CHECK(after);
}

TEST_CASE("API: out of descriptors, the acceptor waits instead of spinning", "[unit][api][security]") {
  const auto dir = std::filesystem::temp_directory_path() / ("wanlab-api-emfile-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto sock = dir / "c.sock";
  FakeController c;
  boost::asio::io_context ioc;
  api::Server server(ioc, sock, c, 2s);
  // A client waits in the listen backlog; then no descriptor is left for accept().
  boost::asio::io_context cio;
  boost::asio::local::stream_protocol::socket client(cio);
  client.connect(sock.string());
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  int highest = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    highest = std::max(highest, std::stoi(e.path().filename().string()));
  std::vector<int> fillers;
  struct Restore {
    rlimit saved;
    std::vector<int>& fillers;
    ~Restore() {
      for (int fd : fillers) ::close(fd);
      fillers.clear();
      ::setrlimit(RLIMIT_NOFILE, &saved);
    }
  } restore{saved, fillers};
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(highest + 8);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
  REQUIRE(errno == EMFILE);

  spdlog::set_level(spdlog::level::off);  // the acceptor's warnings
  auto cpu = [] {
    rusage u{};
    ::getrusage(RUSAGE_THREAD, &u);
    return std::chrono::microseconds(u.ru_utime.tv_sec * 1'000'000 + u.ru_utime.tv_usec + u.ru_stime.tv_sec * 1'000'000 +
                                     u.ru_stime.tv_usec);
  };
  const auto before = cpu();
  ioc.run_for(600ms);
  const auto used = cpu() - before;
  spdlog::set_level(spdlog::level::info);
  INFO("CPU while out of descriptors: " << used.count() << " us in 600 ms");
  // Retrying at once, it took 165-180 ms of this thread's CPU here (the issue: 1 s per 3 s);
  // waiting 100 ms between tries, a few tries cost well under a millisecond.
  CHECK(used < 50ms);

  // Descriptors back: the waiting client is served.
  for (int fd : fillers) ::close(fd);
  fillers.clear();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  ioc.restart();
  std::thread t([&] { ioc.run_for(1500ms); });
  boost::asio::write(client, boost::asio::buffer(std::string("GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")));
  std::array<char, 512> buf{};
  boost::system::error_code ec;
  const auto n = client.read_some(boost::asio::buffer(buf), ec);
  CHECK(std::string(buf.data(), n).find("200 OK") != std::string::npos);
  server.close();
  t.join();
  std::filesystem::remove_all(dir);
}
