#include "agent.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "prefill.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/gpu/gpu_compute.hpp"
#include "wanlab/common/ring.hpp"

namespace wanlab::agent {
namespace {

nlohmann::json msg(const std::string& type, const std::string& run) { return {{"v", 1}, {"type", type}, {"run", run}}; }

// Real GEMMs of the stage's shapes on a GPU; the optimizer step stays modeled (its cost is
// memory-bound elementwise work the GEMM model does not cover).
class CudaCompute final : public Compute {
 public:
  CudaCompute(int device, double effective_flops, std::mutex& m, std::condition_variable& cv)
      : gpu_(gpu::GpuCompute::open(device)), modeled_(effective_flops, m, cv) {}
  std::optional<GpuTimes> run(const program::Op& op, const program::StageShape& shape, const std::atomic<bool>& abort,
                              Clock::time_point ready) override {
    if (op.kind == program::OpKind::optimizer) return modeled_.run(op, shape, abort, ready);
    // Real kernels start when launched and end when the GPU is done with them.
    const auto start = Clock::now();
    // A zero-bubble half backward (input or weight gradients) runs one pass of the forward
    // GEMMs, as many FLOPs as half the full backward's two.
    const bool half = op.kind == program::OpKind::backward && op.part != program::BackwardPart::full;
    gpu_->run(shape, half ? program::OpKind::forward : op.kind);
    if (abort.load()) return std::nullopt;
    return GpuTimes{start, Clock::now()};
  }

 private:
  std::unique_ptr<gpu::GpuCompute> gpu_;
  ModeledCompute modeled_;
};

}  // namespace

struct Agent::Run {
  std::string id;
  nlohmann::json assignment;
  std::unique_ptr<DataPlane> data = std::make_unique<DataPlane>();
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::thread> threads;
  std::atomic<bool> abort{false};
  std::mutex wait_mutex;  // modeled compute waits here, so an abort wakes every worker
  std::condition_variable wait_cv;
  std::map<int, PeerAddress> peers;
  std::vector<OutgoingPair> outgoing;

  // Windowed policies: sends waiting for their grant, and grants that came first (the
  // controller grants a TP group's messages together). Key: (worker, peer, iteration, tag).
  using WindowKey = std::tuple<int, int, int, std::uint32_t>;
  bool windows = false;
  std::mutex windows_mutex;
  std::map<WindowKey, std::function<void()>> waiting_grant;
  std::set<WindowKey> early_grants;
  // Bytes of each WAN message local workers receive: (src, dst, tag) -> bytes, so the
  // agent can say when one has fully arrived.
  std::map<std::tuple<int, int, std::uint32_t>, std::uint64_t> wan_recv_bytes;

  // BubbleTea: prefill on this node's GPUs (by slot), its traffic, the load generator.
  std::map<int, std::unique_ptr<GpuShare>> shares;
  std::map<std::pair<int, int>, std::unique_ptr<TpSync>> tp_syncs;  // (stage, dp rank): its TP ranks here
  std::map<int, std::unique_ptr<PrefillRunner>> runners;
  std::map<int, Worker*> worker_of_slot;
  std::unique_ptr<SideChannel> side;
  std::mutex prefill_mutex;
  std::map<int, int> job_slot;   // placed request -> slot
  std::set<int> early_prompts;   // prompts that came before their placement
  std::vector<std::pair<double, int>> arrivals;  // load generator: (seconds, tokens)
  double deadline_s = 0;
  bool decode = false;
  std::thread loadgen;

  void stop_prefill() {
    for (auto& [slot, r] : runners) r->stop();
    if (loadgen.joinable()) loadgen.join();
    if (side) side->stop();
  }

  void stop() {
    abort = true;
    wait_cv.notify_all();
    data->abort();
    for (auto& [slot, sh] : shares) sh->notify();
    for (auto& t : threads)
      if (t.joinable()) t.join();
    threads.clear();
    stop_prefill();
  }
  ~Run() { stop(); }
};

Agent::Agent(AgentOptions options, Send send) : options_(std::move(options)), send_(std::move(send)) {
  thread_ = std::thread([this] { loop(); });
}

Agent::~Agent() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  run_.reset();
}

