#include "wanlab/common/ring.hpp"

#include <algorithm>

namespace wanlab::program {

std::optional<RingNeighbours> ring_neighbours(const std::vector<int>& ring, int worker) {
  const auto self = std::find(ring.begin(), ring.end(), worker);
  if (self == ring.end()) return std::nullopt;
  const auto pos = static_cast<std::size_t>(self - ring.begin());
  return RingNeighbours{ring[ring_prev(pos, ring.size())], ring[ring_next(pos, ring.size())]};
}

}  // namespace wanlab::program
