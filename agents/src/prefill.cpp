#include "prefill.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/common/thread.hpp"
#include "wanlab/gpu/gpu_compute.hpp"

namespace wanlab::agent {

void GpuShare::training_idle(Clock::time_point until) {
  {
    std::lock_guard lock(mutex_);
    idle_ = true;
    until_ = until;
    resume_ = until;
    ++epoch_;
  }
  cv_.notify_all();
}

void GpuShare::expect(Clock::time_point at, std::uint64_t epoch) {
  std::lock_guard lock(mutex_);
  if (!idle_ || epoch != epoch_) return;
  const auto now = Clock::now();
  until_ = at;
  resume_ = at + std::max<Clock::duration>(std::chrono::milliseconds(2), (at - now) / 10);
  if (segment_layers_ == 0 || cut_ || segment_layer_.count() <= 0) return;
  // The layer in progress ends; of the rest, those that end by `at`.
  const auto by_then = at > segment_start_ ? (at - segment_start_) / segment_layer_ : 0;
  const auto keep = static_cast<int>(std::max<Clock::rep>(layers_begun_locked(now), by_then));
  if (keep < segment_layers_) {
    segment_layers_ = keep;
    cv_.notify_all();
  }
}

Clock::time_point GpuShare::training_busy(Clock::time_point wanted) {
  std::unique_lock lock(mutex_);
  idle_ = false;
  wanted = std::min(wanted, Clock::now());
  Clock::time_point free = wanted;
  if (segment_layers_ > 0 && !cut_) {
    // A modeled segment: it ends at the first layer boundary at or after `wanted`.
    auto at = segment_start_ + segment_layer_ * segment_layers_;
    if (segment_layer_.count() > 0 && wanted < at) at = segment_start_ + segment_layer_ * layers_begun_locked(wanted);
    cut_ = at;
    cv_.notify_all();
    while (Clock::now() < at) cv_.wait_until(lock, at);
    // Cut before its first layer (it began after `wanted`): the GPU was training's all along.
    free = at <= segment_start_ ? wanted : std::max(wanted, at);
  } else if (layer_running_) {
    cv_.wait(lock, [&] { return !layer_running_; });
    free = Clock::now();
  } else {
    return wanted;
  }
  const auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(free - wanted).count();
  waited_ns_ += waited;
  if (resume_ != Clock::time_point::max() && wanted >= resume_) waited_after_resume_ns_ += waited;
  return free;
}

int GpuShare::layers_fitting_locked(Clock::duration layer, int left) const {
  if (!idle_) return 0;
  if (until_ == Clock::time_point::max() || layer.count() <= 0) return left;
  const auto now = Clock::now();
  if (now >= resume_) return left;  // later than expected: a layer boundary bounds the delay
  if (now >= until_) return 0;
  return static_cast<int>(std::min<Clock::rep>(left, (until_ - now) / layer));
}

void GpuShare::layer_end() {
  {
    std::lock_guard lock(mutex_);
    layer_running_ = false;
  }
  cv_.notify_all();
}

Clock::rep GpuShare::layers_begun_locked(Clock::time_point t) const {
  return t <= segment_start_ ? 0 : (t - segment_start_ + segment_layer_ - Clock::duration(1)) / segment_layer_;
}

void GpuShare::segment_begin_locked(Clock::time_point start, Clock::duration layer, int layers) {
  segment_start_ = start;
  segment_layer_ = layer;
  segment_layers_ = layers;
  cut_.reset();
}

std::pair<int, Clock::time_point> GpuShare::segment_wait_locked(std::unique_lock<std::mutex>& lock,
                                                                const std::function<bool()>& stop) {
  // expect() may shorten the segment while it runs.
  auto end = segment_start_ + segment_layer_ * segment_layers_;
  while (!cut_ && !stop() && Clock::now() < end) {
    cv_.wait_until(lock, end);
    end = segment_start_ + segment_layer_ * segment_layers_;
  }
  std::pair<int, Clock::time_point> ran{segment_layers_, end};
  if (cut_) {
    ran.second = *cut_;
  } else if (Clock::now() < end) {
    ran.second = Clock::now();  // stopped: the layers that had ended
  }
  if (ran.second < end && segment_layer_.count() > 0) {
    ran.first = static_cast<int>((ran.second - segment_start_) / segment_layer_);
    ran.second = segment_start_ + segment_layer_ * ran.first;
  }
  segment_layers_ = 0;
  cut_.reset();
  return ran;
}

PrefillRunner::PrefillRunner(GpuShare& share, double effective_flops, int cuda_device, Done done)
    : share_(share), effective_flops_(effective_flops), cuda_device_(cuda_device), done_(std::move(done)) {
  if (cuda_device_ >= 0) gpu_ = gpu::GpuCompute::open(cuda_device_);
}

PrefillRunner::~PrefillRunner() { stop(); }

std::int64_t PrefillRunner::since_start(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - run_start_).count();
}

