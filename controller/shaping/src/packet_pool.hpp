#pragma once
// The userspace engine's packet memory (engine.cpp and the rail switch, rail_switch.cpp):
// fixed-size frame slots in two pools, MTU-sized and 64 KiB, the priority-inheriting mutex
// their threads share with the control plane, and their clock.
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <stdexcept>
#include <vector>

#include "wanlab/common/units.hpp"
#include "wanlab/shaping/gso.hpp"

namespace wanlab::shaping::engine_detail {

/// CLOCK_MONOTONIC in ns: the clock of the threads' models and deadlines.
inline Nanos mono_now() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<Nanos>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A mutex with priority inheritance: the engine thread (real-time) shares its counters and
// pending changes with the control plane's threads (the fair scheduler's). With a plain
// mutex, a reader preempted by any other job while it held the lock kept the engine waiting
// as long as that job ran; with inheritance the holder runs at the engine's priority until
// it lets go.
class PiMutex {
 public:
  PiMutex() {
    pthread_mutexattr_t a;
    ::pthread_mutexattr_init(&a);
    ::pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
    ::pthread_mutex_init(&m_, &a);
    ::pthread_mutexattr_destroy(&a);
  }
  ~PiMutex() { ::pthread_mutex_destroy(&m_); }
  PiMutex(const PiMutex&) = delete;
  PiMutex& operator=(const PiMutex&) = delete;
  void lock() { ::pthread_mutex_lock(&m_); }
  void unlock() { ::pthread_mutex_unlock(&m_); }
  bool try_lock() { return ::pthread_mutex_trylock(&m_) == 0; }

 private:
  pthread_mutex_t m_;
};

// What a pool slot holds besides its bytes.
struct SlotMeta {
  std::uint32_t len = 0;       // frame bytes
  std::uint32_t wire = 0;      // bytes on the wire: the segments' frames together (gso.hpp)
  std::uint32_t segments = 1;  // packets on the wire
};

// A slot's layout: the frame's virtio-net header ends where the frame starts, at
// kFrameOffset, so both go to a TX ring in one copy.
constexpr std::uint32_t kFrameOffset = 16;
constexpr std::uint32_t kVnetOffset = kFrameOffset - sizeof(VnetHdr);

// Fixed-size frame slots, mapped without reserving memory; a LIFO free list keeps the
// slots in use (and so the memory touched) as few as the peak occupancy.
class Pool {
 public:
  Pool(std::size_t slots, std::uint32_t slot_size) : slot_size_(slot_size), meta_(slots) {
    bytes_ = slots * slot_size;
    void* m = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error(fmt::format("mmap packet pool ({} MiB): {}", bytes_ >> 20, std::strerror(errno)));
    mem_ = static_cast<std::uint8_t*>(m);
    free_.reserve(slots);
    for (std::size_t i = slots; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  }
  ~Pool() { ::munmap(mem_, bytes_); }
  std::optional<std::uint32_t> alloc() {
    if (free_.empty()) return std::nullopt;
    auto s = free_.back();
    free_.pop_back();
    return s;
  }
  void release(std::uint32_t s) { free_.push_back(s); }
  std::size_t size() const { return meta_.size(); }
  /// More slots, contents kept (the mapping may move: slots are indices). The new slots go
  /// to the bottom of the free list, so the ones already touched are reused first.
  void grow(std::size_t slots) {
    if (slots <= meta_.size()) return;
    const std::size_t bytes = slots * slot_size_;
    void* m = ::mremap(mem_, bytes_, bytes, MREMAP_MAYMOVE);
    if (m == MAP_FAILED) throw std::runtime_error(fmt::format("mremap packet pool ({} MiB): {}", bytes >> 20, std::strerror(errno)));
    mem_ = static_cast<std::uint8_t*>(m);
    bytes_ = bytes;
    std::vector<std::uint32_t> list;
    list.reserve(slots);
    for (std::size_t i = slots; i-- > meta_.size();) list.push_back(static_cast<std::uint32_t>(i));
    list.insert(list.end(), free_.begin(), free_.end());
    free_.swap(list);
    meta_.resize(slots);
  }
  std::uint8_t* data(std::uint32_t s) { return mem_ + static_cast<std::size_t>(s) * slot_size_; }
  SlotMeta& meta(std::uint32_t s) { return meta_[s]; }
  std::uint32_t slot_size() const { return slot_size_; }

 private:
  std::uint32_t slot_size_;
  std::uint8_t* mem_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<SlotMeta> meta_;
  std::vector<std::uint32_t> free_;
};

// Two pools: slots the size of a small ring's (MTU-sized frames) and 64 KiB ones for
// super-frames. A handle's top bit says which.
class Pools {
 public:
  static constexpr std::uint32_t kBig = 1u << 31;
  Pools(std::size_t small_slots, std::uint32_t small_size, std::size_t big_slots, std::uint32_t big_size)
      : small_(small_slots, small_size), big_(big_slots, big_size) {}
  /// A slot for a frame of `len` bytes.
  std::optional<std::uint32_t> alloc(std::uint32_t len) {
    if (kFrameOffset + len <= small_.slot_size()) return small_.alloc();
    if (kFrameOffset + len > big_.slot_size()) return std::nullopt;
    auto s = big_.alloc();
    if (!s) return s;
    return *s | kBig;
  }
  void release(std::uint32_t h) { h & kBig ? big_.release(h & ~kBig) : small_.release(h); }
  std::uint8_t* frame(std::uint32_t h) { return base(h) + kFrameOffset; }
  VnetHdr* vnet(std::uint32_t h) { return reinterpret_cast<VnetHdr*>(base(h) + kVnetOffset); }
  SlotMeta& meta(std::uint32_t h) { return h & kBig ? big_.meta(h & ~kBig) : small_.meta(h); }
  std::size_t size() const { return small_.size(); }
  /// Room for `slots` small frames and a quarter as many super-frames.
  void grow(std::size_t slots) {
    small_.grow(slots);
    big_.grow(slots / 4);
  }

 private:
  std::uint8_t* base(std::uint32_t h) { return h & kBig ? big_.data(h & ~kBig) : small_.data(h); }
  Pool small_, big_;
};

}  // namespace wanlab::shaping::engine_detail
