#include "wanlab/dashboard/dashboard.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "wanlab/api/metrics.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/channel_address.hpp"

namespace wanlab::dashboard {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Tcp = net::ip::tcp;

nlohmann::json make_tick(const std::string& metrics_before, const std::string& metrics_now, double seconds_between,
                         const nlohmann::json& windows, double unix_time) {
  const auto now = api::parse_metrics_text(metrics_now);
  const auto before = metrics_before.empty() ? api::ParsedMetrics{} : api::parse_metrics_text(metrics_before);
  const double scale = now.find("wanlab_link_rate_scale") ? now.find("wanlab_link_rate_scale")->value : 1.0;
  auto sum_drops = [](const api::ParsedMetrics& m, const std::string& src, const std::string& dst) {
    double d = 0;
    for (const auto& s : m.samples)
      if (s.name == "wanlab_link_dropped_packets_total" && s.labels.at("src") == src && s.labels.at("dst") == dst)
        d += s.value;
    return d;
  };
  nlohmann::json links = nlohmann::json::array();
  for (const auto& s : now.samples) {
    if (s.name != "wanlab_link_bytes_total") continue;
    const auto& src = s.labels.at("src");
    const auto& dst = s.labels.at("dst");
    const std::map<std::string, std::string> l{{"src", src}, {"dst", dst}};
    const auto* b = before.find("wanlab_link_bytes_total", l);
    const double mbit = b && seconds_between > 0 && s.value >= b->value ? (s.value - b->value) * 8 / 1e6 / seconds_between : 0;
    const auto* q = now.find("wanlab_link_queue_packets", l);
    const auto* r = now.find("wanlab_link_rate_bytes_per_second", l);
    links.push_back({{"src", src},
                     {"dst", dst},
                     {"mbit_s", mbit},
                     {"queue_packets", q ? q->value : 0.0},
                     {"rate_mbit_s", r ? r->value * 8 / 1e6 * scale : 0.0},
                     {"drops", std::max(0.0, sum_drops(now, src, dst) - (b ? sum_drops(before, src, dst) : 0.0))}});
  }
  nlohmann::json run = nullptr;
  std::string active;
  for (const auto& s : now.samples)
    if (s.name == "wanlab_run_worker_iteration") active = s.labels.at("run");
  if (!active.empty()) {
    const std::map<std::string, std::string> r{{"run", active}};
    std::string phase;
    for (const auto& s : now.samples)
      if (s.name == "wanlab_run_info" && s.labels.at("run") == active) phase = s.labels.at("phase");
    nlohmann::json workers = nlohmann::json::array();
    for (const auto& s : now.samples)
      if (s.name == "wanlab_run_worker_iteration")
        workers.push_back({{"worker", std::stoi(s.labels.at("worker"))},
                           {"dc", s.labels.count("dc") ? s.labels.at("dc") : ""},
                           {"stage", s.labels.count("stage") ? std::stoi(s.labels.at("stage")) : 0},
                           {"iteration", s.value}});
    const auto* its = now.find("wanlab_run_iterations", r);
    const auto* done = now.find("wanlab_run_iterations_done", r);
    const auto* it_s = now.find("wanlab_run_iteration_seconds", r);
    run = {{"id", active},
           {"phase", phase},
           {"iterations", its ? its->value : 0.0},
           {"iterations_done", done ? done->value : 0.0},
           {"iteration_s", it_s ? nlohmann::json(it_s->value) : nlohmann::json(nullptr)},
           {"workers", workers}};
  }
  const bool answer = windows.is_object();
  return {{"t", unix_time},
          {"links", links},
          {"windows", answer ? windows.value("windows", nlohmann::json::array()) : windows},
          {"windows_now_s", answer ? windows.value("now_s", nlohmann::json(nullptr)) : nlohmann::json(nullptr)},
          {"run", run}};
}

namespace {

bool token_ok(std::string_view target, const std::string& token) {
  if (token.empty()) return true;
  const auto q = target.find('?');
  if (q == std::string_view::npos) return false;
  auto query = target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto part = query.substr(0, amp);
    if (part.substr(0, 6) == "token=") {
      const auto given = part.substr(6);
      unsigned diff = given.size() == token.size() ? 0u : 1u;
      for (std::size_t i = 0; i < token.size(); ++i)
        diff |= static_cast<unsigned>(static_cast<unsigned char>(i < given.size() ? given[i] : 0) ^
                                      static_cast<unsigned char>(token[i]));
      return diff == 0;
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return false;
}

double query_number(std::string_view target, std::string_view key, double fallback) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return fallback;
  const std::string query(target.substr(q + 1));
  const auto at = query.find(std::string(key) + "=");
  if (at == std::string::npos) return fallback;
  try {
    return std::stod(query.substr(at + key.size() + 1));
  } catch (const std::exception&) {
    return fallback;
  }
}

}  // namespace

struct Dashboard::Impl : std::enable_shared_from_this<Dashboard::Impl> {
  Impl(net::io_context& io, DashboardOptions o) : ioc(io), options(std::move(o)), acceptor(io), timer(io) {}
  net::io_context& ioc;
  DashboardOptions options;
  Tcp::acceptor acceptor;
  net::steady_timer timer;
  std::string last_metrics;
  std::chrono::steady_clock::time_point last_at{};
  std::string tick_json = "null";
  std::string last_error;
  std::vector<std::weak_ptr<beast::tcp_stream>> subscribers;
  bool closed = false;

