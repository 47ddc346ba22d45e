// PacketNet on ns-3 3.37 (packet_net.hpp). Compiled as C++17: see the header.
#include "wanlab/ns3ref/packet_net.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <ns3/core-module.h>
#include <ns3/internet-module.h>
#include <ns3/network-module.h>
#include <ns3/point-to-point-module.h>
#include <ns3/traffic-control-module.h>

namespace wanlab::ns3ref {
namespace {
// ns-3's point-to-point frames carry a 2-byte PPP header where the lab's carry a 14-byte
// Ethernet header: the devices run at rate x 1502/1514 so that a full segment takes the
// lab's time on the link, and the byte counts add the 12 bytes back.
constexpr double kFrameRatio = 1502.0 / 1514.0;
constexpr std::uint64_t kEthernetExtra = 12;

// ns-3 3.37's CUBIC with Linux's rule for a sender that does not use its window
// (tcp_is_cwnd_limited; cubictcp_cong_avoid returns when it is false): the window grows in
// slow start only while at least half of it is in flight, and in congestion avoidance only
// while it is full. ns-3 3.37 grows it on every ACK, so a connection that sends 1 MB at a
// time behind a 3 MiB buffer ends with a window of 23,000 segments and paces at that
// (three-dc-7b at x10 rates), where Linux stops at twice what it had in flight.
// In flight at the ACK is ns-3's count plus what the ACK covers (Linux keeps the most in
// flight over the round).
class TcpCubicLinux : public ns3::TcpCubic {
 public:
  static ns3::TypeId GetTypeId() {
    static ns3::TypeId tid = ns3::TypeId("wanlab::ns3ref::TcpCubicLinux")
                                 .SetParent<ns3::TcpCubic>()
                                 .SetGroupName("Internet")
                                 .AddConstructor<TcpCubicLinux>();
    return tid;
  }
  std::string GetName() const override { return "TcpCubicLinux"; }
  void IncreaseWindow(ns3::Ptr<ns3::TcpSocketState> tcb, std::uint32_t segments_acked) override {
    const std::uint64_t cwnd = tcb->m_cWnd.Get();
    const std::uint64_t used =
        std::uint64_t{tcb->m_bytesInFlight.Get()} + std::uint64_t{segments_acked} * tcb->m_segmentSize;
    const bool limited = cwnd < tcb->m_ssThresh.Get() ? 2 * used >= cwnd : used + tcb->m_segmentSize >= cwnd;
    if (limited) ns3::TcpCubic::IncreaseWindow(tcb, segments_acked);
  }
  ns3::Ptr<ns3::TcpCongestionOps> Fork() override { return ns3::CopyObject<TcpCubicLinux>(this); }
};

// Linux's retransmission timeout: srtt + max(4 x mdev, tcp_rto_min) (tcp_set_rto, where
// rttvar_us is at least tcp_rto_min, 200 ms), so a timer is at least 200 ms past the
// smoothed RTT. ns-3 3.37's is max(MinRto, srtt + 4 x var): 200 ms in all, less than the RTT
// of a long path whose queue fills, so connections behind a filling queue timed out with
// nothing lost and restarted from one segment (three-dc-7b fair-k4 at scale 0.05 with a
// queue too deep to overflow: 325 timeouts, 0 drops; bench/results/2026-12-04-ns3-loss.md).
// The true variation is kept for the filter; the one ns-3 reads for its timer is floored
// at 200 ms / 4.
class RttLinux : public ns3::RttMeanDeviation {
 public:
  static ns3::TypeId GetTypeId() {
    static ns3::TypeId tid = ns3::TypeId("wanlab::ns3ref::RttLinux")
                                 .SetParent<ns3::RttMeanDeviation>()
                                 .SetGroupName("Internet")
                                 .AddConstructor<RttLinux>();
    return tid;
  }
  ns3::TypeId GetInstanceTypeId() const override { return GetTypeId(); }
  void Measurement(ns3::Time measure) override {
    m_estimatedVariation = variation_;
    ns3::RttMeanDeviation::Measurement(measure);
    variation_ = m_estimatedVariation;
    const auto floor = ns3::MilliSeconds(kRtoMinMs) / 4;
    if (m_estimatedVariation < floor) m_estimatedVariation = floor;
  }
  ns3::Ptr<ns3::RttEstimator> Copy() const override { return ns3::CopyObject<RttLinux>(this); }
  void Reset() override {
    ns3::RttMeanDeviation::Reset();
    variation_ = m_estimatedVariation;
  }
  static constexpr int kRtoMinMs = 200;

