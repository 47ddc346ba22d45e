// IndexedMinHeap (common/indexed_heap.hpp) against a plain ordered set, over random updates.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "wanlab/common/indexed_heap.hpp"

using wanlab::IndexedMinHeap;

TEST_CASE("indexed min-heap: set, move, erase and pop follow (key, id) order", "[unit][heap]") {
  IndexedMinHeap<std::int64_t> h(4);
  CHECK(h.empty());
  h.set(2, 50);
  h.set(0, 70);
  h.set(3, 50);  // a tie: the lower id first
  CHECK(h.size() == 3);
  CHECK(h.top() == 2);
  CHECK(h.top_key() == 50);
  h.set(2, 90);  // moved later
  CHECK(h.top() == 3);
  h.set(0, 10);  // moved earlier
  CHECK(h.top() == 0);
  CHECK(h.key(2) == 90);
  h.erase(0);
  h.erase(0);  // not in: nothing
  CHECK_FALSE(h.contains(0));
  CHECK(h.pop() == 3);
  h.set(7, 1);  // an id past the first size
  CHECK(h.pop() == 7);
  CHECK(h.pop() == 2);
  CHECK(h.empty());
}

TEST_CASE("indexed min-heap matches an ordered set over 20,000 random operations", "[unit][heap]") {
  std::mt19937 rng(7);
  IndexedMinHeap<std::int64_t> h;
  std::set<std::pair<std::int64_t, std::uint32_t>> ref;
  std::map<std::uint32_t, std::int64_t> key;
  for (int step = 0; step < 20000; ++step) {
    const auto id = static_cast<std::uint32_t>(rng() % 64);
    const int op = static_cast<int>(rng() % 4);
    if (op <= 1) {
      const auto k = static_cast<std::int64_t>(rng() % 100);  // few keys: many ties
      if (key.count(id)) ref.erase({key[id], id});
      key[id] = k;
      ref.insert({k, id});
      h.set(id, k);
    } else if (op == 2) {
      if (key.count(id)) ref.erase({key[id], id}), key.erase(id);
      h.erase(id);
    } else if (!ref.empty()) {
      const auto want = *ref.begin();
      REQUIRE(h.top() == want.second);
      REQUIRE(h.top_key() == want.first);
      REQUIRE(h.pop() == want.second);
      ref.erase(ref.begin());
      key.erase(want.second);
    }
    REQUIRE(h.size() == ref.size());
    if (!ref.empty()) REQUIRE(h.top() == ref.begin()->second);
  }
}
