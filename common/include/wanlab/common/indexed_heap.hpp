#pragma once
// A binary min-heap of ids (0, 1, 2, ...) keyed by a value, whose entries know their place,
// so an id's key can be changed or the id removed in O(log n) without leaving a stale entry
// behind. Order is by key, then by id: the smallest is unique, so which id comes out first
// does not depend on the order of the updates that led there (runs stay deterministic).
//
// The userspace engine keys its links by their next event; the simulator's flow network
// keys its bundles by their next finish.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace wanlab {

template <class Key>
class IndexedMinHeap {
 public:
  IndexedMinHeap() = default;
  /// Room for ids 0..ids-1 (more are added by set()).
  explicit IndexedMinHeap(std::size_t ids) : pos_(ids, kAbsent) {}

  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  bool contains(std::uint32_t id) const { return id < pos_.size() && pos_[id] != kAbsent; }
  /// The id with the smallest key (ties: the smallest id). Not empty.
  std::uint32_t top() const { return heap_.front().id; }
  const Key& top_key() const { return heap_.front().key; }
  /// The key of an id it contains.
  const Key& key(std::uint32_t id) const { return heap_[pos_[id]].key; }

  /// Inserts `id` with key `k`, or moves it to `k` if it is in already.
  void set(std::uint32_t id, Key k) {
    if (id >= pos_.size()) pos_.resize(static_cast<std::size_t>(id) + 1, kAbsent);
    if (pos_[id] == kAbsent) {
      heap_.push_back({std::move(k), id});
      pos_[id] = heap_.size() - 1;
      up(heap_.size() - 1);
      return;
    }
    const std::size_t i = pos_[id];
    const bool smaller = k < heap_[i].key;
    heap_[i].key = std::move(k);
    smaller ? up(i) : down(i);
  }

  /// Removes `id`; nothing if it is not in.
  void erase(std::uint32_t id) {
    if (!contains(id)) return;
    const std::size_t i = pos_[id];
    pos_[id] = kAbsent;
    Entry last = std::move(heap_.back());
    heap_.pop_back();
    if (i == heap_.size()) return;  // it was the last
    const std::uint32_t moved = last.id;
    place(i, std::move(last));
    up(i);
    down(pos_[moved]);
  }

  /// Removes and returns the top id. Not empty.
  std::uint32_t pop() {
    const std::uint32_t id = top();
    erase(id);
    return id;
  }

 private:
  static constexpr std::size_t kAbsent = static_cast<std::size_t>(-1);
  struct Entry {
    Key key;
    std::uint32_t id;
    bool operator<(const Entry& o) const { return key < o.key || (!(o.key < key) && id < o.id); }
  };

  void place(std::size_t i, Entry e) {
    pos_[e.id] = i;
    heap_[i] = std::move(e);
  }
  void up(std::size_t i) {
    Entry e = std::move(heap_[i]);
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!(e < heap_[parent])) break;
      place(i, std::move(heap_[parent]));
      i = parent;
    }
    place(i, std::move(e));
  }
  void down(std::size_t i) {
    Entry e = std::move(heap_[i]);
    const std::size_t n = heap_.size();
    for (;;) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && heap_[child + 1] < heap_[child]) ++child;
      if (!(heap_[child] < e)) break;
      place(i, std::move(heap_[child]));
      i = child;
    }
    place(i, std::move(e));
  }

  std::vector<Entry> heap_;
  std::vector<std::size_t> pos_;  // each id's place in heap_ (kAbsent: not in)
};

}  // namespace wanlab
