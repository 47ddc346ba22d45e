// The netlink layer against this kernel: namespaces, links, addresses, routes, HTB,
// pfifo, u32, netem where the kernel has it. Needs root (the main skips otherwise).
// Checks read the kernel's state back (libnl, /proc); nothing external runs.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netlink/route/qdisc/fifo.h>
#include <netlink/route/qdisc/htb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "wanlab/netlink/internal.hpp"
#include "wanlab/netlink/netlink.hpp"
#include "wanlab/netlink/rps.hpp"

using namespace wanlab;
using namespace wanlab::netlink;

namespace {

// Namespace names unique to this process: "wlt<pid><suffix>".
std::string ns_name(const std::string& suffix) {
  return "wlt" + std::to_string(::getpid()) + suffix;
}

// Removes the namespaces it was given, however the test ends.
struct NetnsGuard {
  std::vector<std::string> names;
  Netns create(const std::string& suffix) {
    names.push_back(ns_name(suffix));
    std::optional<Netns> ns = Netns::create(names.back());
    REQUIRE(ns.has_value());
    return std::move(*ns);
  }
  ~NetnsGuard() {
    for (const auto& name : names) {
      try {
        Netns::remove(name);
      } catch (...) {
      }
    }
  }
};

std::uint32_t ip(int a, int b, int c, int d) {
  return (std::uint32_t(a) << 24) | (std::uint32_t(b) << 16) | (std::uint32_t(c) << 8) | std::uint32_t(d);
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// /proc/thread-self/net shows the namespace of the reading thread.
std::string read_proc_net_in(const Netns& ns, const std::string& file) {
  const ScopedNetns inside(ns);
  return read_file("/proc/thread-self/net/" + file);
}

// The mountinfo line whose mount point is `path`, or "".
std::string mountinfo_line(const std::string& path) {
  std::istringstream lines(read_file("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    if (mount_point == path) return line;
  }
  return "";
}

// A plain libnl socket in `ns`, for reading state back independently of Socket.
libnl::SockPtr raw_socket_in(const Netns& ns) {
  const ScopedNetns inside(ns);
  libnl::SockPtr sock(nl_socket_alloc());
  REQUIRE(sock);
  REQUIRE(nl_connect(sock.get(), NETLINK_ROUTE) == 0);
  return sock;
}

libnl::LinkPtr kernel_link(const Netns& ns, const std::string& name) {
  const libnl::SockPtr sock = raw_socket_in(ns);
  rtnl_link* link = nullptr;
  REQUIRE(rtnl_link_get_kernel(sock.get(), 0, name.c_str(), &link) == 0);
  return libnl::LinkPtr(link);
}

libnl::ClassPtr kernel_class(const Netns& ns, int ifindex, Handle classid) {
  const libnl::SockPtr sock = raw_socket_in(ns);
  nl_cache* raw = nullptr;
  REQUIRE(rtnl_class_alloc_cache(sock.get(), ifindex, &raw) == 0);
  const libnl::CachePtr cache(raw);
  return libnl::ClassPtr(rtnl_class_get(cache.get(), ifindex, classid.raw()));
}

libnl::QdiscPtr kernel_qdisc(const Netns& ns, int ifindex, Handle handle) {
  const libnl::SockPtr sock = raw_socket_in(ns);
  nl_cache* raw = nullptr;
  REQUIRE(rtnl_qdisc_alloc_cache(sock.get(), &raw) == 0);
  const libnl::CachePtr cache(raw);
  return libnl::QdiscPtr(rtnl_qdisc_get(cache.get(), ifindex, handle.raw()));
}

// Two namespaces joined by a veth, as a lab's router and one DC gateway:
//   router: to-gw 198.18.0.1/30            gw: br0 198.18.0.2/30 with port "up"
struct RouterAndGateway {
  NetnsGuard guard;
  Netns router = guard.create("r");
  Netns gw = guard.create("g");
  Socket r = Socket::open_in(router);
  Socket g = Socket::open_in(gw);

  RouterAndGateway() {
    r.add_veth("to-gw", "up", gw, 1400);
    g.add_bridge("br0", 1400);
    g.set_master("up", "br0");
    for (const char* name : {"lo", "to-gw"}) r.set_up(name);
    for (const char* name : {"lo", "br0", "up"}) g.set_up(name);
    REQUIRE(r.add_address("to-gw", ip(198, 18, 0, 1), 30));
    REQUIRE(g.add_address("br0", ip(198, 18, 0, 2), 30));
  }
};

}  // namespace

TEST_CASE("namespaces are created, opened, listed and removed as ip netns does", "[netns][netlink]") {
  NetnsGuard guard;
  const std::string name = ns_name("a");
  const Netns here = Netns::current();

  std::optional<Netns> ns = Netns::create(name);
  guard.names.push_back(name);
  REQUIRE(ns.has_value());
  CHECK(ns->name() == name);
  CHECK(ns->inode() != here.inode());
  CHECK(Netns::current().inode() == here.inode());  // the caller stays where it was

  // Where and how iproute2 expects it: a bind mount of an nsfs file under a shared
  // /run/netns.
  struct stat st {};
  CHECK(::stat(("/run/netns/" + name).c_str(), &st) == 0);
  CHECK(st.st_ino == ns->inode());
  CHECK(mountinfo_line("/run/netns/" + name).find(" - nsfs ") != std::string::npos);
  CHECK(mountinfo_line("/run/netns").find("shared:") != std::string::npos);
  CHECK(contains(Netns::list(), name));

  CHECK_FALSE(Netns::create(name).has_value());  // exists already
  std::optional<Netns> opened = Netns::open(name);
  REQUIRE(opened.has_value());
  CHECK(opened->inode() == ns->inode());

  CHECK(Netns::remove(name));
  CHECK_FALSE(Netns::remove(name));
  CHECK_FALSE(Netns::open(name).has_value());
  CHECK_FALSE(contains(Netns::list(), name));
  CHECK(mountinfo_line("/run/netns/" + name).empty());

  CHECK_THROWS_AS(Netns::create("a/b"), Error);
  CHECK_THROWS_AS(Netns::create(".."), Error);
}

TEST_CASE("ScopedNetns moves only the calling thread, and back", "[netns][netlink]") {
  NetnsGuard guard;
  const Netns ns = guard.create("s");
  const ino_t home = Netns::current().inode();
  // A thread started before (new threads inherit their creator's namespace).
  std::promise<void> entered;
  std::promise<ino_t> seen;
  std::thread other([&] {
    entered.get_future().wait();
    seen.set_value(Netns::current().inode());
  });
  {
    const ScopedNetns inside(ns);
    CHECK(Netns::current().inode() == ns.inode());
    entered.set_value();
    CHECK(seen.get_future().get() == home);
  }
  other.join();
  CHECK(Netns::current().inode() == home);
}

TEST_CASE("namespaces can be created from several threads at once", "[netns][netlink]") {
  NetnsGuard guard;
  constexpr int kThreads = 4;
  constexpr int kEach = 5;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) guard.names.push_back(ns_name("m" + std::to_string(t) + "x" + std::to_string(i)));
  }
  const ino_t home = Netns::current().inode();
  std::vector<std::vector<ino_t>> inodes(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kEach; ++i) {
          std::optional<Netns> ns = Netns::create(guard.names[static_cast<std::size_t>(t * kEach + i)]);
          if (!ns) throw std::runtime_error("unexpectedly exists");
          inodes[static_cast<std::size_t>(t)].push_back(ns->inode());
        }
        if (Netns::current().inode() != home) throw std::runtime_error("thread left in another namespace");
      } catch (const std::exception& e) {
        failures[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<ino_t> distinct;
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(failures[static_cast<std::size_t>(t)].empty());
    distinct.insert(inodes[static_cast<std::size_t>(t)].begin(), inodes[static_cast<std::size_t>(t)].end());
  }
  CHECK(distinct.size() == kThreads * kEach);
  CHECK(Netns::current().inode() == home);
  const std::vector<std::string> listed = Netns::list();
  for (const auto& name : guard.names) CHECK(contains(listed, name));
}

