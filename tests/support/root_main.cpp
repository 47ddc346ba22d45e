// Main for the privileged tiers: runs only as root with CAP_NET_ADMIN and CAP_SYS_ADMIN,
// otherwise prints why and exits 77, which ctest reports as SKIPPED.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

namespace {
bool has_cap(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}
}  // namespace

int main(int argc, char* argv[]) {
  if (!has_cap(CAP_NET_ADMIN) || !has_cap(CAP_SYS_ADMIN)) {
    std::printf("SKIPPED: the netns tier needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create namespaces\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