 private:
  ns3::Time variation_{0};
};
}  // namespace

struct PacketNet::Impl {
  struct Conn {
    ns3::Ptr<ns3::Socket> tx;
    bool connected = false;
    std::uint32_t last_seq = 1;  // data starts at sequence 1
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
    ConnEnd end;
  };
  PacketNet* owner = nullptr;
  ns3::NodeContainer routers, hosts;
  std::vector<ns3::Ipv4Address> host_addr;
  std::vector<std::uint16_t> next_port;
  std::vector<LinkCount> counts;
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<ns3::Ptr<ns3::Socket>> listeners;
  bool counting = false;
};

PacketNet::PacketNet(std::size_t dcs, const std::vector<NetLink>& links, const NetTcp& tcp, double access_rate_bps,
                     std::uint32_t seed)
    : impl_(std::make_unique<Impl>()) {
  using namespace ns3;
  auto& m = *impl_;
  m.owner = this;
  Simulator::Destroy();  // whatever an earlier run left
  Ipv4AddressGenerator::Reset();
  RngSeedManager::SetSeed(seed == 0 ? 1 : seed);
  RngSeedManager::SetRun(1);
  Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpCubicLinux::GetTypeId()));
  Config::SetDefault("ns3::TcpL4Protocol::RecoveryType", TypeIdValue(TcpPrrRecovery::GetTypeId()));
  Config::SetDefault("ns3::TcpL4Protocol::RttEstimatorType", TypeIdValue(RttLinux::GetTypeId()));
  Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(true));
  Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(tcp.pacing));
  Config::SetDefault("ns3::TcpSocketState::PacingSsRatio", UintegerValue(200));
  Config::SetDefault("ns3::TcpSocketState::PacingCaRatio", UintegerValue(120));
  Config::SetDefault("ns3::TcpSocketState::PaceInitialWindow", BooleanValue(tcp.pacing));
  Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
  Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
  Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
  Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(RttLinux::kRtoMinMs)));
  Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(1)));
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
  Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
  Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
  Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(40)));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(tcp.rcv_buf));
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(tcp.snd_buf));

  m.routers.Create(static_cast<std::uint32_t>(dcs));
  m.hosts.Create(static_cast<std::uint32_t>(dcs));
  InternetStackHelper stack;
  stack.Install(m.routers);
  stack.Install(m.hosts);
  Ipv4AddressHelper addr;
  addr.SetBase("10.0.0.0", "255.255.255.252");
  m.host_addr.resize(dcs);
  m.next_port.assign(dcs, 10000);
  PointToPointHelper access;
  access.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<std::uint64_t>(access_rate_bps))));
  access.SetChannelAttribute("Delay", TimeValue(MicroSeconds(1)));
  access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("100000p")));
  for (std::size_t d = 0; d < dcs; ++d) {
    auto devs = access.Install(m.hosts.Get(static_cast<std::uint32_t>(d)), m.routers.Get(static_cast<std::uint32_t>(d)));
    auto ifs = addr.Assign(devs);
    addr.NewNetwork();
    m.host_addr[d] = ifs.GetAddress(0);
  }
  std::vector<Ptr<PointToPointNetDevice>> dev(links.size());
  m.counts.assign(links.size(), LinkCount{});
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (dev[i]) continue;
    const auto& l = links[i];
    std::size_t j = links.size();
    for (std::size_t x = 0; x < links.size(); ++x)
      if (links[x].src == l.dst && links[x].dst == l.src) j = x;
    if (j == links.size()) throw std::invalid_argument("packet network: a WAN link without its reverse");
    if (links[j].delay_ns != l.delay_ns) throw std::invalid_argument("packet network: a link pair with two delays");
    PointToPointHelper wan;
    wan.SetChannelAttribute("Delay", TimeValue(NanoSeconds(l.delay_ns)));
    // No flow control between the traffic-control layer and the device: with it, a full
    // device queue stops the device's transmit queue, and ns-3 3.37's traffic-control layer
    // (no queue disc here) then drops each packet it is handed without the queue seeing it,
    // so the queue's Drop trace never fires. Without it the drop-tail queue drops (and
    // counts) them itself, at the same limit.
    wan.DisableFlowControl();
    auto devs = wan.Install(m.routers.Get(static_cast<std::uint32_t>(l.src)), m.routers.Get(static_cast<std::uint32_t>(l.dst)));
    addr.Assign(devs);
    addr.NewNetwork();
    dev[i] = DynamicCast<PointToPointNetDevice>(devs.Get(0));
    dev[j] = DynamicCast<PointToPointNetDevice>(devs.Get(1));
    // The only queue of each direction: no queue discipline in front of the device (without
    // flow control ns-3 installs none; removed should a later ns-3 do so).
    TrafficControlHelper tch;
    for (std::uint32_t d = 0; d < devs.GetN(); ++d) {
      auto tc = devs.Get(d)->GetNode()->GetObject<TrafficControlLayer>();
      if (tc && tc->GetRootQueueDiscOnDevice(devs.Get(d))) tch.Uninstall(devs.Get(d));
    }
  }
  for (std::size_t i = 0; i < links.size(); ++i) {
    const auto& l = links[i];
    dev[i]->SetDataRate(DataRate(static_cast<std::uint64_t>(std::llround(l.rate_bps * kFrameRatio))));
    auto q = dev[i]->GetQueue();
    if (l.queue_bytes > 0)
      q->SetMaxSize(QueueSize(QueueSizeUnit::BYTES, static_cast<std::uint32_t>(l.queue_bytes)));
    else
      q->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, static_cast<std::uint32_t>(l.queue_packets)));
    Impl* im = impl_.get();
    q->TraceConnectWithoutContext("Drop", Callback<void, Ptr<const Packet>>([im, i](Ptr<const Packet> p) {
                                    ++im->counts[i].drops;
                                    im->counts[i].dropped_bytes += p->GetSize() + kEthernetExtra;
                                  }));
    dev[i]->TraceConnectWithoutContext("PhyTxEnd", Callback<void, Ptr<const Packet>>([im, i](Ptr<const Packet> p) {
                                         if (!im->counting) return;
                                         ++im->counts[i].packets;
                                         im->counts[i].wire_bytes += p->GetSize() + kEthernetExtra;
                                       }));
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();
}

