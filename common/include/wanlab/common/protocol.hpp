#pragma once
// The agent control protocol, as pure code (no sockets): framing, decoding and the message
// table. A connection between the controller and an agent carries a stream of frames, each
// a 4-byte big-endian length and then that many bytes of one UTF-8 JSON object:
//   {"v": 1, "type": "hello", ...fields}
// Every message is checked against the table (validate()) before the application sees it.
// docs/protocol.md describes the conversation; channel.hpp carries it over a socket.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace wanlab::protocol {

inline constexpr int kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 4;
/// Default cap on one message's JSON text; a channel may set its own.
inline constexpr std::size_t kMaxMessageBytes = 16 * 1024 * 1024;
/// Arrays and objects nest at most this deep: copying or printing a json value recurses, so
/// a hostile "[[[[..." must not reach the application.
inline constexpr std::size_t kMaxNesting = 64;

/// Error codes carried by `error` messages.
namespace code {
inline constexpr std::string_view too_large = "too_large";    // length prefix over the limit (closes)
inline constexpr std::string_view bad_json = "bad_json";      // not parseable, or not UTF-8
inline constexpr std::string_view too_deep = "too_deep";      // nested deeper than kMaxNesting
inline constexpr std::string_view not_object = "not_object";  // JSON, but not an object
inline constexpr std::string_view missing_field = "missing_field";
inline constexpr std::string_view wrong_type = "wrong_type";  // a field of the wrong JSON type
inline constexpr std::string_view unsupported_version = "unsupported_version";
inline constexpr std::string_view unknown_type = "unknown_type";
inline constexpr std::string_view wrong_direction = "wrong_direction";  // e.g. an agent sending `assign`
inline constexpr std::string_view expected_hello = "expected_hello";    // first message not `hello` (closes)
inline constexpr std::string_view hello_timeout = "hello_timeout";      // no `hello` in time (closes)
inline constexpr std::string_view unauthorized = "unauthorized";        // missing or wrong token (closes)
}  // namespace code

/// A protocol error: what an `error` message carries.
struct Error {
  std::string code;
  std::string message;
  std::string field;  // the offending field, "" when none
  bool operator==(const Error&) const = default;
};

/// {"v": 1, "type": type, ...fields}. `fields` must be an object (or null for none).
nlohmann::json message(std::string_view type, nlohmann::json fields = nlohmann::json::object());
/// The `error` message for `error` ("field" only when set).
nlohmann::json error_message(const Error& error);
/// Reads an `error` message back (missing fields come back empty).
Error error_from_message(const nlohmann::json& message);

/// One frame: the length prefix and the JSON text. Never throws on content: invalid UTF-8
/// in strings is replaced (U+FFFD) rather than refused. Does not check the size limit.
std::string encode(const nlohmann::json& message);

/// What FrameDecoder::next() yields: a parsed JSON value, or the error to reply with.
struct Decoded {
  nlohmann::json message;      // when !error
  std::optional<Error> error;  // bad_json, too_deep; too_large (fatal: see broken())
  bool ok() const { return !error; }
};

/// Splits a byte stream into messages, whatever the read boundaries. An invalid JSON text
/// in a well-formed frame is reported and skipped; an oversized length prefix leaves no way
/// to find the next frame, so the decoder reports it once and is broken() from then on.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_message_bytes = kMaxMessageBytes);
  /// Appends bytes read from the stream (ignored once broken).
  void feed(std::string_view bytes);
  /// The next complete message, or nullopt until more bytes arrive.
  std::optional<Decoded> next();
  /// True after a framing error: nothing more will be decoded.
  bool broken() const { return broken_; }
  /// Bytes held for messages not yet complete.
  std::size_t buffered() const { return buf_.size() - pos_; }
  std::size_t max_message_bytes() const { return max_; }
  /// Changes the limit for the messages not yet decoded (a channel raises it once its peer
  /// is admitted).
  void set_max_message_bytes(std::size_t max) { max_ = max; }

 private:
  std::string buf_;
  std::size_t pos_ = 0;  // start of the first undecoded byte in buf_
  std::size_t max_;
  bool broken_ = false;
};

/// Parses one JSON text (a frame's payload) into a message or an error; never throws.
Decoded parse_message(std::string_view text);

// ---- The message table ----

enum class Sender { agent, controller, either };
enum class FieldType { string, integer, number, boolean, object, array };

struct FieldSpec {
  std::string_view name;
  FieldType type;
  bool required;
};
constexpr FieldSpec required_field(std::string_view name, FieldType type) {
  return {name, type, true};
}
constexpr FieldSpec optional_field(std::string_view name, FieldType type) {
  return {name, type, false};
}

struct MessageSpec {
  std::string_view type;
  Sender sender;
  std::vector<FieldSpec> fields;  // besides "v" and "type"; fields not listed are allowed
};

/// Every message type, one entry each (protocol.cpp).
std::span<const MessageSpec> message_specs();
/// The entry for `type`, or nullptr.
const MessageSpec* find_spec(std::string_view type);

/// Checks a message against the table: an object, "v" == kVersion, a known "type", every
/// required field present and every listed field of its type. With `from` set, also that
/// this side may send the type. Returns the first problem, naming the field.
std::optional<Error> validate(const nlohmann::json& message, std::optional<Sender> from = std::nullopt);

/// Compares a presented token with the expected one in time that does not depend on where
/// they differ (only on the expected token's length).
bool tokens_equal(std::string_view presented, std::string_view expected);

/// "9 s", "150 ms": durations in close reasons and error texts.
std::string describe(std::chrono::milliseconds duration);

std::string_view to_string(Sender sender);
std::string_view to_string(FieldType type);

}  // namespace wanlab::protocol