TEST_CASE("veth across namespaces, bridge, master, up, alias, addresses, routes", "[netns][netlink]") {
  RouterAndGateway lab;
  Socket& r = lab.r;
  Socket& g = lab.g;
  CHECK(r.ns_name() == lab.router.name());

  // The peer was created directly in the gateway namespace.
  const std::vector<std::string> router_links = r.link_names();
  const std::vector<std::string> gw_links = g.link_names();
  CHECK(contains(router_links, "lo"));
  CHECK(contains(router_links, "to-gw"));
  CHECK_FALSE(contains(router_links, "up"));
  CHECK(contains(gw_links, "up"));
  CHECK(contains(gw_links, "br0"));
  CHECK_FALSE(contains(gw_links, "to-gw"));

  const std::optional<int> br0 = g.ifindex("br0");
  REQUIRE(br0.has_value());
  CHECK(g.ifindex("up").has_value());
  CHECK_FALSE(g.ifindex("to-gw").has_value());
  CHECK_FALSE(r.ifindex("nothing").has_value());

  g.set_alias("up", "uplink to the router");
  const libnl::LinkPtr up = kernel_link(lab.gw, "up");
  CHECK(rtnl_link_get_mtu(up.get()) == 1400);
  CHECK(rtnl_link_get_master(up.get()) == *br0);
  CHECK((rtnl_link_get_flags(up.get()) & IFF_UP) != 0);
  REQUIRE(rtnl_link_get_ifalias(up.get()) != nullptr);
  CHECK(std::string(rtnl_link_get_ifalias(up.get())) == "uplink to the router");
  CHECK(rtnl_link_get_mtu(kernel_link(lab.router, "to-gw").get()) == 1400);
  CHECK(std::string(rtnl_link_get_type(kernel_link(lab.gw, "br0").get())) == "bridge");

  // Addresses: the second add of the same one is an expected outcome, not an error.
  CHECK_FALSE(r.add_address("to-gw", ip(198, 18, 0, 1), 30));
  CHECK(read_proc_net_in(lab.router, "fib_trie").find("198.18.0.1") != std::string::npos);

  // Routes: default via the router in the gateway, a DC prefix via the gateway in the
  // router, and a direct (on-link) one.
  CHECK(g.add_route(0, 0, ip(198, 18, 0, 1), "br0"));
  CHECK_FALSE(g.add_route(0, 0, ip(198, 18, 0, 1), "br0"));
  CHECK(r.add_route(ip(198, 18, 4, 0), 22, ip(198, 18, 0, 2), "to-gw"));
  CHECK(r.add_route(ip(198, 18, 9, 0), 24, 0, "to-gw"));

  // /proc/net/route: Iface Destination Gateway Flags RefCnt Use Metric Mask ..., the
  // addresses as the raw network-order u32 in hex.
  auto hex = [](std::uint32_t host_order) {
    char text[9];
    std::snprintf(text, sizeof(text), "%08X", htonl(host_order));
    return std::string(text);
  };
  const std::string gw_routes = read_proc_net_in(lab.gw, "route");
  CHECK(gw_routes.find("br0\t00000000\t" + hex(ip(198, 18, 0, 1))) != std::string::npos);
  const std::string router_routes = read_proc_net_in(lab.router, "route");
  CHECK(router_routes.find("to-gw\t" + hex(ip(198, 18, 4, 0)) + "\t" + hex(ip(198, 18, 0, 2))) != std::string::npos);
  CHECK(router_routes.find("to-gw\t" + hex(ip(198, 18, 9, 0)) + "\t00000000") != std::string::npos);
}