PacketNet::~PacketNet() {
  impl_->listeners.clear();
  impl_->conns.clear();
  ns3::Simulator::Destroy();
}

std::size_t PacketNet::add_connection(std::size_t src, std::size_t dst, double max_pacing_bps) {
  using namespace ns3;
  auto& m = *impl_;
  if (m.next_port.at(dst) == 65535)
    throw std::invalid_argument("the reference lacks more than 55,535 connections into one DC");
  const auto port = m.next_port[dst]++;
  const auto id = m.conns.size();
  m.conns.push_back(std::make_unique<Impl::Conn>());
  Config::SetDefault("ns3::TcpSocketState::MaxPacingRate",
                     DataRateValue(DataRate(static_cast<std::uint64_t>(std::llround(max_pacing_bps)))));
  Impl* im = impl_.get();
  auto listener = Socket::CreateSocket(m.hosts.Get(static_cast<std::uint32_t>(dst)), TcpSocketFactory::GetTypeId());
  listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
  listener->Listen();
  listener->SetAcceptCallback(
      MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
      Callback<void, Ptr<Socket>, const Address&>([im, id](Ptr<Socket> s, const Address&) {
        s->SetRecvCallback(Callback<void, Ptr<Socket>>([im, id](Ptr<Socket> rs) {
          auto& c = *im->conns[id];
          while (auto p = rs->Recv()) c.received += p->GetSize();
          if (im->owner->on_received) im->owner->on_received(id, c.received);
        }));
      }));
  m.listeners.push_back(listener);
  auto tx = Socket::CreateSocket(m.hosts.Get(static_cast<std::uint32_t>(src)), TcpSocketFactory::GetTypeId());
  tx->Bind();
  tx->SetConnectCallback(Callback<void, Ptr<Socket>>([im, id](Ptr<Socket>) { im->conns[id]->connected = true; }),
                         Callback<void, Ptr<Socket>>([id](Ptr<Socket>) {
                           throw std::runtime_error("packet network: connection " + std::to_string(id) + " refused");
                         }));
  tx->SetSendCallback(Callback<void, Ptr<Socket>, std::uint32_t>([im, id](Ptr<Socket>, std::uint32_t) {
    if (im->owner->on_writable) im->owner->on_writable(id);
  }));
  tx->TraceConnectWithoutContext("HighestSequence", Callback<void, SequenceNumber32, SequenceNumber32>(
                                                        [im, id](SequenceNumber32, SequenceNumber32 v) {
                                                          auto& c = *im->conns[id];
                                                          const std::uint32_t d = v.GetValue() - c.last_seq;
                                                          if (d == 0 || d >= 0x80000000u) return;
                                                          c.last_seq = v.GetValue();
                                                          c.sent += d;
                                                          if (im->owner->on_sent) im->owner->on_sent(id, c.sent);
                                                        }));
  tx->TraceConnectWithoutContext("CongestionWindow", Callback<void, std::uint32_t, std::uint32_t>(
                                                         [im, id](std::uint32_t, std::uint32_t v) { im->conns[id]->end.cwnd_bytes = v; }));
  tx->TraceConnectWithoutContext("SlowStartThreshold",
                                 Callback<void, std::uint32_t, std::uint32_t>(
                                     [im, id](std::uint32_t, std::uint32_t v) { im->conns[id]->end.ssthresh_bytes = v; }));
  tx->TraceConnectWithoutContext("CongState", Callback<void, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t>(
                                                 [im, id](TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t v) {
                                                   auto& e = im->conns[id]->end;
                                                   if (v == TcpSocketState::CA_RECOVERY) ++e.recoveries;
                                                   if (v == TcpSocketState::CA_LOSS) ++e.timeouts;
                                                 }));
  tx->TraceConnectWithoutContext("RTO", Callback<void, Time, Time>([im, id](Time, Time v) {
                                   im->conns[id]->end.rto_ns = static_cast<double>(v.GetNanoSeconds());
                                 }));
  tx->TraceConnectWithoutContext("RTT", Callback<void, Time, Time>([im, id](Time, Time v) {
                                   auto& e = im->conns[id]->end;
                                   const double x = static_cast<double>(v.GetNanoSeconds());
                                   e.srtt_ns = e.srtt_ns == 0 ? x : 0.875 * e.srtt_ns + 0.125 * x;
                                 }));
  // Connected once the simulation runs: ns-3 sets up its nodes' layers at time 0 first.
  const auto to = InetSocketAddress(m.host_addr.at(dst), port);
  Simulator::Schedule(Seconds(0), [tx, to] { tx->Connect(to); });
  m.conns[id]->tx = tx;
  m.conns[id]->end.ssthresh_bytes = std::numeric_limits<double>::infinity();
  return id;
}

