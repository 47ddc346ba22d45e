// The agent protocol's byte stream (common/protocol): the frame decoder splits it into
// messages or errors the same way whatever the read boundaries; every message passes
// through the message table's validation (either side, and each sender), `error`
// messages are read back, and the payloads the two ends decode (`report`: a worker's
// report; `assign`: each worker's program) are decoded as they are, where an exception
// is the refusal. Every decoded message encodes to a frame that decodes to the same value.
// Input: the first byte sets the read size (1-64 bytes), the rest is the stream.
// Seeds: tests/fuzz/seeds/protocol/*.jsonl, framed by run.sh (a message per line).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "wanlab/common/program.hpp"
#include "wanlab/common/protocol.hpp"

using namespace wanlab;

namespace {

void check_message(const nlohmann::json& m) {
  const auto problem = protocol::validate(m);
  (void)protocol::validate(m, protocol::Sender::agent);
  (void)protocol::validate(m, protocol::Sender::controller);
  if (!problem) {
    const auto& type = m.at("type").get_ref<const std::string&>();
    try {
      if (type == "error") {
        (void)protocol::error_from_message(m);
      } else if (type == "report") {
        (void)program::worker_report_from_json(m.at("report"));
      } else if (type == "assign") {
        for (const auto& w : m.at("assignment").at("workers")) (void)program::worker_program_from_json(w.at("program"));
      }
    } catch (const std::exception&) {
      // Refused, as the coordinator and the agent refuse it (a failed run, not a crash).
    }
  }
  protocol::FrameDecoder again;
  again.feed(protocol::encode(m));
  const auto back = again.next();
  WANLAB_FUZZ_CHECK(back && back->ok() && back->message == m, m.dump());
  WANLAB_FUZZ_CHECK(again.buffered() == 0, m.dump());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);

  // Read as it arrives, `chunk` bytes at a time.
  protocol::FrameDecoder decoder;
  std::vector<protocol::Decoded> pieces;
  for (std::size_t at = 0; at < stream.size(); at += chunk) {
    decoder.feed(stream.substr(at, chunk));
    WANLAB_FUZZ_CHECK(decoder.buffered() <= stream.size(), {});
    while (auto d = decoder.next()) pieces.push_back(std::move(*d));
  }
  // All at once: the same messages.
  protocol::FrameDecoder whole;
  whole.feed(stream);
  std::size_t i = 0;
  while (auto d = whole.next()) {
    WANLAB_FUZZ_CHECK(i < pieces.size(), {});
    WANLAB_FUZZ_CHECK(d->ok() == pieces[i].ok(), {});
    if (d->ok()) {
      WANLAB_FUZZ_CHECK(d->message == pieces[i].message, d->message.dump());
    } else {
      WANLAB_FUZZ_CHECK(d->error->code == pieces[i].error->code, d->error->message);
      WANLAB_FUZZ_CHECK(!d->error->code.empty() && !d->error->message.empty(), {});
      // An error reply goes back on the wire: it must encode.
      (void)protocol::encode(protocol::error_message(*d->error));
    }
    ++i;
  }
  WANLAB_FUZZ_CHECK(i == pieces.size(), {});
  WANLAB_FUZZ_CHECK(whole.broken() == decoder.broken(), {});

  for (const auto& d : pieces)
    if (d.ok()) check_message(d.message);
  return 0;
}