nlohmann::json Agent::hello() const {
  nlohmann::json h = {{"v", 1},
                      {"type", "hello"},
                      {"node", options_.node},
                      {"pid", static_cast<int>(::getpid())},
                      {"agent_version", std::string(version())},
                      {"gpus", options_.gpus}};
  if (!options_.gpu_reason.empty()) h["gpu_reason"] = options_.gpu_reason;
  return h;
}

void Agent::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void Agent::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_ && tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("agent {}: {}", options_.node, e.what());
    }
  }
}

void Agent::on_message(const nlohmann::json& m) {
  const auto type = m.value("type", std::string{});
  // A grant is on the critical path of a WAN transfer: act on it here, on the channel's
  // thread, rather than behind whatever the agent's own thread is doing.
  if (type == "grant") {
    // Under mutex_, so the run cannot be torn down while its send starts.
    std::lock_guard lock(mutex_);
    if (!run_ || run_->id != m.value("run", std::string{})) return;
    std::function<void()> go;
    {
      const Run::WindowKey key{m.at("worker").get<int>(), m.at("peer").get<int>(), m.at("iteration").get<int>(),
                               m.at("tag").get<std::uint32_t>()};
      std::lock_guard wlock(run_->windows_mutex);
      const auto it = run_->waiting_grant.find(key);
      if (it == run_->waiting_grant.end()) {
        run_->early_grants.insert(key);
        return;
      }
      go = std::move(it->second);
      run_->waiting_grant.erase(it);
    }
    try {
      go();
    } catch (const std::exception& e) {
      spdlog::error("agent {}: run {}: {}", options_.node, run_->id, e.what());
    }
    return;
  }
  // Placements and prompt orders are on a request's critical path too.
  if (type == "prefill" || type == "prompt") {
    std::lock_guard lock(mutex_);
    if (!run_ || run_->id != m.value("run", std::string{})) return;
    try {
      on_prefill_message(*run_, m);
    } catch (const std::exception& e) {
      spdlog::error("agent {}: run {}: {}: {}", options_.node, run_->id, type, e.what());
    }
    return;
  }
  // An abort must not wait behind a long setup step: stop the data plane now, clean up in order.
  if (type == "abort") {
    std::lock_guard lock(mutex_);
    if (run_) {
      run_->abort = true;
      run_->wait_cv.notify_all();
      run_->data->abort();
    }
  }
  post([this, m] { handle(m); });
}

void Agent::on_disconnected(const std::string& reason) {
  post([this, reason] {
    if (!run_) return;
    abort_run(fmt::format("lost the controller: {}", reason));
    // The controller fails a run whose agent went away, and a new controller does not take
    // a run over: an agent started for one run has nothing left to do.
    if (options_.once && options_.on_finished) options_.on_finished(false);
  });
}

void Agent::fail(const std::string& run, const std::string& message) {
  spdlog::error("agent {}: run {}: {}", options_.node, run, message);
  auto f = msg("failed", run);
  f["message"] = message;
  send_(f);
}

void Agent::abort_run(const std::string& why) {
  if (!run_) return;
  spdlog::warn("agent {}: run {} aborted: {}", options_.node, run_->id, why);
  std::unique_ptr<Run> r;
  {
    std::lock_guard lock(mutex_);
    r = std::move(run_);
  }
  r->stop();
}

int Agent::slot_of_worker(Run& r, const Worker* w) {
  for (const auto& [slot, worker] : r.worker_of_slot)
    if (worker == w) return slot;
  return -1;
}