bool PacketNet::connected(std::size_t conn) const { return impl_->conns.at(conn)->connected; }

std::uint64_t PacketNet::write(std::size_t conn, std::uint64_t bytes) {
  auto& c = *impl_->conns.at(conn);
  const std::uint32_t avail = c.tx->GetTxAvailable();
  if (avail == 0 || bytes == 0) return 0;
  const auto n = static_cast<std::uint32_t>(bytes < avail ? bytes : avail);
  const int took = c.tx->Send(ns3::Create<ns3::Packet>(n));
  return took > 0 ? static_cast<std::uint64_t>(took) : 0;
}

void PacketNet::schedule(std::int64_t delay_ns, std::function<void()> f) {
  ns3::Simulator::Schedule(ns3::NanoSeconds(delay_ns < 0 ? 0 : delay_ns), [f = std::move(f)] { f(); });
}

std::int64_t PacketNet::now_ns() const { return ns3::Simulator::Now().GetNanoSeconds(); }
void PacketNet::count_from_now() { impl_->counting = true; }
void PacketNet::run() { ns3::Simulator::Run(); }
void PacketNet::stop() { ns3::Simulator::Stop(); }
std::uint64_t PacketNet::events() const { return ns3::Simulator::GetEventCount(); }
LinkCount PacketNet::link(std::size_t i) const { return impl_->counts.at(i); }
ConnEnd PacketNet::conn_end(std::size_t conn) const { return impl_->conns.at(conn)->end; }

}  // namespace wanlab::ns3ref