void PrefillRunner::start(Clock::time_point run_start) {
  run_start_ = run_start;
  thread_ = std::thread([this] { loop(); });
}

void PrefillRunner::add(PrefillJob job) {
  {
    std::lock_guard lock(share_.mutex());
    jobs_.emplace(job.start_ns, std::move(job));
  }
  share_.notify();
}

void PrefillRunner::prompt_arrived(int id) {
  {
    std::lock_guard lock(share_.mutex());
    prompts_.insert(id);
  }
  share_.notify();
}

void PrefillRunner::stop() {
  {
    std::lock_guard lock(share_.mutex());
    stopping_ = true;
  }
  share_.notify();
  if (thread_.joinable()) thread_.join();
}

Clock::duration PrefillRunner::layer_time(const PrefillJob& job) const {
  return std::chrono::nanoseconds(static_cast<std::int64_t>(job.flops_per_layer / effective_flops_ * 1e9));
}

void PrefillRunner::run_layer(const PrefillJob& job) { gpu_->run(job.layer, program::OpKind::forward); }

void PrefillRunner::loop() {
  // Normal priority: its CPU time is small (bench/results/2026-11-26-bubbletea.md), and a
  // layer it starts late is bubble time lost; with a real GPU, training may wait for it to
  // see a layer end.
  name_this_thread("prefill-runner");
  std::unique_lock lock(share_.mutex());
  for (;;) {
    // The first job in reserved order whose prompt is here, as soon as the GPU can take a
    // layer of it: earlier than its reserved start when training leaves the GPU idle.
    auto next = [&]() -> std::multimap<std::int64_t, PrefillJob>::iterator {
      for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
        if (prompts_.count(it->second.id) && share_.may_run_locked(layer_time(it->second))) return it;
      return jobs_.end();
    };
    auto it = jobs_.end();
    // An event (training idles, a job or a prompt arrives, stop) or training's expected
    // return passing can make a job runnable.
    while (!stopping_ && (it = next()) == jobs_.end()) share_.wait_locked(lock);
    if (stopping_) break;
    PrefillJob job = std::move(it->second);
    jobs_.erase(it);
    prompts_.erase(job.id);
    PrefillOutcome out;
    out.id = job.id;
    out.started_ns = since_start(Clock::now());
    std::int64_t segment = out.started_ns;
    std::int64_t last_end = segment;  // when the last layer ended, before training could start
    int layer = 0;
    const auto layer_ns = layer_time(job);
    while (layer < job.layers && !stopping_) {
      int fit = share_.layers_fitting_locked(layer_ns, job.layers - layer);
      if (fit == 0) {
        // Training needs the GPU back (or soon will) with layers left: preempted until the
        // GPU is free long enough again.
        // A segment cut before its first layer (training wanted the GPU before it began)
        // never ran on the GPU: neither a span nor a preemption.
        if (segment < last_end) {
          ++out.preemptions;
          out.spans.push_back({program::SpanKind::prefill, -1, -1, segment, last_end, 0, -1});
        }
        segment = last_end;  // recorded: a stop while preempted must not record it again
        while (!stopping_ && (fit = share_.layers_fitting_locked(layer_ns, job.layers - layer)) == 0)
          share_.wait_locked(lock);
        if (stopping_) break;
        segment = since_start(Clock::now());
      }
      if (gpu_) {
        share_.layer_begin_locked();
        lock.unlock();
        run_layer(job);
        const auto ended = since_start(Clock::now());
        share_.layer_end();
        lock.lock();
        last_end = ended;
        ++layer;
      } else {
        // Modeled: `fit` layers in one sleep; training cuts it at a layer boundary.
        share_.segment_begin_locked(run_start_ + std::chrono::nanoseconds(std::max(segment, last_end)), layer_ns,
                                    fit);
        const auto [ran, ended] = share_.segment_wait_locked(lock, [this] { return stopping_; });
        layer += ran;
        if (ran > 0) last_end = since_start(ended);
      }
    }
    // The first token: the LM head over the last position (modeled, it is tiny).
    out.complete = layer == job.layers;
    out.finished_ns = last_end;
    if (segment < last_end) out.spans.push_back({program::SpanKind::prefill, -1, -1, segment, last_end, 0, -1});
    lock.unlock();
    done_(job, out);
    lock.lock();
  }
  // Whatever was placed but not run: reported incomplete, never dropped silently.
  auto left = std::move(jobs_);
  jobs_.clear();
  lock.unlock();
  for (auto& [start, job] : left) {
    PrefillOutcome out;
    out.id = job.id;
    done_(job, out);
  }
}

