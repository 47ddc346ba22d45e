#pragma once
// What a running lab leaves on disk, so any later command (and a new controller after a
// crash or SIGKILL) can find and remove every object it owns:
//   <root>/<lab>/state.json      written before the first kernel object is created
//   <root>/<lab>/lock            flock held by the controller for its whole life
//   <root>/<lab>/controller.sock control API (Unix socket)
//   <root>/<lab>/controller.log  the controller's log
// <root> is /run/wanlab unless WANLAB_STATE_DIR says otherwise.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wanlab::lab {

std::filesystem::path state_root();
std::filesystem::path lab_dir(const std::string& lab);
std::filesystem::path socket_path(const std::string& lab);
std::filesystem::path log_path(const std::string& lab);

struct LabState {
  std::string lab;
  std::string topology_file;
  nlohmann::json topology;  // canonical (core::to_json), kept current by `link set`
  std::string backend;      // "kernel"
  bool netem = false;       // delay/jitter/loss applied by the kernel
  std::vector<std::string> namespaces;
  // Router-only labs (router_only.hpp): the interfaces of the controller's own namespace
  // toward each DC (by DC index); empty for namespace labs.
  std::vector<std::string> router_ports;
  int controller_pid = 0;
  std::string started_at;  // ISO 8601 UTC
};

nlohmann::json to_json(const LabState& s);
LabState state_from_json(const nlohmann::json& j);

/// Atomic write (temporary file, then rename).
void write_state(const LabState& s);
std::optional<LabState> read_state(const std::string& lab);
/// Labs that have a state folder.
std::vector<std::string> list_labs();
void remove_lab_dir(const std::string& lab);

/// An exclusive flock on <lab>/lock. Move-only; released on destruction (or when every
/// process sharing the descriptor, e.g. after fork, has closed it).
class LabLock {
 public:
  /// nullopt if someone else holds it.
  static std::optional<LabLock> try_acquire(const std::string& lab);
  LabLock(LabLock&& o) noexcept;
  LabLock& operator=(LabLock&&) = delete;
  ~LabLock();
  int fd() const { return fd_; }

 private:
  explicit LabLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// True while a controller holds the lab's lock.
bool controller_alive(const std::string& lab);

}  // namespace wanlab::lab
