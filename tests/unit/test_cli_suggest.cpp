// "Did you mean": the nearest subcommand to a mistyped one (`wanlab staus`).
#include <catch2/catch.hpp>

#include "suggest.hpp"

using wanlab::cli::edit_distance;
using wanlab::cli::nearest;

TEST_CASE("edit distance counts insertions, deletions, substitutions and swaps", "[unit][cli]") {
  CHECK(edit_distance("status", "status") == 0);
  CHECK(edit_distance("staus", "status") == 1);
  CHECK(edit_distance("stauts", "status") == 1);  // a swap
  CHECK(edit_distance("", "up") == 2);
  CHECK(edit_distance("bench", "exec") == 4);
}

TEST_CASE("the nearest subcommand of a typo", "[unit][cli]") {
  const std::vector<std::string> subs = {"up",   "run",  "bench", "simulate", "down",   "status", "exec",
                                         "link", "node-setup", "compose", "replay", "trace", "capture"};
  CHECK(nearest("staus", subs) == "status");
  CHECK(nearest("stauts", subs) == "status");
  CHECK(nearest("dwon", subs) == "down");
  CHECK(nearest("benhc", subs) == "bench");
  CHECK(nearest("simulat", subs) == "simulate");
  CHECK(nearest("sim", subs) == "simulate");  // a prefix of one subcommand only
  CHECK(nearest("xyzzy", subs) == std::nullopt);
  CHECK(nearest("", subs) == std::nullopt);
  CHECK(nearest("c", subs) == std::nullopt);  // compose or capture
}
