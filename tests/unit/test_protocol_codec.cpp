// The control protocol as pure code: framing, incremental decoding, the message table,
// tokens and addresses. No sockets.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "wanlab/common/channel_address.hpp"
#include "wanlab/common/protocol.hpp"

using namespace wanlab::protocol;
using nlohmann::json;

namespace {

std::string frame_of(std::string_view text) {
  const auto n = static_cast<std::uint32_t>(text.size());
  std::string out = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                     static_cast<char>(n)};
  out += text;
  return out;
}

json hello() {
  return message("hello", {{"node", "use-n0"}, {"pid", 4242}, {"agent_version", "0.1.0"}, {"gpus", 8}});
}

}  // namespace

TEST_CASE("encode frames a message: 4-byte big-endian length, then the JSON text", "[unit][protocol]") {
  const json m = message("ping");
  const std::string f = encode(m);
  const std::string text = m.dump();
  REQUIRE(f.size() == 4 + text.size());
  CHECK(f.substr(0, 4) == std::string({0, 0, 0, static_cast<char>(text.size())}));
  CHECK(f.substr(4) == text);
  CHECK(json::parse(f.substr(4)) == json({{"v", 1}, {"type", "ping"}}));

  // A payload over 255 bytes uses the higher length bytes.
  const std::string big = encode(message("failed", {{"run", "r"}, {"message", std::string(70000, 'x')}}));
  const std::size_t n = big.size() - 4;
  CHECK(static_cast<unsigned char>(big[1]) == ((n >> 16) & 0xff));
  CHECK(static_cast<unsigned char>(big[2]) == ((n >> 8) & 0xff));
  CHECK(static_cast<unsigned char>(big[3]) == (n & 0xff));
}

TEST_CASE("encode does not throw on strings that are not UTF-8", "[unit][protocol]") {
  const json m = message("failed", {{"run", "r"}, {"message", std::string("bad \xff byte")}});
  std::string f;
  REQUIRE_NOTHROW(f = encode(m));
  FrameDecoder d;
  d.feed(f);
  auto got = d.next();
  REQUIRE(got);
  REQUIRE(got->ok());
  CHECK(got->message["message"] == "bad \xEF\xBF\xBD byte");
}

TEST_CASE("message and error_message build v and type", "[unit][protocol]") {
  CHECK(message("bye") == json({{"v", 1}, {"type", "bye"}}));
  CHECK(message("connect", {{"run", "r1"}}) == json({{"v", 1}, {"type", "connect"}, {"run", "r1"}}));
  CHECK_THROWS_AS(message("bye", json::array()), std::invalid_argument);
  const Error e{"wrong_type", "\"pid\" must be an integer", "pid"};
  const json m = error_message(e);
  CHECK(m == json({{"v", 1}, {"type", "error"}, {"code", "wrong_type"}, {"message", e.message}, {"field", "pid"}}));
  CHECK_FALSE(error_message({"bad_json", "x", ""}).contains("field"));
  CHECK(error_from_message(m) == e);
  CHECK_FALSE(validate(m));
}

TEST_CASE("FrameDecoder round trip, whatever the read boundaries", "[unit][protocol]") {
  const std::vector<json> sent = {hello(), message("ready", {{"run", "r1"}}),
                                  message("report", {{"run", "r1"}, {"report", {{"iteration_ms", {1.5, 2.5}}}}}),
                                  message("failed", {{"run", "r1"}, {"message", "ünïcødé ✓"}})};
  std::string stream;
  for (const auto& m : sent) stream += encode(m);

  SECTION("all at once") {
    FrameDecoder d;
    d.feed(stream);
    for (const auto& m : sent) {
      auto got = d.next();
      REQUIRE(got);
      REQUIRE(got->ok());
      CHECK(got->message == m);
    }
    CHECK_FALSE(d.next());
    CHECK(d.buffered() == 0);
  }
  SECTION("one byte at a time") {
    FrameDecoder d;
    std::vector<json> got;
    for (const char c : stream) {
      d.feed(std::string_view(&c, 1));
      while (auto m = d.next()) {
        REQUIRE(m->ok());
        got.push_back(m->message);
      }
    }
    CHECK(got == sent);
  }
  SECTION("split inside the header and inside the payload") {
    for (std::size_t cut : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{5}, stream.size() - 1}) {
      FrameDecoder d;
      d.feed(stream.substr(0, cut));
      std::vector<json> got;
      while (auto m = d.next()) got.push_back(m->message);
      d.feed(stream.substr(cut));
      while (auto m = d.next()) got.push_back(m->message);
      CHECK(got == sent);
    }
  }
}

