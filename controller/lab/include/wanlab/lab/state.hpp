#pragma once
// What a running lab leaves on disk, so any later command (and a new controller after a
// crash or SIGKILL) can find and remove every object it owns:
//   <root>/<lab>/state.json      written before the first kernel object is created
//   <root>/<lab>/lock            flock held by the controller for its whole life
//   <root>/<lab>/controller.sock control API (Unix socket)
//   <root>/<lab>/controller.log  the controller's log
// <root> is /run/wanlab unless WANLAB_STATE_DIR says otherwise.
//
// Permissions, whatever the caller's umask: the lab folder is 0755 and its owner's (root's),
// the sockets 0600, state.json, the lock and the log 0644, each written by its owner only
// (state.json atomically, never through a symbolic link). Anything there that another user
// could have written is refused (state.json) or replaced (the lock, the log) before use: the
// lab's commands act as root on what state.json says.
#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wanlab/common/unique_fd.hpp"

namespace wanlab::lab {

std::filesystem::path state_root();
std::filesystem::path lab_dir(const std::string& lab);
std::filesystem::path socket_path(const std::string& lab);
std::filesystem::path log_path(const std::string& lab);

/// The run in progress (the daemon's run manager), so that whoever finds its controller
/// dead can end the run with an error.txt (end_orphaned_run).
struct RunRecord {
  std::string id;
  std::string scenario;
  std::string out;         // the run folder, absolute
  std::string started_at;  // ISO 8601 UTC
  int iterations = 0;
  int iterations_done = 0;
  std::string phase;       // the coordinator's phase when last written
  std::string alive_at;    // the controller's last sign of life during the run (about 1 s apart)
};

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
  std::optional<RunRecord> run;  // a run in progress
};

nlohmann::json to_json(const LabState& s);
LabState state_from_json(const nlohmann::json& j);

/// Atomic write (temporary file, then rename), 0644.
void write_state(const LabState& s);
/// nullopt when there is none (or it is unreadable JSON). Throws std::runtime_error, naming
/// the file and the reason, for a state file or lab folder another user could have written
/// (owned by someone other than root or this user, or writable by group or others).
std::optional<LabState> read_state(const std::string& lab);

/// Creates <root> (0755 where it is missing) and <root>/<lab>/, 0755 whatever the umask, and
/// returns the latter. A lab folder of this user with another mode gets 0755; one that is not
/// a directory, is a symbolic link or is another user's is refused (std::runtime_error), as
/// is a <root> another user could write.
std::filesystem::path make_lab_dir(const std::string& lab);
/// Opens `file` (in a lab folder) with `flags` | O_CREAT | O_NOFOLLOW | O_CLOEXEC, as this
/// user's file of exactly `mode`: a file there of another user is removed first. Returns the
/// descriptor; throws std::runtime_error naming the file.
UniqueFd open_lab_file(const std::filesystem::path& file, int flags, mode_t mode);
/// Throws std::runtime_error unless `st` (of `what`) is owned by root or this user and not
/// writable by group or others.
void check_trusted(const std::filesystem::path& what, const struct stat& st);

/// When a lab's controller died during a run (`state.run` is set and the controller is
/// gone): writes the run folder's error.txt saying so, unless one is there already, and
/// returns its path (nullopt when there is no run or error.txt exists). `noticed_by` names
/// the command, e.g. "wanlab down". Throws std::runtime_error if the file cannot be written.
std::optional<std::filesystem::path> end_orphaned_run(const LabState& state, const std::string& noticed_by);
/// The text end_orphaned_run writes (`now`: ISO 8601 UTC).
std::string orphaned_run_text(const LabState& state, const std::string& noticed_by, const std::string& now);
/// Labs that have a state folder.
std::vector<std::string> list_labs();
void remove_lab_dir(const std::string& lab);

/// An exclusive flock on <lab>/lock. Move-only; released on destruction (or when every
/// process sharing the descriptor, e.g. after fork, has closed it).
class LabLock {
 public:
  /// nullopt if someone else holds it.
  static std::optional<LabLock> try_acquire(const std::string& lab);
  LabLock(LabLock&& o) noexcept = default;
  LabLock& operator=(LabLock&&) = delete;
  int fd() const { return fd_.get(); }

 private:
  explicit LabLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

/// True while a controller holds the lab's lock.
bool controller_alive(const std::string& lab);

}  // namespace wanlab::lab