namespace asio = boost::asio;
using asio::ip::tcp;

struct SideChannel::Impl {
  struct Frame {
    Kind kind;
    int id;
    std::uint64_t bytes;
    std::function<void()> sent;
  };
  struct Sender {
    std::string address;
    std::uint16_t port = 0;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Frame> queue;
    std::unique_ptr<tcp::socket> socket;
    std::thread thread;
  };

  asio::io_context io;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::thread accept_thread;
  std::mutex mutex;  // readers, senders, stopping
  std::vector<std::shared_ptr<tcp::socket>> readers;
  std::vector<std::thread> reader_threads;
  std::map<std::pair<std::string, std::uint16_t>, std::unique_ptr<Sender>> senders;
  std::atomic<bool> stopping{false};
  Arrived arrived;

  void read_loop(std::shared_ptr<tcp::socket> s) {
    name_this_thread("prefill-recv");
    set_this_thread_nice(kPrefillNice);
    std::array<char, 65536> buf{};
    try {
      for (;;) {
        std::array<std::uint32_t, 4> h{};
        asio::read(*s, asio::buffer(h));
        const auto kind = static_cast<Kind>(h[0]);
        const auto id = static_cast<int>(h[1]);
        const std::uint64_t bytes = static_cast<std::uint64_t>(h[2]) | static_cast<std::uint64_t>(h[3]) << 32;
        for (std::uint64_t left = bytes; left > 0;) {
          const auto n = std::min<std::uint64_t>(left, buf.size());
          asio::read(*s, asio::buffer(buf.data(), n));
          left -= n;
        }
        if (arrived) arrived(kind, id, bytes);
      }
    } catch (const std::exception&) {
      // Closed by the peer or by stop().
    }
  }

