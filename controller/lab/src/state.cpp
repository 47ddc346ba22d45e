#include "wanlab/lab/state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

#include "wanlab/common/text.hpp"

namespace wanlab::lab {
namespace fs = std::filesystem;

fs::path state_root() {
  if (const char* env = std::getenv("WANLAB_STATE_DIR"); env && *env) return env;
  return "/run/wanlab";
}
fs::path lab_dir(const std::string& lab) { return state_root() / lab; }
fs::path socket_path(const std::string& lab) { return lab_dir(lab) / "controller.sock"; }
fs::path log_path(const std::string& lab) { return lab_dir(lab) / "controller.log"; }

namespace {

constexpr mode_t kDirMode = 0755;

std::string errno_text(int err) { return std::strerror(err); }

std::string owner_problem(const struct stat& st) {
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return fmt::format("it is owned by uid {}, not by root or this user (uid {})", st.st_uid, ::geteuid());
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("it is writable by group or others (mode {:04o})", st.st_mode & 07777);
  return {};
}

// <root>: created 0755 where missing; one another user could write is refused (a root of
// ours with a loose mode, e.g. made by an earlier version under umask 000, is tightened).
void check_root(const fs::path& root) {
  if (::mkdir(root.c_str(), kDirMode) == 0) {
    ::chmod(root.c_str(), kDirMode);
    return;
  }
  if (errno == ENOENT) {
    std::error_code ec;
    fs::create_directories(root.parent_path(), ec);
    if (::mkdir(root.c_str(), kDirMode) == 0) {
      ::chmod(root.c_str(), kDirMode);
      return;
    }
  }
  if (errno != EEXIST)
    throw std::runtime_error(fmt::format("cannot create the state folder {}: {}", root.string(), errno_text(errno)));
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0)
    throw std::runtime_error(fmt::format("state folder {}: {}", root.string(), errno_text(errno)));
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(fmt::format("state folder {}: not a directory", root.string()));
  if (st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    if (::chmod(root.c_str(), kDirMode) != 0)
      throw std::runtime_error(fmt::format("state folder {}: chmod: {}", root.string(), errno_text(errno)));
    return;
  }
  // Writable by others but sticky (like /tmp): they cannot remove or rename our folders.
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    throw std::runtime_error(fmt::format("refusing the state folder {}: it is owned by uid {}, not by root or this "
                                         "user; set WANLAB_STATE_DIR to a folder of yours",
                                         root.string(), st.st_uid));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    throw std::runtime_error(fmt::format("refusing the state folder {}: other users may write it (mode {:04o}); "
                                         "chmod 755 it or set WANLAB_STATE_DIR",
                                         root.string(), st.st_mode & 07777));
}

}  // namespace

void check_trusted(const fs::path& what, const struct stat& st) {
  if (const auto why = owner_problem(st); !why.empty())
    throw std::runtime_error(
        fmt::format("refusing {}: {}; another user may have written it. Remove it if the lab is not yours", what.string(), why));
}

fs::path make_lab_dir(const std::string& lab) {
  const auto root = state_root();
  check_root(root);
  const auto dir = root / lab;
  if (::mkdir(dir.c_str(), kDirMode) == 0) {
    // mkdir's mode passes through the umask: set it outright.
    if (::chmod(dir.c_str(), kDirMode) != 0)
      throw std::runtime_error(fmt::format("chmod {}: {}", dir.string(), errno_text(errno)));
    return dir;
  }
  if (errno != EEXIST) throw std::runtime_error(fmt::format("cannot create {}: {}", dir.string(), errno_text(errno)));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw std::runtime_error(fmt::format("{}: {}", dir.string(), errno_text(errno)));
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("refusing {}: not a directory (a lab's state folder must be one)", dir.string()));
  if (st.st_uid != ::geteuid())
    throw std::runtime_error(fmt::format("refusing {}: it is owned by uid {}, not by this user (uid {}); remove it if "
                                         "the lab is not yours",
                                         dir.string(), st.st_uid, ::geteuid()));
  if ((st.st_mode & 07777) != kDirMode && ::chmod(dir.c_str(), kDirMode) != 0)
    throw std::runtime_error(fmt::format("chmod {}: {}", dir.string(), errno_text(errno)));
  return dir;
}

UniqueFd open_lab_file(const fs::path& file, int flags, mode_t mode) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    UniqueFd fd(::open(file.c_str(), flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd) {
      const int err = errno;
      // A symbolic link (ELOOP) is never ours to follow: remove it and create the file.
      if (err == ELOOP && attempt == 0 && ::unlink(file.c_str()) == 0) continue;
      throw std::runtime_error(fmt::format("open {}: {}", file.string(), errno_text(err)));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      fd.reset();
      if (attempt == 0 && ::unlink(file.c_str()) == 0) continue;
      throw std::runtime_error(fmt::format("refusing {}: not a regular file of this user", file.string()));
    }
    if ((st.st_mode & 07777) != mode && ::fchmod(fd.get(), mode) != 0)
      throw std::runtime_error(fmt::format("chmod {}: {}", file.string(), errno_text(errno)));
    return fd;
  }
  throw std::runtime_error(fmt::format("open {}: it keeps changing", file.string()));
}

