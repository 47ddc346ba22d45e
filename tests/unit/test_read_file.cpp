// read_file: what the API and the CLI read topologies, scenarios and traces through.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "temp_dir.hpp"
#include "wanlab/common/text.hpp"

using Catch::Matchers::Contains;

TEST_CASE("read_file reads regular files and refuses what could be read forever", "[unit][security]") {
  wanlab::test::TempDir dir("read-file");
  const auto file = dir.path() / "t.csv";
  std::ofstream(file) << "time,rate\n0s,1Mbit\n";
  std::string text;
  CHECK(wanlab::read_file(file, text).empty());
  CHECK(text == "time,rate\n0s,1Mbit\n");

  // A device that never ends (POST /v1/replays {"trace":"/dev/zero"} read until memory ran out).
  std::string zero;
  CHECK_THAT(wanlab::read_file("/dev/zero", zero), Contains("not a regular file"));
  CHECK(zero.empty());

  const auto fifo = dir.path() / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO for reading blocks until a writer comes: give it one that writes nothing.
  const pid_t writer = ::fork();
  if (writer == 0) {
    std::ofstream w(fifo);
    ::_exit(0);
  }
  std::string piped;
  CHECK_THAT(wanlab::read_file(fifo, piped), Contains("not a regular file"));
  int status = 0;
  ::waitpid(writer, &status, 0);

  std::string folder;
  CHECK_THAT(wanlab::read_file(dir.path(), folder), Contains("a folder"));
}