TEST_CASE("FrameDecoder: an oversized length is fatal", "[unit][protocol]") {
  FrameDecoder d(1024);
  d.feed(encode(message("ping")));
  d.feed(std::string("\x00\x00\x04\x01", 4));  // 1025 bytes announced
  d.feed(encode(message("pong")));             // unreachable: the stream has lost its framing
  auto first = d.next();
  REQUIRE(first);
  CHECK(first->ok());
  auto bad = d.next();
  REQUIRE(bad);
  REQUIRE(bad->error);
  CHECK(bad->error->code == "too_large");
  CHECK_THAT(bad->error->message, Catch::Contains("1025 bytes") && Catch::Contains("1024"));
  CHECK(d.broken());
  CHECK_FALSE(d.next());
  d.feed(encode(message("ping")));
  CHECK_FALSE(d.next());
  CHECK(d.buffered() == 0);

  SECTION("the default limit is 16 MiB; a message of exactly the limit is fine") {
    FrameDecoder big;
    CHECK(big.max_message_bytes() == kMaxMessageBytes);
    FrameDecoder exact(10);
    exact.feed(frame_of(R"({"a":"12"})"));  // 10 bytes
    auto m = exact.next();
    REQUIRE(m);
    CHECK(m->ok());
    big.feed(std::string("\xff\xff\xff\xff", 4));
    auto e = big.next();
    REQUIRE(e);
    REQUIRE(e->error);
    CHECK(e->error->code == "too_large");
  }
}

TEST_CASE("FrameDecoder: invalid JSON in a good frame is reported and skipped", "[unit][protocol]") {
  FrameDecoder d;
  d.feed(frame_of("{\"v\": 1, \"type\": nope}"));
  d.feed(frame_of(""));
  d.feed(frame_of("{\"s\": \"\xff\"}"));  // not UTF-8
  d.feed(encode(message("ping")));
  for (int i = 0; i < 3; ++i) {
    auto bad = d.next();
    REQUIRE(bad);
    REQUIRE(bad->error);
    CHECK(bad->error->code == "bad_json");
    CHECK_THAT(bad->error->message, Catch::StartsWith("message is not valid JSON: "));
    CHECK_THAT(bad->error->message, !Catch::Contains("[json.exception"));
  }
  CHECK_FALSE(d.broken());
  auto good = d.next();
  REQUIRE(good);
  CHECK(good->ok());
  CHECK(good->message["type"] == "ping");
}

TEST_CASE("FrameDecoder: deep nesting is refused before it is parsed", "[unit][protocol]") {
  FrameDecoder d;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  d.feed(frame_of(deep));
  const std::string ok = std::string(kMaxNesting, '[') + std::string(kMaxNesting, ']');
  d.feed(frame_of(ok));
  // Brackets inside strings do not count.
  d.feed(frame_of("{\"s\": \"" + std::string(1000, '[') + "\\\"\"}"));
  auto bad = d.next();
  REQUIRE(bad);
  REQUIRE(bad->error);
  CHECK(bad->error->code == "too_deep");
  auto fine = d.next();
  REQUIRE(fine);
  CHECK(fine->ok());
  auto str = d.next();
  REQUIRE(str);
  CHECK(str->ok());
}

