#pragma once
// Golden files: expected outputs kept under tests/unit/golden/.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace wanlab::test {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Compares with tests/unit/golden/NAME; WANLAB_UPDATE_GOLDEN=1 rewrites the file.
inline void check_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(WANLAB_SOURCE_DIR) + "/tests/unit/golden/" + name;
  if (std::getenv("WANLAB_UPDATE_GOLDEN")) std::ofstream(path) << text;
  CHECK(read_text(path) == text);
}

}  // namespace wanlab::test
