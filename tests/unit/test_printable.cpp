// Text from outside made safe to show (common/printable.hpp).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "wanlab/common/printable.hpp"

using namespace wanlab;

TEST_CASE("printable: valid UTF-8 passes, everything else is escaped", "[unit][security]") {
  CHECK(printable("use-n0 -> euw, 40ms") == "use-n0 -> euw, 40ms");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable("\xff") == "\\xff");
  CHECK(printable("a\xc3") == "a\\xc3");              // cut short
  CHECK(printable("\xc3\x28") == "\\xc3(");           // a bad continuation byte
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");       // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  CHECK(printable("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(printable("\x1b[2J\x7f") == "\\x1b[2J\\x7f");  // a terminal's escape sequence
  CHECK(printable("\xc2\x9b") == "\\u009b");            // C1 control (CSI)
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
}

TEST_CASE("printable: a limit cuts the text between characters", "[unit][security]") {
  CHECK(printable("abcdef", 3) == "abc...");
  CHECK(printable("abc", 3) == "abc");
  CHECK(printable("ab\xe2\x82\xac", 3) == "ab...");  // not inside the euro sign
  CHECK(printable(std::string(10000, 'x'), 40).size() == 43);
}

TEST_CASE("printable: the result always goes into JSON", "[unit][security]") {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (int i = 0; i < 256; ++i) all += static_cast<char>(0xc0 + i % 64) + std::string(1, static_cast<char>(i));
  CHECK_FALSE(valid_utf8(all));
  const auto p = printable(all);
  CHECK(valid_utf8(p));
  CHECK_NOTHROW(nlohmann::json(p).dump());
  CHECK_THROWS(nlohmann::json(all).dump());
}