TEST_CASE("validate: the table's types are accepted", "[unit][protocol]") {
  const std::vector<json> good = {
      hello(),
      message("hello", {{"node", "n"}, {"pid", 1}, {"agent_version", "v"}, {"gpus", 0}, {"token", "t"}, {"run", "r"}}),
      message("ready", {{"run", "r"}}),
      message("connected", {{"run", "r"}}),
      message("progress", {{"run", "r"}, {"worker", 3}, {"iteration", 7}}),
      message("report", {{"run", "r"}, {"report", json::object()}}),
      message("failed", {{"run", "r"}, {"message", "cuda error"}}),
      message("want", {{"run", "r"}, {"worker", 0}, {"peer", 4}, {"iteration", 1}, {"tag", 2}, {"bytes", 4096}}),
      message("delivered", {{"run", "r"}, {"src", 0}, {"dst", 4}, {"iteration", 1}, {"tag", 2}, {"bytes", 4096}}),
      message("grant", {{"run", "r"}, {"worker", 0}, {"peer", 4}, {"iteration", 1}, {"tag", 2}}),
      message("prefill_request", {{"run", "r"}, {"id", 0}, {"at_ns", 12345}, {"tokens", 2048}}),
      message("prefill_done", {{"run", "r"}, {"id", 0}, {"complete", true}, {"started_ns", 1}, {"finished_ns", 2},
                               {"preemptions", 0}}),
      message("kv_received", {{"run", "r"}, {"id", 0}, {"at_unix_ns", 1}}),
      message("prefill", {{"run", "r"}, {"id", 0}, {"slot", 3}, {"start_ns", 5}, {"tokens", 2048}, {"layers", 32},
                          {"flops_per_layer", 8.98e11}, {"layer_shape", json::object()}, {"kv_bytes", 1024},
                          {"decode", {{"address", "198.18.0.2"}, {"port", 7301}}}}),
      message("prompt", {{"run", "r"}, {"id", 0}, {"address", "198.18.0.3"}, {"port", 7301}, {"bytes", 8192}}),
      message("welcome", {{"controller_version", "0.1.0"}}),
      message("assign", {{"run", "r"}, {"assignment", {{"workers", json::array()}}}}),
      message("connect", {{"run", "r"}}),
      message("start", {{"run", "r"}, {"delay_ms", 250}}),
      message("abort", {{"run", "r"}, {"reason", "operator"}}),
      message("bye"),
      message("error", {{"code", "c"}, {"message", "m"}}),
      message("ping"),
      message("pong"),
  };
  for (const auto& m : good) {
    INFO(m.dump());
    CHECK_FALSE(validate(m));
  }
  std::set<std::string> covered;
  for (const auto& m : good) covered.insert(m["type"].get<std::string>());
  CHECK(covered.size() == message_specs().size());
  // Fields the table does not list are allowed (newer peers may add some).
  auto extra = hello();
  extra["cuda"] = "13.0";
  CHECK_FALSE(validate(extra));
}

TEST_CASE("validate: each problem names its field", "[unit][protocol]") {
  auto check = [](const json& m, std::string_view code, std::string_view field, std::string_view says = "") {
    INFO(m.dump());
    auto e = validate(m);
    REQUIRE(e);
    CHECK(e->code == code);
    CHECK(e->field == field);
    if (!says.empty()) CHECK_THAT(e->message, Catch::Contains(std::string(says)));
  };
  check(json::array({1, 2}), "not_object", "", "not array");
  check(json("text"), "not_object", "");
  check(json({{"type", "ping"}}), "missing_field", "v");
  check(json({{"v", "1"}, {"type", "ping"}}), "wrong_type", "v", "not string");
  check(json({{"v", 2}, {"type", "ping"}}), "unsupported_version", "v", "version 2");
  check(json({{"v", 1}}), "missing_field", "type");
  check(json({{"v", 1}, {"type", 5}}), "wrong_type", "type");
  check(message("hola"), "unknown_type", "type", "\"hola\"");
  for (const char* field : {"node", "pid", "agent_version", "gpus"}) {
    auto m = hello();
    m.erase(field);
    check(m, "missing_field", field, fmt::format("\"hello\" needs \"{}\"", field));
  }
  auto m = hello();
  m["pid"] = "4242";
  check(m, "wrong_type", "pid", "must be an integer, not string");
  m = hello();
  m["gpus"] = 1.5;
  check(m, "wrong_type", "gpus", "not number 1.5");
  m = hello();
  m["token"] = 7;
  check(m, "wrong_type", "token", "\"token\" of \"hello\" must be a string");
  check(message("report", {{"run", "r"}, {"report", json::array()}}), "wrong_type", "report", "an object");
  check(message("start", {{"run", "r"}}), "missing_field", "delay_ms");
  check(message("error", {{"message", "m"}}), "missing_field", "code");
}

