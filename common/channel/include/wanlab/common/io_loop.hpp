#pragma once
// An event loop that outlives a failing handler. A daemon serves many requests on one
// io_context; an exception from one handler must not end the others (nor skip the
// daemon's teardown). Asio lets run() be called again after a handler threw.
#include <exception>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>

namespace wanlab {

/// Runs `ioc` until it runs out of work or is stopped. An exception escaping a handler is
/// given to `on_error` (its what(), or "unknown exception") and the loop goes on. Returns
/// how many handlers failed.
inline std::size_t run_surviving(boost::asio::io_context& ioc, const std::function<void(const std::string&)>& on_error) {
  std::size_t failures = 0;
  for (;;) {
    try {
      ioc.run();
      return failures;
    } catch (const std::exception& e) {
      ++failures;
      if (on_error) on_error(e.what());
    } catch (...) {
      ++failures;
      if (on_error) on_error("unknown exception");
    }
  }
}

}  // namespace wanlab