void Agent::setup_prefill(Run& r, const nlohmann::json& p, bool cuda) {
  const auto id = r.id;
  Run* run = &r;
  for (const auto& g : p.at("gpus")) {
    const int slot = g.at("slot").get<int>();
    auto share = std::make_unique<GpuShare>();
    if (g.at("worker").get<int>() < 0) share->set_dedicated();
    const int device = cuda ? slot % std::max(1, options_.gpus) : -1;
    const int worker = g.at("worker").get<int>();
    auto done = [this, run, id, worker, slot](const PrefillJob& job, const PrefillOutcome& out) {
      auto d = msg("prefill_done", id);
      d["id"] = job.id;
      d["complete"] = out.complete;
      d["started_ns"] = out.started_ns;
      d["finished_ns"] = out.finished_ns;
      d["preemptions"] = out.preemptions;
      send_(d);
      if (const auto it = run->worker_of_slot.find(slot); worker >= 0 && it != run->worker_of_slot.end())
        for (const auto& span : out.spans) it->second->add_gpu_span(span);
      if (out.complete && run->side)
        run->side->send(job.decode_address, job.decode_port, SideChannel::Kind::kv, job.id, job.kv_bytes);
    };
    r.runners[slot] = std::make_unique<PrefillRunner>(*share, g.at("effective_flops").get<double>(), device, done);
    r.shares[slot] = std::move(share);
  }
  r.decode = p.value("decode", false);
  if (p.contains("loadgen")) {
    for (const auto& a : p.at("loadgen").at("arrivals")) r.arrivals.emplace_back(a.at(0).get<double>(), a.at(1).get<int>());
  }
  r.side = std::make_unique<SideChannel>();
  r.side->listen(p.at("port").get<std::uint16_t>(), [this, run, id](SideChannel::Kind kind, int req, std::uint64_t) {
    if (kind == SideChannel::Kind::kv) {
      auto k = msg("kv_received", id);
      k["id"] = req;
      k["at_unix_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
      send_(k);
      return;
    }
    std::lock_guard lock(run->prefill_mutex);
    if (const auto it = run->job_slot.find(req); it != run->job_slot.end()) {
      run->runners.at(it->second)->prompt_arrived(req);
      run->job_slot.erase(it);
    } else {
      run->early_prompts.insert(req);
    }
  });
}

void Agent::start_prefill(Run& r, std::chrono::steady_clock::time_point start) {
  for (auto& [slot, runner] : r.runners) runner->start(start);
  if (r.arrivals.empty()) return;
  Run* run = &r;
  const auto id = r.id;
  r.loadgen = std::thread([this, run, id, start] {
    for (std::size_t i = 0; i < run->arrivals.size(); ++i) {
      const auto [at_s, tokens] = run->arrivals[i];
      const auto when = start + std::chrono::nanoseconds(static_cast<std::int64_t>(at_s * 1e9));
      {
        std::unique_lock lock(run->wait_mutex);
        if (run->wait_cv.wait_until(lock, when, [&] { return run->abort.load(); })) return;
      }
      auto q = msg("prefill_request", id);
      q["id"] = static_cast<int>(i);
      q["at_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
      q["tokens"] = tokens;
      send_(q);
    }
  });
}

void Agent::on_prefill_message(Run& r, const nlohmann::json& m) {
  const auto type = m.at("type").get<std::string>();
  if (type == "prompt") {
    if (!r.side) throw std::runtime_error("a prompt order, but this node has no prefill role");
    r.side->send(m.at("address").get<std::string>(), m.at("port").get<std::uint16_t>(), SideChannel::Kind::prompt,
                 m.at("id").get<int>(), m.at("bytes").get<std::uint64_t>());
    return;
  }
  PrefillJob job;
  job.id = m.at("id").get<int>();
  const int slot = m.at("slot").get<int>();
  job.start_ns = m.at("start_ns").get<std::int64_t>();
  job.tokens = m.at("tokens").get<int>();
  job.layers = m.at("layers").get<int>();
  job.flops_per_layer = m.at("flops_per_layer").get<double>();
  job.layer = program::stage_shape_from_json(m.at("layer_shape"));
  job.kv_bytes = m.at("kv_bytes").get<std::uint64_t>();
  job.decode_address = m.at("decode").at("address").get<std::string>();
  job.decode_port = m.at("decode").at("port").get<std::uint16_t>();
  const auto runner = r.runners.find(slot);
  if (runner == r.runners.end()) throw std::runtime_error(fmt::format("a prefill for GPU {}, which runs none", slot));
  bool prompt_here = false;
  {
    std::lock_guard lock(r.prefill_mutex);
    prompt_here = r.early_prompts.erase(job.id) > 0;
    if (!prompt_here) r.job_slot[job.id] = slot;
  }
  const int id = job.id;
  runner->second->add(std::move(job));
  if (prompt_here) runner->second->prompt_arrived(id);
}

// What an assignment says about this node: its workers' programs, the pairs they send
// and receive on, and where every peer is.
struct Agent::Layout {
  std::string my_dc;
  int connections = 1;                        // per WAN peer
  std::vector<program::WorkerProgram> programs;
  std::set<int> local;                        // this node's workers
  std::set<std::pair<int, int>> sends, recvs;  // (src, dst) pairs of this node's workers
  std::map<int, int> slot_of;                  // local worker -> its GPU on this node
  const std::map<int, PeerAddress>* peers = nullptr;

  // Connections a pair with `peer` uses: one inside the DC, k across the WAN.
  int stripes_to(int peer) const {
    const auto it = peers->find(peer);
    if (it == peers->end()) throw std::runtime_error(fmt::format("assignment names no address for worker {}", peer));
    return it->second.dc == my_dc ? 1 : connections;
  }
  bool remote_dc(int worker) const {
    const auto it = peers->find(worker);
    return !local.count(worker) && it != peers->end() && it->second.dc != my_dc;
  }
};

namespace {

// The run's TCP settings as the node's own (the agent runs in its node's namespace).
void set_node_tcp(const nlohmann::json& a) {
  // Written only when it differs: in a container /proc/sys is read-only, and the container
  // sets it.
  if (a.contains("tcp_slow_start_after_idle")) {
    const char* path = "/proc/sys/net/ipv4/tcp_slow_start_after_idle";
    const std::string want = a.at("tcp_slow_start_after_idle").get<bool>() ? "1" : "0";
    std::string now;
    std::ifstream(path) >> now;
    if (now != want) {
      std::ofstream f(path);
      f << want << "\n";
      if (!f.flush())
        throw std::runtime_error(fmt::format("cannot write {} (set it to {} where the node is made, e.g. the "
                                             "container's sysctls)",
                                             path, want));
    }
  }
  // The run's congestion control as the node's default too, so that every socket on
  // the node during the run has it, not only the data connections (TCP_CONGESTION
  // below). A namespace may only pick what the host allows (the controller adds it); where
  // it still cannot, the data connections keep theirs and this says so.
  if (const auto cc = a.value("tcp_congestion", std::string{}); !cc.empty()) {
    const char* path = "/proc/sys/net/ipv4/tcp_congestion_control";
    std::string now;
    std::ifstream(path) >> now;
    if (now != cc) {
      std::FILE* f = std::fopen(path, "w");
      int err = f == nullptr ? errno : 0;
      if (f != nullptr) {
        if (std::fputs(cc.c_str(), f) < 0) err = errno;
        if (std::fclose(f) != 0 && err == 0) err = errno;
      }
      if (err != 0)
        spdlog::warn("{}: cannot make it {} ({}); the node's other sockets keep {}, the run's own use {}", path, cc,
                     std::strerror(err), now, cc);
    }
  }
}

}  // namespace

void Agent::handle(const nlohmann::json& m) {
  const auto type = m.value("type", std::string{});
  const auto run_id = m.value("run", std::string{});
  if (type == "abort") {
    abort_run(m.value("reason", std::string{"aborted by the controller"}));
    if (options_.once && options_.on_finished) options_.on_finished(false);
    return;
  }
  if (type == "bye") {
    if (run_) {
      std::unique_ptr<Run> r;
      {
        std::lock_guard lock(mutex_);
        r = std::move(run_);
      }
      r->stop();
    }
    if (options_.once && options_.on_finished) options_.on_finished(true);
    return;
  }
  if (type == "assign") {
    on_assign(m, run_id);
    return;
  }
  if (!run_ || run_->id != run_id) return;  // a stale message of an earlier run
  if (type == "connect") {
    try {
      const auto deadline = Clock::now() + std::chrono::seconds(20);
      run_->data->connect(run_->outgoing, run_->peers, deadline);
      run_->data->wait_incoming(deadline);
    } catch (const Aborted&) {
      return;
    } catch (const std::exception& e) {
      fail(run_id, fmt::format("cannot connect: {}", e.what()));
      return;
    }
    send_(msg("connected", run_id));
  } else if (type == "start") {
    on_start(m, run_id);
  }
}

void Agent::on_assign(const nlohmann::json& m, const std::string& run_id) {
  if (run_) abort_run("a new run was assigned");
  auto r = std::make_unique<Run>();
  r->id = run_id;
  r->assignment = m.at("assignment");
  try {
    prepare(*r);
  } catch (const std::exception& e) {
    fail(run_id, fmt::format("cannot prepare: {}", e.what()));
    return;
  }
  {
    std::lock_guard lock(mutex_);
    run_ = std::move(r);
  }
  send_(msg("ready", run_id));
}

void Agent::prepare(Run& run) {
  Run* r = &run;
  const auto& a = r->assignment;
  Layout l;
  l.my_dc = a.at("dc").get<std::string>();
  l.connections = a.at("connections").get<int>();
  l.peers = &r->peers;
  for (const auto& p : a.at("peers"))
    r->peers[p.at("worker").get<int>()] = {p.at("address").get<std::string>(), p.at("port").get<std::uint16_t>(),
                                           p.at("dc").get<std::string>()};
  for (const auto& w : a.at("workers")) l.programs.push_back(program::worker_program_from_json(w.at("program")));
  for (const auto& p : l.programs) l.local.insert(p.worker);
  for (const auto& p : l.programs) {
    for (const auto& op : p.ops) {
      if (op.kind == program::OpKind::send) l.sends.insert({p.worker, op.peer});
      if (op.kind == program::OpKind::recv) l.recvs.insert({op.peer, p.worker});
      if (op.kind == program::OpKind::allreduce && op.ring.size() > 1) {
        if (const auto around = program::ring_neighbours(op.ring, p.worker)) {
          l.sends.insert({p.worker, around->next});
          l.recvs.insert({around->prev, p.worker});
        }
      }
    }
  }
  int expected_in = 0;
  for (const auto& [src, dst] : l.recvs)
    if (!l.local.count(src)) expected_in += l.stripes_to(src);
  r->windows = a.value("windows", false);
  set_node_tcp(a);
  const int salt = a.value("port_salt", 0);
  for (const auto& w : a.at("workers")) l.slot_of[w.at("program").at("worker").get<int>()] = w.at("gpu").get<int>();
  plan_connections(*r, l, salt, expected_in);
  setup_data_plane(*r, l, expected_in);

  const auto compute = a.at("compute").get<std::string>();
  const int iterations = a.at("iterations").get<int>();
  if (a.contains("prefill")) setup_prefill(*r, a.at("prefill"), compute == "cuda");
  // TP ranks in step: where a stage replica's `tp` ranks are all on this node.
  if (const int tp = a.value("tp", 1); tp > 1) {
    std::map<std::pair<int, int>, int> local_ranks;
    for (const auto& p : l.programs) ++local_ranks[{p.stage, p.dp_rank}];
    for (const auto& [group, n] : local_ranks)
      if (n == tp) r->tp_syncs[group] = std::make_unique<TpSync>(tp);
  }
  add_workers(*r, l, compute, iterations);
}

void Agent::plan_connections(Run& run, const Layout& l, int salt, int& expected_in) {
  Run* r = &run;
  const auto& a = r->assignment;
  // Windowed runs: a pair's connections are paced to its share of the link (the
  // coordinator sends bytes/s per connection for each destination DC). Otherwise, with
  // `tcp_pacing`, TCP paces each WAN connection itself as with the fq qdisc: any
  // SO_MAX_PACING_RATE but "unlimited" turns Linux's internal pacing on, and this one
  // never binds.
  const auto pacing = a.value("pacing", nlohmann::json::object());
  const bool tcp_pacing = a.value("tcp_pacing", false);
  for (const auto& [src, dst] : l.sends) {
    std::uint64_t pace = 0;
    if (l.remote_dc(dst)) {
      const auto it = pacing.find(r->peers.at(dst).dc);
      if (it != pacing.end())
        pace = it->get<std::uint64_t>();
      else if (tcp_pacing)
        pace = kPacingWithoutCap;
    }
    r->outgoing.push_back({src, dst, l.local.count(dst) ? 1 : l.stripes_to(dst),
                           l.remote_dc(dst) ? l.slot_of.at(src) : -1, salt, pace});
  }
  for (const auto& p : l.programs)
    for (const auto& op : p.ops)
      if (op.kind == program::OpKind::recv && l.remote_dc(op.peer))
        r->wan_recv_bytes[{op.peer, p.worker, op.tag}] = op.bytes;
  // Pairs inside this agent connect through the loopback path of the node too: the
  // bytes still cross TCP, like GPUs of one server talking through NCCL's socket
  // transport would not, but keeping one code path makes counting exact.
  for (const auto& [src, dst] : l.recvs)
    if (l.local.count(src)) expected_in += 1;
  for (const auto& [src, dst] : l.sends)
    if (l.local.count(dst)) r->peers[dst] = {"127.0.0.1", a.at("listen_port").get<std::uint16_t>(), l.my_dc};
}

void Agent::setup_data_plane(Run& run, const Layout& l, int expected_in) {
  Run* r = &run;
  const auto& a = r->assignment;
  if (r->windows) {
    const auto id = r->id;
    r->data->set_on_delivered([this, r, id](int src, int dst, std::uint64_t tag, std::uint64_t total) {
      const auto it = r->wan_recv_bytes.find({src, dst, static_cast<std::uint32_t>(tag)});
      if (it == r->wan_recv_bytes.end() || it->second != total) return;
      auto d = msg("delivered", id);
      d["src"] = src;
      d["dst"] = dst;
      d["iteration"] = static_cast<int>(tag >> 32);
      d["tag"] = static_cast<std::uint32_t>(tag);
      d["bytes"] = total;
      send_(d);
    });
  }
  r->data->set_congestion(a.value("tcp_congestion", std::string{}));
  if (a.contains("tcp_window")) {
    // Only the WAN connections: a scaled window is meant for the WAN's bandwidth-delay
    // product, not the DC's fabric.
    std::set<int> wan_senders;
    for (const auto& [src, dst] : l.recvs)
      if (l.remote_dc(src)) wan_senders.insert(src);
    r->data->set_window_clamp(a.at("tcp_window").get<int>(), std::move(wan_senders));
  }
  r->data->listen(a.at("listen_port").get<std::uint16_t>(), l.local, expected_in);
}

void Agent::add_workers(Run& run, Layout& l, const std::string& compute, int iterations) {
  Run* r = &run;
  const auto& a = r->assignment;
  if (compute == "cuda" && options_.gpus > 0 && a.at("workers").size() > static_cast<std::size_t>(options_.gpus)) {
    // The GPU's throughput is divided among the workers computing at once (on an H200, 8 of
    // a 1.3B stage's forward passes at once each took 7.7x as long as one alone:
    // agents/gpu/README.md); other nodes of a lab on this machine share these GPUs too.
    spdlog::warn("agent {}: {} stage workers on {} GPU(s): those computing at once share a GPU, each slower by "
                 "about their number; per-GPU stage times need a real GPU per emulated one",
                 options_.node, a.at("workers").size(), options_.gpus);
  }
  std::size_t wi = 0;
  for (const auto& w : a.at("workers")) {
    const double eff = w.at("effective_flops").get<double>();
    std::unique_ptr<Compute> c;
    if (compute == "cuda") {
      if (options_.gpus < 1) throw std::runtime_error("compute \"cuda\" asked, but this node has no GPU: " + options_.gpu_reason);
      c = std::make_unique<CudaCompute>(w.at("gpu").get<int>() % options_.gpus, eff, r->wait_mutex, r->wait_cv);
    } else {
      c = std::make_unique<ModeledCompute>(eff, r->wait_mutex, r->wait_cv);
    }
    WorkerOptions wo;
    wo.iterations = iterations;
    if (r->windows) {
      for (const auto& [worker, peer] : r->peers)
        if (l.remote_dc(worker)) wo.wan_peers.insert(worker);
      const auto id = r->id;
      wo.wan_gate = [this, r, id](int worker, int peer, int iteration, std::uint32_t tag, std::uint64_t bytes,
                                  std::function<void()> go) {
        const Run::WindowKey key{worker, peer, iteration, tag};
        {
          std::lock_guard lock(r->windows_mutex);
          if (!r->early_grants.erase(key)) {
            r->waiting_grant.emplace(key, std::move(go));
            auto want = msg("want", id);
            want["worker"] = worker;
            want["peer"] = peer;
            want["iteration"] = iteration;
            want["tag"] = tag;
            want["bytes"] = bytes;
            send_(want);
            return;
          }
        }
        go();
      };
    }
    const auto id = r->id;
    const int slot = w.at("gpu").get<int>();
    if (r->shares.count(slot)) wo.gpu_share = r->shares.at(slot).get();
    GpuShare* share = wo.gpu_share;
    wo.on_iteration = [this, id, share](int worker, const program::IterationTime& t, int iteration,
                                        const std::vector<std::pair<std::int64_t, std::int64_t>>& idle) {
      auto p = msg("progress", id);
      p["worker"] = worker;
      p["iteration"] = iteration;
      p["start_ns"] = t.start_ns;
      p["end_ns"] = t.end_ns;
      p["idle"] = idle;
      if (share) {
        p["prefill_wait_ns"] = share->training_waited_ns();
        p["prefill_wait_after_resume_ns"] = share->training_waited_after_resume_ns();
      }
      send_(p);
    };
    if (const auto ts = r->tp_syncs.find({l.programs[wi].stage, l.programs[wi].dp_rank}); ts != r->tp_syncs.end())
      wo.tp_sync = ts->second.get();
    r->workers.push_back(std::make_unique<Worker>(std::move(l.programs[wi++]), std::move(c), *r->data, wo));
    r->worker_of_slot[slot] = r->workers.back().get();
  }
}

void Agent::on_start(const nlohmann::json& m, const std::string& run_id) {
  // The common instant on the system clock, mapped onto this process's steady clock.
  const auto at_unix = m.at("at_unix_ns").get<std::int64_t>();
  const auto now_unix =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const auto start = Clock::now() + std::chrono::nanoseconds(at_unix - now_unix);
  Run* r = run_.get();
  start_prefill(*r, start);
  for (auto& w : r->workers) {
    Worker* worker = w.get();
    r->threads.emplace_back([this, r, worker, start, run_id] {
      try {
        {
          std::unique_lock lock(r->wait_mutex);
          r->wait_cv.wait_until(lock, start, [&] { return r->abort.load(); });
        }
        if (r->abort) return;
        worker->set_start(start);
        worker->run(r->abort);
        // Training is over on this GPU: prefill stops with it (what is left is reported).
        const int slot = slot_of_worker(*r, worker);
        if (auto it = r->runners.find(slot); it != r->runners.end()) it->second->stop();
        auto rep = msg("report", run_id);
        rep["report"] = program::to_json(worker->report(std::chrono::seconds(30)));
        // The worker's outgoing connections as TCP left them (congestion window, and the
        // ssthresh where slow start ended; whether TCP paced them): what the run's
        // transfers had to work with.
        auto tcp = nlohmann::json::array();
        if (r->data)
          for (const auto& t : r->data->tcp_states(worker->program().worker))
            tcp.push_back({{"peer", t.dst},
                           {"cwnd", t.cwnd},
                           {"ssthresh", t.ssthresh >= kTcpInfiniteSsthresh ? nlohmann::json(nullptr) : nlohmann::json(t.ssthresh)},
                           {"srtt_us", t.srtt_us},
                           {"mss", t.mss},
                           {"retransmits", t.total_retrans},
                           {"paced", t.paced()}});
        rep["tcp"] = std::move(tcp);
        send_(rep);
      } catch (const Aborted&) {
      } catch (const std::exception& e) {
        if (!r->abort) fail(run_id, fmt::format("worker {}: {}", worker->program().worker, e.what()));
      }
    });
  }
}

}  // namespace wanlab::agent