nlohmann::json to_json(const LabState& s) {
  nlohmann::json j = {{"lab", s.lab},         {"topology_file", s.topology_file}, {"topology", s.topology},
                      {"backend", s.backend}, {"netem", s.netem},                 {"namespaces", s.namespaces},
                      {"controller_pid", s.controller_pid}, {"started_at", s.started_at}, {"router_ports", s.router_ports}};
  if (s.run)
    j["run"] = {{"id", s.run->id},
                {"scenario", s.run->scenario},
                {"out", s.run->out},
                {"started_at", s.run->started_at},
                {"iterations", s.run->iterations},
                {"iterations_done", s.run->iterations_done},
                {"phase", s.run->phase},
                {"alive_at", s.run->alive_at}};
  return j;
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
  if (const auto it = j.find("run"); it != j.end() && it->is_object()) {
    RunRecord r;
    r.id = it->value("id", "");
    r.scenario = it->value("scenario", "");
    r.out = it->value("out", "");
    r.started_at = it->value("started_at", "");
    r.iterations = it->value("iterations", 0);
    r.iterations_done = it->value("iterations_done", 0);
    r.phase = it->value("phase", "");
    r.alive_at = it->value("alive_at", "");
    s.run = std::move(r);
  }
  return s;
}

void write_state(const LabState& s) {
  const auto dir = make_lab_dir(s.lab);
  const auto tmp = dir / "state.json.tmp";
  const auto text = to_json(s).dump(2) + "\n";
  // A fresh file (O_EXCL after removing any left over): nothing another process prepared.
  ::unlink(tmp.c_str());
  const UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) throw std::runtime_error(fmt::format("open {}: {}", tmp.string(), std::strerror(errno)));
  if (::fchmod(fd.get(), 0644) != 0)
    throw std::runtime_error(fmt::format("chmod {}: {}", tmp.string(), std::strerror(errno)));
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    auto n = ::write(fd.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(fmt::format("write {}: {}", tmp.string(), std::strerror(errno)));
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  // No fsync: the rename makes the update atomic for any process that reads it, even
  // after this one is killed, and /run does not outlive a reboot anyway. (An fsync costs
  // milliseconds on a disk-backed /run and would dominate every `link set`.)
  fs::rename(tmp, dir / "state.json");
}

std::optional<LabState> read_state(const std::string& lab) {
  const auto dir = lab_dir(lab);
  const auto path = dir / "state.json";
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    if (errno == ELOOP) throw std::runtime_error(fmt::format("refusing {}: it is a symbolic link", path.string()));
    throw std::runtime_error(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
  }
  std::string text;
  struct stat st {}, dst {};
  if (::fstat(fd.get(), &st) != 0) throw std::runtime_error(fmt::format("stat {}: {}", path.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(fmt::format("refusing {}: not a regular file", path.string()));
  check_trusted(path, st);
  if (::lstat(dir.c_str(), &dst) == 0) check_trusted(dir, dst);
  char buf[8192];
  for (;;) {
    const auto n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  try {
    return state_from_json(nlohmann::json::parse(text));
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
  UniqueFd fd;
  // A controller that is exiting removes the folder; it may vanish under us once or twice.
  for (int attempt = 0; !fd; ++attempt) {
    try {
      make_lab_dir(lab);
      fd = open_lab_file(path, O_RDWR, 0644);
    } catch (const std::runtime_error&) {
      // Only the folder vanishing (a controller that is exiting removes it) is worth a retry.
      struct stat st {};
      if (attempt >= 19 || ::lstat(dir.c_str(), &st) == 0) throw;
    }
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return std::nullopt;
    throw std::runtime_error(fmt::format("flock {}: {}", path.string(), std::strerror(errno)));
  }
  return LabLock(std::move(fd));
}

bool controller_alive(const std::string& lab) {
  const auto path = lab_dir(lab) / "lock";
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return false;
  return ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

}  // namespace wanlab::lab

namespace wanlab::lab {

std::string orphaned_run_text(const LabState& state, const std::string& noticed_by, const std::string& now) {
  const auto& r = *state.run;
  std::string when;
  if (r.phase == "running" && r.iterations_done < r.iterations)
    when = fmt::format("during iteration {} of {} ({} done)", r.iterations_done + 1, r.iterations, r.iterations_done);
  else if (r.phase == "running")
    when = fmt::format("after its last iteration ({} of {}), before the reports were in", r.iterations_done, r.iterations);
  else
    when = fmt::format("before the first iteration (the run was in its \"{}\" phase)", r.phase.empty() ? "agents" : r.phase);
  return fmt::format(
      "run {} (scenario {}) ended without results: the controller of lab {} (pid {}) died {}, at about {} (its last "
      "sign of life: it notes one about every second during a run). {} found it gone at {}.\n"
      "Partial results are kept: the agents' logs in agents/. There is no summary.json, timeline.json or links.csv "
      "(the controller writes them when a run ends). The agents gave up on the run when their connection to the "
      "controller closed.\n"
      "Run it again once the lab is up again (wanlab up, or wanlab run, which brings it up).\n",
      r.id, r.scenario, state.lab, state.controller_pid, when, r.alive_at.empty() ? r.started_at : r.alive_at,
      noticed_by, now);
}

std::optional<fs::path> end_orphaned_run(const LabState& state, const std::string& noticed_by) {
  if (!state.run || state.run->out.empty()) return std::nullopt;
  const fs::path file = fs::path(state.run->out) / "error.txt";
  const auto text = orphaned_run_text(state, noticed_by, utc_timestamp());
  // O_EXCL: whoever notices first writes it; a run that failed on its own has one already.
  const UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) {
    if (errno == EEXIST) return std::nullopt;
    throw std::runtime_error(fmt::format("cannot write {}: {}", file.string(), std::strerror(errno)));
  }
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const auto n = ::write(fd.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(fmt::format("write {}: {}", file.string(), std::strerror(errno)));
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return file;
}

}  // namespace wanlab::lab