  void send_loop(Sender* snd) {
    name_this_thread("prefill-send");
    set_this_thread_nice(kPrefillNice);
    std::array<char, 65536> zeros{};
    std::unique_lock lock(snd->mutex);
    for (;;) {
      snd->cv.wait(lock, [&] { return stopping.load() || !snd->queue.empty(); });
      if (stopping) return;
      Frame f = std::move(snd->queue.front());
      snd->queue.pop_front();
      lock.unlock();
      try {
        if (!snd->socket) {
          // The peer's listener may not be up yet: retry refused connects for a while.
          const auto deadline = Clock::now() + std::chrono::seconds(10);
          for (;;) {
            auto s = std::make_unique<tcp::socket>(io);
            boost::system::error_code ec;
            s->connect({asio::ip::make_address(snd->address), snd->port}, ec);
            if (!ec) {
              s->set_option(tcp::no_delay(true));
              lock.lock();
              snd->socket = std::move(s);
              lock.unlock();
              break;
            }
            if (stopping || Clock::now() > deadline)
              throw std::runtime_error(fmt::format("cannot connect to {}:{}: {}", snd->address, snd->port, ec.message()));
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }
        const std::array<std::uint32_t, 4> h{static_cast<std::uint32_t>(f.kind), static_cast<std::uint32_t>(f.id),
                                             static_cast<std::uint32_t>(f.bytes),
                                             static_cast<std::uint32_t>(f.bytes >> 32)};
        asio::write(*snd->socket, asio::buffer(h));
        for (std::uint64_t left = f.bytes; left > 0;) {
          const auto n = std::min<std::uint64_t>(left, zeros.size());
          asio::write(*snd->socket, asio::buffer(zeros.data(), n));
          left -= n;
        }
        if (f.sent) f.sent();
      } catch (const std::exception& e) {
        if (!stopping) spdlog::warn("prefill traffic to {}:{}: {}", snd->address, snd->port, e.what());
      }
      lock.lock();
    }
  }
};

SideChannel::SideChannel() : impl_(std::make_unique<Impl>()) {}
SideChannel::~SideChannel() { stop(); }

void SideChannel::listen(std::uint16_t port, Arrived arrived) {
  impl_->arrived = std::move(arrived);
  impl_->acceptor = std::make_unique<tcp::acceptor>(impl_->io);
  tcp::endpoint ep(tcp::v4(), port);
  impl_->acceptor->open(ep.protocol());
  impl_->acceptor->set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor->bind(ep);
  impl_->acceptor->listen();
  Impl* im = impl_.get();
  im->accept_thread = std::thread([im] {
    for (;;) {
      auto s = std::make_shared<tcp::socket>(im->io);
      boost::system::error_code ec;
      im->acceptor->accept(*s, ec);
      if (ec || im->stopping) return;
      std::lock_guard lock(im->mutex);
      im->readers.push_back(s);
      im->reader_threads.emplace_back([im, s] { im->read_loop(s); });
    }
  });
}

void SideChannel::send(const std::string& address, std::uint16_t port, Kind kind, int id, std::uint64_t bytes,
                       std::function<void()> sent) {
  Impl::Sender* snd = nullptr;
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    auto& slot = impl_->senders[{address, port}];
    if (!slot) {
      slot = std::make_unique<Impl::Sender>();
      slot->address = address;
      slot->port = port;
      Impl* im = impl_.get();
      Impl::Sender* raw = slot.get();
      slot->thread = std::thread([im, raw] { im->send_loop(raw); });
    }
    snd = slot.get();
  }
  {
    std::lock_guard lock(snd->mutex);
    snd->queue.push_back({kind, id, bytes, std::move(sent)});
  }
  snd->cv.notify_all();
}

void SideChannel::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  if (impl_->acceptor) {
    ::shutdown(impl_->acceptor->native_handle(), SHUT_RDWR);
    boost::system::error_code ec;
    impl_->acceptor->close(ec);
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  std::map<std::pair<std::string, std::uint16_t>, std::unique_ptr<Impl::Sender>> senders;
  std::vector<std::thread> readers;
  {
    std::lock_guard lock(impl_->mutex);
    for (auto& s : impl_->readers) ::shutdown(s->native_handle(), SHUT_RDWR);
    senders = std::move(impl_->senders);
    readers = std::move(impl_->reader_threads);
  }
  for (auto& [key, snd] : senders) {
    {
      std::lock_guard lock(snd->mutex);
      if (snd->socket) ::shutdown(snd->socket->native_handle(), SHUT_RDWR);
    }
    snd->cv.notify_all();
    if (snd->thread.joinable()) snd->thread.join();
  }
  for (auto& t : readers)
    if (t.joinable()) t.join();
}

}  // namespace wanlab::agent