  void poll() {
    try {
      const auto r = api::call(options.controller_socket, "GET", "/metrics", {}, std::chrono::seconds(5));
      if (r.status != 200) throw std::runtime_error(fmt::format("GET /metrics answered {}", r.status));
      nlohmann::json windows = nlohmann::json::array();
      if (const auto w = api::call(options.controller_socket, "GET", "/v1/windows", {}, std::chrono::seconds(5));
          w.status == 200)
        windows = w.body;
      const auto at = std::chrono::steady_clock::now();
      const double between = last_metrics.empty() ? 0 : std::chrono::duration<double>(at - last_at).count();
      const double unix_time =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      tick_json = make_tick(last_metrics, r.text, between, windows, unix_time).dump();
      last_metrics = r.text;
      last_at = at;
      if (!last_error.empty()) spdlog::info("dashboard: the controller answers again");
      last_error.clear();
    } catch (const std::exception& e) {
      if (last_error != e.what()) spdlog::warn("dashboard: {}", e.what());
      last_error = e.what();
      tick_json = nlohmann::json{{"error", last_error}}.dump();
    }
    broadcast("event: tick\ndata: " + tick_json + "\n\n");
  }

  void broadcast(std::string message) {
    auto text = std::make_shared<std::string>(std::move(message));
    std::erase_if(subscribers, [](const auto& w) { return w.expired(); });
    for (const auto& w : subscribers)
      if (auto s = w.lock())
        net::async_write(s->socket(), net::buffer(*text), [s, text](beast::error_code ec, std::size_t) {
          if (ec) s->close();  // the browser left; the weak_ptr expires with the last handler
        });
  }

