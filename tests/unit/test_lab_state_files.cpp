// The lab's state folder and files, and what a dead controller's run leaves: modes that do
// not depend on the umask, files another user could have written refused, the run record in
// state.json and the error.txt that ends an orphaned run. Also the token's ways around argv.
// (No privileges needed; the checks that need another user's files run as root only.)
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "temp_dir.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/channel_server.hpp"
#include "wanlab/common/secrets.hpp"
#include "wanlab/lab/state.hpp"

using namespace wanlab;
namespace fs = std::filesystem;

namespace {

// WANLAB_STATE_DIR and the umask for one test, restored at scope exit.
struct StateDirAndUmask {
  test::TempDir dir{"state"};
  fs::path root = dir.path() / "run";
  std::string old_env;
  bool had_env = false;
  mode_t old_umask;
  explicit StateDirAndUmask(mode_t mask) : old_umask(::umask(mask)) {
    if (const char* e = std::getenv("WANLAB_STATE_DIR")) {
      had_env = true;
      old_env = e;
    }
    ::setenv("WANLAB_STATE_DIR", root.c_str(), 1);
  }
  ~StateDirAndUmask() {
    ::umask(old_umask);
    if (had_env)
      ::setenv("WANLAB_STATE_DIR", old_env.c_str(), 1);
    else
      ::unsetenv("WANLAB_STATE_DIR");
  }
};

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

lab::LabState sample_state(const std::string& name) {
  lab::LabState s;
  s.lab = name;
  s.topology_file = "/x/topo.json";
  s.topology = {{"name", name}};
  s.backend = "userspace";
  s.namespaces = {"wl-" + name + "-router"};
  s.controller_pid = 4242;
  s.started_at = "2026-11-26T23:00:00Z";
  return s;
}

struct NoController : api::Controller {
  nlohmann::json status() override { return {}; }
  nlohmann::json set_link(const std::string&, const std::string&, const api::LinkChange&) override { return {}; }
  nlohmann::json shutdown() override { return {}; }
};

}  // namespace

TEST_CASE("state folder: modes are the lab's whatever the umask", "[unit][lab][state]") {
  StateDirAndUmask env(0);
  const auto dir = lab::make_lab_dir("wl1");
  CHECK(dir == env.root / "wl1");
  CHECK(mode_of(env.root) == 0755);
  CHECK(mode_of(dir) == 0755);

  lab::write_state(sample_state("wl1"));
  CHECK(mode_of(dir / "state.json") == 0644);
  CHECK_FALSE(fs::exists(dir / "state.json.tmp"));

  auto lock = lab::LabLock::try_acquire("wl1");
  REQUIRE(lock);
  CHECK(mode_of(dir / "lock") == 0644);

  CHECK(lab::open_lab_file(lab::log_path("wl1"), O_WRONLY | O_APPEND, 0644).valid());
  CHECK(mode_of(lab::log_path("wl1")) == 0644);

  // Sockets: only their owner may connect.
  boost::asio::io_context ioc;
  NoController c;
  api::Server server(ioc, lab::socket_path("wl1"), c);
  CHECK(mode_of(lab::socket_path("wl1")) == 0600);
  protocol::ChannelServerOptions so;
  so.unix_path = dir / "agents.sock";
  protocol::ChannelServer agents(ioc, so, [](std::shared_ptr<protocol::Channel>, const nlohmann::json&) {});
  CHECK(mode_of(dir / "agents.sock") == 0600);
}