TEST_CASE("htb, pfifo leaf and u32 filter on a veth; the class changes in place", "[netns][netlink]") {
  RouterAndGateway lab;
  Socket& r = lab.r;
  const int ifindex = *r.ifindex("to-gw");

  HtbClassParams p;
  p.rate = Rate{100'000'000};
  p.ceil = Rate{100'000'000};
  p.burst = Bytes{15'000};
  p.cburst = Bytes{15'000};
  p.quantum = 1514;
  r.add_htb_qdisc("to-gw", Handle{1, 0}, 2);
  r.add_htb_class("to-gw", Handle{1, 0}, Handle{1, 3}, p);
  r.add_pfifo("to-gw", Handle{1, 3}, Handle{13, 0}, 100);
  r.add_u32_src_filter("to-gw", Handle{1, 0}, 1, ip(198, 18, 4, 0), 22, Handle{1, 3});

  {
    const libnl::ClassPtr cls = kernel_class(lab.router, ifindex, Handle{1, 3});
    REQUIRE(cls);
    std::uint64_t rate = 0;
    REQUIRE(rtnl_htb_get_rate64(cls.get(), &rate) == 0);
    CHECK(rate == 12'500'000u);
    CHECK(rtnl_htb_get_quantum(cls.get()) == 1514u);
  }
  CHECK(rtnl_qdisc_fifo_get_limit(kernel_qdisc(lab.router, ifindex, Handle{13, 0}).get()) == 100);

  // In place: the rate changes and the class keeps its leaf qdisc (a delete and re-add
  // would have dropped it).
  p.rate = Rate{200'000'000};
  p.ceil = Rate{300'000'000};
  r.change_htb_class("to-gw", Handle{1, 0}, Handle{1, 3}, p);
  r.change_pfifo("to-gw", Handle{1, 3}, Handle{13, 0}, 250);
  {
    const libnl::ClassPtr cls = kernel_class(lab.router, ifindex, Handle{1, 3});
    REQUIRE(cls);
    std::uint64_t rate = 0;
    std::uint64_t ceil = 0;
    REQUIRE(rtnl_htb_get_rate64(cls.get(), &rate) == 0);
    REQUIRE(rtnl_htb_get_ceil64(cls.get(), &ceil) == 0);
    CHECK(rate == 25'000'000u);
    CHECK(ceil == 37'500'000u);
  }
  const libnl::QdiscPtr leaf = kernel_qdisc(lab.router, ifindex, Handle{13, 0});
  REQUIRE(leaf);
  CHECK(rtnl_tc_get_parent(libnl::as_tc(leaf.get())) == Handle{1, 3}.raw());
  CHECK(rtnl_qdisc_fifo_get_limit(leaf.get()) == 250);

  // A change never creates: a missing class is an error, with the kernel's errno.
  try {
    r.change_htb_class("to-gw", Handle{1, 0}, Handle{1, 9}, p);
    FAIL("change of a missing class succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ENOENT);
    CHECK(std::string(e.what()).find("change htb class 1:9 on to-gw in " + lab.router.name()) == 0);
  }

  // Counters. Send one UDP datagram from a source inside 198.18.4.0/22: the u32 filter
  // must put it in 1:3.
  CHECK(r.qdisc_stats("to-gw", Handle{1, 0}).has_value());
  CHECK(r.qdisc_stats("to-gw", Handle{13, 0}).has_value());
  CHECK_FALSE(r.qdisc_stats("to-gw", Handle{77, 0}).has_value());
  CHECK_FALSE(r.class_stats("to-gw", Handle{1, 9}).has_value());
  REQUIRE(r.class_stats("to-gw", Handle{1, 3}).has_value());
  CHECK(r.class_stats("to-gw", Handle{1, 3})->packets == 0);

  CHECK(r.add_address("to-gw", ip(198, 18, 4, 1), 32));
  {
    const ScopedNetns inside(lab.router);
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    const Fd owner(fd);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(ip(198, 18, 4, 1));
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) == 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(9);
    to.sin_addr.s_addr = htonl(ip(198, 18, 0, 2));
    const char payload[] = "wanlab";
    REQUIRE(::sendto(fd, payload, sizeof(payload), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) ==
            static_cast<ssize_t>(sizeof(payload)));
  }
  // The datagram waits for ARP; poll (bounded) until it has gone through the class.
  std::optional<TcStats> stats;
  for (int i = 0; i < 200; ++i) {
    stats = r.class_stats("to-gw", Handle{1, 3});
    if (stats && stats->packets > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(stats.has_value());
  CHECK(stats->packets == 1);
  CHECK(stats->bytes > 0);
  const std::optional<TcStats> leaf_stats = r.qdisc_stats("to-gw", Handle{13, 0});
  REQUIRE(leaf_stats.has_value());
  CHECK(leaf_stats->packets == 1);
}

TEST_CASE("netem qdisc under an htb class", "[netns][netlink]") {
  const std::vector<std::string> before = Netns::list();
  const ino_t home = Netns::current().inode();
  const bool available = netem_available();
  // The probe leaves nothing behind and does not move the caller.
  CHECK(Netns::list() == before);
  CHECK(Netns::current().inode() == home);
  if (!available) {
    WARN("SKIPPED: netem qdisc not available on this kernel");
    return;
  }

  RouterAndGateway lab;
  Socket& r = lab.r;
  HtbClassParams p;
  p.rate = Rate{100'000'000};
  p.burst = Bytes{15'000};
  p.cburst = Bytes{15'000};
  p.quantum = 1514;
  r.add_htb_qdisc("to-gw", Handle{1, 0}, 3);
  r.add_htb_class("to-gw", Handle{1, 0}, Handle{1, 3}, p);

  NetemParams n;
  n.delay = std::chrono::milliseconds(20);
  n.jitter = std::chrono::milliseconds(2);
  n.loss = Probability{1'000'000};
  n.limit = 500;
  n.order_rate = Rate{10'000'000'000};
  r.add_netem("to-gw", Handle{1, 3}, Handle{13, 0}, n);
  n.delay = std::chrono::milliseconds(40);
  n.limit = 900;
  r.change_netem("to-gw", Handle{1, 3}, Handle{13, 0}, n);
  CHECK_THROWS_AS(r.add_netem("to-gw", Handle{1, 3}, Handle{13, 0}, n), Error);  // exists

  const libnl::QdiscPtr q = kernel_qdisc(lab.router, *r.ifindex("to-gw"), Handle{13, 0});
  REQUIRE(q);
  CHECK(std::string(rtnl_tc_get_kind(libnl::as_tc(q.get()))) == "netem");
  CHECK(rtnl_tc_get_parent(libnl::as_tc(q.get())) == Handle{1, 3}.raw());
  CHECK(r.qdisc_stats("to-gw", Handle{13, 0}).has_value());
}

TEST_CASE("errors name the operation, the object and the namespace", "[netns][netlink]") {
  RouterAndGateway lab;
  const std::string where = " in " + lab.gw.name();

  try {
    lab.g.set_master("missing0", "br0");
    FAIL("set_master on a missing interface succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ENODEV);
    CHECK(std::string(e.what()).find("set master missing0 to br0" + where + ": No such device") == 0);
  }
  try {
    lab.g.set_master("up", "missing-br");
    FAIL("set_master to a missing bridge succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ENODEV);
    CHECK(std::string(e.what()).find("set master up to missing-br" + where) == 0);
  }
  try {
    lab.g.add_bridge("br0", 1500);
    FAIL("adding an existing bridge succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == EEXIST);
    CHECK(std::string(e.what()).find("add bridge br0" + where + ": File exists") == 0);
  }
  try {
    lab.g.add_htb_qdisc("missing0", Handle{1, 0}, 1);
    FAIL("htb on a missing interface succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ENODEV);
    CHECK(std::string(e.what()).find("add htb qdisc 1: on missing0" + where) == 0);
  }
  CHECK_THROWS_AS(lab.g.set_up("a-name-longer-than-15"), Error);
}

TEST_CASE("sysctls are written inside the namespace only", "[netns][netlink]") {
  NetnsGuard guard;
  const Netns ns = guard.create("y");
  const std::string host_value = read_file("/proc/sys/net/ipv4/ip_forward");
  write_sysctl(ns, "net/ipv4/ip_forward", "1");
  {
    const ScopedNetns inside(ns);
    CHECK(read_file("/proc/sys/net/ipv4/ip_forward") == "1\n");
  }
  CHECK(read_file("/proc/sys/net/ipv4/ip_forward") == host_value);
  CHECK_THROWS_AS(write_sysctl(ns, "net/ipv4/no_such_key", "1"), Error);
}

TEST_CASE("receive steering is written in the interface's own namespace", "[netns][netlink]") {
  RouterAndGateway lab;
  const auto off = [](const std::string& mask) { return mask.find_first_not_of("0,") == std::string::npos; };
  // "up" is the gateway's end of the veth; the test's own sysfs does not show it.
  CHECK_FALSE(std::filesystem::exists("/sys/class/net/up"));
  CHECK(off(rps_cpus(lab.gw, "up")));  // off by default
  set_rps_cpus(lab.gw, "up", "1");
  const std::string after = rps_cpus(lab.gw, "up");
  CHECK(after.back() == '1');
  CHECK(off(after.substr(0, after.size() - 1)));
  CHECK(off(rps_cpus(lab.router, "to-gw")));  // the other end untouched
  // Errors name the interface and the namespace.
  try {
    set_rps_cpus(lab.gw, "nothing", "1");
    FAIL("no error for a missing interface");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("nothing") && Catch::Contains(lab.gw.name()));
  }
  CHECK_THROWS_AS(set_rps_cpus(lab.gw, "../up", "1"), Error);
}

TEST_CASE("sockets move; open() uses the caller's namespace", "[netns][netlink]") {
  NetnsGuard guard;
  const Netns ns = guard.create("o");
  Socket a = Socket::open_in(ns);
  Socket b = std::move(a);
  CHECK(b.ns_name() == ns.name());
  CHECK(b.link_names() == std::vector<std::string>{"lo"});
  {
    const ScopedNetns inside(ns);
    Socket c = Socket::open();
    CHECK(c.ns_name().empty());
    CHECK(c.ifindex("lo").has_value());
    b = std::move(c);
  }
  CHECK(b.link_names() == std::vector<std::string>{"lo"});  // still bound to ns
}

TEST_CASE("address delete, and a swarm node's swap: plan address primary, Docker's secondary", "[netns][netlink]") {
  RouterAndGateway lab;
  Socket& g = lab.g;
  auto addresses = [&] {
    std::vector<std::pair<std::uint32_t, int>> out;
    for (const auto& a : g.ipv4_addresses())
      if (a.ifname == "br0") out.emplace_back(a.address, a.prefix_len);
    return out;
  };
  // Docker's address in the upper /23, then what node-setup --swarm does (as ip addr del/add).
  REQUIRE(g.add_address("br0", ip(198, 18, 2, 5), 23));
  CHECK(g.delete_address("br0", ip(198, 18, 2, 5), 23));
  CHECK_FALSE(g.delete_address("br0", ip(198, 18, 2, 5), 23));  // gone: not an error
  REQUIRE(g.add_address("br0", ip(198, 18, 0, 6), 22));
  REQUIRE(g.add_address("br0", ip(198, 18, 2, 5), 22));
  const auto now = addresses();
  // The kernel lists a subnet's primary before its secondaries.
  const auto plan = std::find(now.begin(), now.end(), std::pair<std::uint32_t, int>{ip(198, 18, 0, 6), 22});
  const auto docker = std::find(now.begin(), now.end(), std::pair<std::uint32_t, int>{ip(198, 18, 2, 5), 22});
  REQUIRE(plan != now.end());
  REQUIRE(docker != now.end());
  CHECK(plan < docker);
  CHECK(std::find(now.begin(), now.end(), std::pair<std::uint32_t, int>{ip(198, 18, 2, 5), 23}) == now.end());
  CHECK(read_proc_net_in(lab.gw, "fib_trie").find("198.18.2.5") != std::string::npos);
  // An unknown interface is named in the error.
  CHECK_THROWS_WITH(g.delete_address("nothing0", ip(198, 18, 2, 5), 22), Catch::Contains("nothing0"));
}