  void schedule() {
    timer.expires_after(options.interval);
    timer.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed) return;
      self->poll();
      self->schedule();
    });
  }

  void accept() {
    acceptor.async_accept([self = shared_from_this()](beast::error_code ec, Tcp::socket sock) {
      if (ec || self->closed) return;
      self->serve(std::make_shared<beast::tcp_stream>(std::move(sock)));
      self->accept();
    });
  }

  void serve(std::shared_ptr<beast::tcp_stream> stream) {
    auto buffer = std::make_shared<beast::flat_buffer>();
    auto req = std::make_shared<http::request<http::string_body>>();
    stream->expires_after(std::chrono::seconds(10));
    http::async_read(*stream, *buffer, *req, [self = shared_from_this(), stream, buffer, req](beast::error_code ec, std::size_t) {
      if (ec) return;
      self->answer(stream, *req);
    });
  }

  void reply(const std::shared_ptr<beast::tcp_stream>& stream, http::status status, const std::string& type,
             std::string body) {
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::content_type, type);
    res->set(http::field::server, "wanlab-dashboard");
    res->set(http::field::cache_control, "no-store");
    res->keep_alive(false);
    res->body() = std::move(body);
    res->prepare_payload();
    stream->expires_after(std::chrono::seconds(10));
    http::async_write(*stream, *res, [stream, res](beast::error_code, std::size_t) {
      beast::error_code ignored;
      stream->socket().shutdown(Tcp::socket::shutdown_both, ignored);
    });
  }

  void answer(const std::shared_ptr<beast::tcp_stream>& stream, const http::request<http::string_body>& req) {
    const std::string target(req.target());
    const auto path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get)
      return reply(stream, http::status::method_not_allowed, "text/plain", "GET only\n");
    if (!token_ok(target, options.token))
      return reply(stream, http::status::unauthorized, "text/plain",
                   "this dashboard needs its token: open it as /?token=TOKEN\n");
    if (const auto* a = asset(path))
      return reply(stream, http::status::ok, a->first + "; charset=utf-8", a->second);
    if (path == "/api/lab") {
      try {
        const auto r = api::call(options.controller_socket, "GET", "/v1/status", {}, std::chrono::seconds(5));
        return reply(stream, static_cast<http::status>(r.status), "application/json", r.body.dump());
      } catch (const std::exception& e) {
        return reply(stream, http::status::bad_gateway, "application/json",
                     nlohmann::json{{"error", {{"message", e.what()}}}}.dump());
      }
    }
    if (path == "/api/tick") return reply(stream, http::status::ok, "application/json", tick_json);
    if (path == "/api/wait") {
      const double s = std::clamp(query_number(target, "s", 1), 0.0, 30.0);
      auto t = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(static_cast<int>(s * 1000)));
      t->async_wait([self = shared_from_this(), stream, t](beast::error_code) {
        self->reply(stream, http::status::ok, "text/plain", "ok\n");
      });
      return;
    }
    if (path == "/events") {
      stream->expires_never();
      auto head = std::make_shared<std::string>(
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: "
          "keep-alive\r\nServer: wanlab-dashboard\r\n\r\nretry: 2000\n\nevent: tick\ndata: " +
          tick_json + "\n\n");
      net::async_write(stream->socket(), net::buffer(*head),
                       [self = shared_from_this(), stream, head](beast::error_code ec, std::size_t) {
                         if (ec) return;
                         self->subscribers.push_back(stream);
                         // Reads nothing more, but notices the browser closing: the stream
                         // is dropped then.
                         auto sink = std::make_shared<std::array<char, 256>>();
                         stream->socket().async_read_some(net::buffer(*sink), [stream, sink](beast::error_code, std::size_t) {
                           stream->close();
                         });
                       });
      return;
    }
    reply(stream, http::status::not_found, "text/plain", fmt::format("no page {}\n", path));
  }
};

Dashboard::Dashboard(net::io_context& ioc, DashboardOptions options) {
  const auto [host, port] = api::parse_host_port(options.listen);
  struct {
    std::string host;
    std::uint16_t port;
  } a{host, port};
  if (!api::is_loopback_host(a.host) && options.token.empty())
    throw std::invalid_argument(fmt::format("--listen {}: not a loopback address: the dashboard there needs a token "
                                            "(--token or $WANLAB_TOKEN)",
                                            options.listen));
  beast::error_code ec;
  const auto addr = a.host == "localhost" ? net::ip::make_address("127.0.0.1") : net::ip::make_address(a.host, ec);
  if (ec) throw std::invalid_argument(fmt::format("--listen {}: '{}' is not an IP address", options.listen, a.host));
  impl_ = std::make_shared<Impl>(ioc, std::move(options));
  const Tcp::endpoint ep(addr, a.port);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(net::socket_base::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot listen on {}: {}", impl_->options.listen, ec.message()));
  impl_->acceptor.listen();
  impl_->accept();
  impl_->poll();
  impl_->schedule();
}

Dashboard::~Dashboard() { close(); }

std::uint16_t Dashboard::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void Dashboard::close() {
  if (!impl_ || impl_->closed) return;
  impl_->closed = true;
  beast::error_code ec;
  impl_->acceptor.close(ec);
  impl_->timer.cancel();
  for (const auto& w : impl_->subscribers)
    if (auto s = w.lock()) s->close();
  impl_->subscribers.clear();
}

}  // namespace wanlab::dashboard