TEST_CASE("state folder: a loose or foreign folder and files are fixed or refused", "[unit][lab][state]") {
  StateDirAndUmask env(0);
  const auto dir = lab::make_lab_dir("wl2");

  SECTION("a lab folder of ours left 0777 (an older version under umask 000) is tightened") {
    ::chmod(dir.c_str(), 0777);
    lab::make_lab_dir("wl2");
    CHECK(mode_of(dir) == 0755);
    ::chmod(env.root.c_str(), 0777);
    lab::make_lab_dir("wl2");
    CHECK(mode_of(env.root) == 0755);
  }
  SECTION("a state folder that is a symbolic link is refused") {
    fs::create_directories(env.dir.path() / "elsewhere");
    fs::create_directory_symlink(env.dir.path() / "elsewhere", env.root / "wl3");
    CHECK_THROWS_WITH(lab::make_lab_dir("wl3"), Catch::Contains("not a directory"));
  }
  SECTION("state.json writable by others is refused by down, status and up") {
    lab::write_state(sample_state("wl2"));
    ::chmod((dir / "state.json").c_str(), 0666);
    CHECK_THROWS_WITH(lab::read_state("wl2"),
                      Catch::Contains("refusing " + (dir / "state.json").string()) && Catch::Contains("writable by group or others"));
  }
  SECTION("a symbolic link as state.json is refused") {
    const auto target = env.dir.write("planted.json", lab::to_json(sample_state("wl2")).dump());
    fs::create_symlink(target, dir / "state.json");
    CHECK_THROWS_WITH(lab::read_state("wl2"), Catch::Contains("symbolic link"));
  }
  SECTION("state.json in a folder others may write is refused") {
    lab::write_state(sample_state("wl2"));
    ::chmod(dir.c_str(), 0777);
    CHECK_THROWS_WITH(lab::read_state("wl2"), Catch::Contains("refusing " + dir.string()));
  }
  SECTION("a symbolic link in place of the log is replaced, never followed") {
    const auto victim = env.dir.write("victim", "precious\n");
    fs::create_symlink(victim, lab::log_path("wl2"));
    {
      const auto fd = lab::open_lab_file(lab::log_path("wl2"), O_WRONLY | O_APPEND, 0644);
      REQUIRE(::write(fd.get(), "log\n", 4) == 4);
    }
    CHECK(fs::is_regular_file(fs::symlink_status(lab::log_path("wl2"))));
    std::ifstream in(victim);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    CHECK(text == "precious\n");
  }
  SECTION("another user's files (as root)") {
    if (::geteuid() != 0) {
      WARN("not root: cannot make files of another user here");
      return;
    }
    lab::write_state(sample_state("wl2"));
    REQUIRE(::chown((dir / "state.json").c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(lab::read_state("wl2"), Catch::Contains("owned by uid 65534"));
    // A lock planted by another user is replaced by ours.
    const int planted = ::open((dir / "lock").c_str(), O_WRONLY | O_CREAT, 0666);
    REQUIRE(planted >= 0);
    ::close(planted);
    REQUIRE(::chown((dir / "lock").c_str(), 65534, 65534) == 0);
    auto lock = lab::LabLock::try_acquire("wl2");
    REQUIRE(lock);
    struct stat st {};
    REQUIRE(::stat((dir / "lock").c_str(), &st) == 0);
    CHECK(st.st_uid == 0);
    // A lab folder of another user is refused.
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(lab::make_lab_dir("wl2"), Catch::Contains("owned by uid 65534"));
  }
}

TEST_CASE("state.json records the run in progress; a dead controller's run ends with error.txt",
          "[unit][lab][state]") {
  StateDirAndUmask env(022);
  auto s = sample_state("wl4");
  const auto out = env.dir.path() / "runs" / "r1";
  fs::create_directories(out / "agents");
  lab::RunRecord r;
  r.id = "smoke-1";
  r.scenario = "smoke";
  r.out = out.string();
  r.started_at = "2026-11-26T23:01:00Z";
  r.iterations = 50;
  r.iterations_done = 6;
  r.phase = "running";
  r.alive_at = "2026-11-26T23:01:09Z";
  s.run = r;
  lab::write_state(s);
  const auto back = lab::read_state("wl4");
  REQUIRE(back);
  REQUIRE(back->run);
  CHECK(back->run->id == "smoke-1");
  CHECK(back->run->out == out.string());
  CHECK(back->run->iterations_done == 6);
  CHECK(back->run->alive_at == "2026-11-26T23:01:09Z");

  const auto text = lab::orphaned_run_text(*back, "`wanlab down`", "2026-11-26T23:05:00Z");
  CHECK_THAT(text, Catch::Contains("the controller of lab wl4 (pid 4242) died during iteration 7 of 50 (6 done), at "
                                   "about 2026-11-26T23:01:09Z"));
  CHECK_THAT(text, Catch::Contains("`wanlab down` found it gone at 2026-11-26T23:05:00Z"));
  CHECK_THAT(text, Catch::Contains("Partial results are kept"));

  const auto file = lab::end_orphaned_run(*back, "`wanlab down`");
  REQUIRE(file);
  CHECK(*file == out / "error.txt");
  CHECK(mode_of(*file) == 0644);
  // Whoever notices first writes it; the next command leaves it be.
  CHECK_FALSE(lab::end_orphaned_run(*back, "`wanlab status`"));
  std::ifstream in(*file);
  std::string written((std::istreambuf_iterator<char>(in)), {});
  CHECK_THAT(written, Catch::Contains("`wanlab down` found it gone"));

  // Before the first iteration, and no run at all.
  auto early = *back;
  early.run->phase = "connecting";
  early.run->iterations_done = 0;
  CHECK_THAT(lab::orphaned_run_text(early, "`wanlab up`", "t"),
             Catch::Contains("before the first iteration (the run was in its \"connecting\" phase)"));
  s.run.reset();
  lab::write_state(s);
  REQUIRE(lab::read_state("wl4"));
  CHECK_FALSE(lab::read_state("wl4")->run);
  CHECK_FALSE(lab::end_orphaned_run(*lab::read_state("wl4"), "`wanlab down`"));
}

TEST_CASE("secrets: a token leaves argv; a token file", "[unit][secrets]") {
  std::vector<std::string> words{"wanlab", "up", "t.json", "--token", "s3cret", "--token=other", "--token-file",
                                 "f", "--", "--token", "keep"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  CHECK(hide_argument_values(static_cast<int>(argv.size()), argv.data(), {"--token"}) == 2);
  CHECK(words[4] == "******");
  CHECK(words[5] == "--token=*****");
  CHECK(words[7] == "f");      // --token-file's value is a path, not the secret
  CHECK(words[10] == "keep");  // after "--": another command's arguments

  test::TempDir dir("secret");
  std::string warning;
  const auto f = dir.write("token", "  abc123 \nsecond line\n");
  ::chmod(f.c_str(), 0600);
  CHECK(read_secret_file(f, warning) == "abc123");
  CHECK(warning.empty());
  ::chmod(f.c_str(), 0644);
  CHECK(read_secret_file(f, warning) == "abc123");
  CHECK_THAT(warning, Catch::Contains("may be read by other users (mode 0644)"));
  CHECK_THROWS_WITH(read_secret_file(dir.write("empty", "\n"), warning), Catch::Contains("empty"));
  CHECK_THROWS_WITH(read_secret_file(dir.path() / "missing", warning), Catch::Contains("No such file"));
}
