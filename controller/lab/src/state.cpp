#include "wanlab/lab/state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <stdexcept>

namespace wanlab::lab {
namespace fs = std::filesystem;

fs::path state_root() {
  if (const char* env = std::getenv("WANLAB_STATE_DIR"); env && *env) return env;
  return "/run/wanlab";
}
fs::path lab_dir(const std::string& lab) { return state_root() / lab; }
fs::path socket_path(const std::string& lab) { return lab_dir(lab) / "controller.sock"; }
fs::path log_path(const std::string& lab) { return lab_dir(lab) / "controller.log"; }

nlohmann::json to_json(const LabState& s) {
  return {{"lab", s.lab},         {"topology_file", s.topology_file}, {"topology", s.topology},
          {"backend", s.backend}, {"netem", s.netem},                 {"namespaces", s.namespaces},
          {"controller_pid", s.controller_pid}, {"started_at", s.started_at}, {"router_ports", s.router_ports}};
}

LabState state_from_json(const nlohmann::json& j) {
  LabState s;
  s.lab = j.at("lab").get<std::string>();
  s.topology_file = j.value("topology_file", "");
  s.topology = j.at("topology");
  s.backend = j.value("backend", "kernel");
  s.netem = j.value("netem", false);
  s.namespaces = j.at("namespaces").get<std::vector<std::string>>();
  s.router_ports = j.value("router_ports", std::vector<std::string>{});
  s.controller_pid = j.value("controller_pid", 0);
  s.started_at = j.value("started_at", "");
  return s;
}

void write_state(const LabState& s) {
  const auto dir = lab_dir(s.lab);
  fs::create_directories(dir);
  const auto tmp = dir / "state.json.tmp";
  const auto text = to_json(s).dump(2) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("open {}: {}", tmp.string(), std::strerror(errno)));
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    auto n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw std::runtime_error(fmt::format("write {}: {}", tmp.string(), std::strerror(err)));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  // No fsync: the rename makes the update atomic for any process that reads it, even
  // after this one is killed, and /run does not outlive a reboot anyway. (An fsync costs
  // milliseconds on a disk-backed /run and would dominate every `link set`.)
  ::close(fd);
  fs::rename(tmp, dir / "state.json");
}

std::optional<LabState> read_state(const std::string& lab) {
  std::ifstream in(lab_dir(lab) / "state.json");
  if (!in) return std::nullopt;
  try {
    return state_from_json(nlohmann::json::parse(in));
  } catch (const std::exception&) {
    return std::nullopt;  // torn or foreign file: recovery falls back to the name prefix
  }
}

std::vector<std::string> list_labs() {
  std::vector<std::string> labs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state_root(), ec))
    if (e.is_directory()) labs.push_back(e.path().filename().string());
  std::sort(labs.begin(), labs.end());
  return labs;
}

void remove_lab_dir(const std::string& lab) {
  std::error_code ec;
  fs::remove_all(lab_dir(lab), ec);
}

std::optional<LabLock> LabLock::try_acquire(const std::string& lab) {
  const auto dir = lab_dir(lab);
  const auto path = dir / "lock";
  int fd = -1;
  // A controller that is exiting removes the folder; it may vanish under us once or twice.
  for (int attempt = 0; fd < 0 && attempt < 20; ++attempt) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno != ENOENT) break;
  }
  if (fd < 0) throw std::runtime_error(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return std::nullopt;
    throw std::runtime_error(fmt::format("flock {}: {}", path.string(), std::strerror(err)));
  }
  return LabLock(fd);
}

LabLock::LabLock(LabLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
LabLock::~LabLock() {
  if (fd_ >= 0) ::close(fd_);
}

bool controller_alive(const std::string& lab) {
  const auto path = lab_dir(lab) / "lock";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

}  // namespace wanlab::lab
