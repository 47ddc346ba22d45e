#pragma once
// A ring all-reduce's order (program::Op::ring: worker ids in ring order): who a member sends
// to and receives from. One rule for the agents, the virtual-clock executor, the simulator
// and the bench plots.
#include <compare>
#include <cstddef>
#include <optional>
#include <vector>

namespace wanlab::program {

/// The position after `pos` in a ring of `n` members, wrapping: where a member sends.
constexpr std::size_t ring_next(std::size_t pos, std::size_t n) {
  return (pos + 1) % n;
}
/// The position before `pos` in a ring of `n` members, wrapping: where a member receives from.
constexpr std::size_t ring_prev(std::size_t pos, std::size_t n) {
  return (pos + n - 1) % n;
}

/// A worker's neighbours in an all-reduce ring (worker ids in ring order): it sends each step
/// to `next` and receives from `prev`. A ring of one is its own neighbour.
struct RingNeighbours {
  int prev = -1;
  int next = -1;
  auto operator<=>(const RingNeighbours&) const = default;
};
/// nullopt when `worker` is not in `ring` (its first place counts where it is there twice).
std::optional<RingNeighbours> ring_neighbours(const std::vector<int>& ring, int worker);

}  // namespace wanlab::program