TEST_CASE("validate: with a sender, the direction is checked", "[unit][protocol]") {
  CHECK_FALSE(validate(hello(), Sender::agent));
  auto e = validate(hello(), Sender::controller);
  REQUIRE(e);
  CHECK(e->code == "wrong_direction");
  CHECK(e->field == "type");
  CHECK(e->message == "\"hello\" is sent by the agent, not by the controller");
  CHECK(validate(message("assign", {{"run", "r"}, {"assignment", json::object()}}), Sender::agent));
  CHECK_FALSE(validate(message("ping"), Sender::agent));
  CHECK_FALSE(validate(message("ping"), Sender::controller));
}

TEST_CASE("the message table: one entry per type, all documented", "[unit][protocol]") {
  std::set<std::string_view> types;
  for (const auto& spec : message_specs()) {
    CHECK(types.insert(spec.type).second);
    CHECK(find_spec(spec.type) == &spec);
  }
  CHECK(find_spec("nope") == nullptr);

  std::ifstream in(std::string(WANLAB_SOURCE_DIR) + "/docs/protocol.md");
  REQUIRE(in);
  std::stringstream doc;
  doc << in.rdbuf();
  for (const auto& spec : message_specs()) {
    INFO("docs/protocol.md does not describe " << spec.type);
    CHECK_THAT(doc.str(), Catch::Contains("| `" + std::string(spec.type) + "` |"));
  }
}

TEST_CASE("tokens_equal", "[unit][protocol]") {
  CHECK(tokens_equal("s3cret", "s3cret"));
  CHECK_FALSE(tokens_equal("s3creT", "s3cret"));
  CHECK_FALSE(tokens_equal("s3cre", "s3cret"));
  CHECK_FALSE(tokens_equal("s3crets", "s3cret"));
  CHECK_FALSE(tokens_equal("", "s3cret"));
  CHECK(tokens_equal("", ""));
  CHECK_FALSE(tokens_equal(std::string("s3cret\0", 7), "s3cret"));
}

TEST_CASE("describe durations", "[unit][protocol]") {
  CHECK(describe(std::chrono::seconds(9)) == "9 s");
  CHECK(describe(std::chrono::milliseconds(150)) == "150 ms");
  CHECK(describe(std::chrono::milliseconds(1500)) == "1500 ms");
  CHECK(describe(std::chrono::milliseconds(0)) == "0 ms");
}

TEST_CASE("parse_address", "[unit][protocol]") {
  auto u = parse_address("unix:/run/wanlab/agents.sock");
  CHECK(u.kind == Address::Kind::unix_socket);
  CHECK(u.path == "/run/wanlab/agents.sock");
  CHECK(u.to_string() == "unix:/run/wanlab/agents.sock");
  auto t = parse_address("tcp:controller.lab:7100");
  CHECK(t.kind == Address::Kind::tcp);
  CHECK(t.host == "controller.lab");
  CHECK(t.port == 7100);
  CHECK(t.to_string() == "tcp:controller.lab:7100");
  auto v6 = parse_address("tcp:[::1]:7100");
  CHECK(v6.host == "::1");
  CHECK(v6.to_string() == "tcp:[::1]:7100");
  CHECK(parse_address(v6.to_string()) == v6);

  auto fails = [](std::string_view text, std::string_view says) {
    INFO(text);
    try {
      parse_address(text);
      FAIL("no error");
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(),
                 Catch::Contains(std::string(says)) && Catch::Contains("expected unix:/path/to.sock or tcp:HOST:PORT"));
    }
  };
  fails("/run/wanlab.sock", "unknown scheme");
  fails("unix:", "no socket path");
  fails("unix:/" + std::string(200, 'x'), "at most 107 bytes");
  fails("tcp:host", "no \":PORT\"");
  fails("tcp::7100", "no host");
  fails("tcp:host:0", "port \"0\"");
  fails("tcp:host:65536", "port \"65536\"");
  fails("tcp:host:80x", "port \"80x\"");
  fails("tcp:host:", "port \"\"");
  fails("tcp:::1:7100", "in brackets");
  fails("tcp:[::1:7100", "no ']'");
}
