#include "wanlab/common/protocol.hpp"

#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace wanlab::protocol {

nlohmann::json message(std::string_view type, nlohmann::json fields) {
  if (fields.is_null()) fields = nlohmann::json::object();
  if (!fields.is_object()) throw std::invalid_argument("protocol::message: the fields must be a JSON object");
  fields["v"] = kVersion;
  fields["type"] = type;
  return fields;
}

nlohmann::json error_message(const Error& error) {
  nlohmann::json fields = {{"code", error.code}, {"message", error.message}};
  if (!error.field.empty()) fields["field"] = error.field;
  return message("error", std::move(fields));
}

Error error_from_message(const nlohmann::json& m) {
  auto text = [&](const char* key) {
    auto it = m.find(key);
    return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  return {text("code"), text("message"), text("field")};
}

std::string encode(const nlohmann::json& m) {
  // `replace` keeps a stray non-UTF-8 byte in some string from throwing out of a send.
  std::string text = m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > std::numeric_limits<std::uint32_t>::max())
    throw std::length_error(fmt::format("a message of {} bytes cannot be framed", text.size()));
  const auto n = static_cast<std::uint32_t>(text.size());
  const char header[kHeaderBytes] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                                     static_cast<char>(n)};
  text.insert(0, header, kHeaderBytes);
  return text;
}

namespace {

// A linear scan, so that nesting is refused before the (iterative) parser builds a value
// whose copies and destructor would recurse that deep.
bool nests_deeper_than(std::string_view text, std::size_t limit) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limit) return true;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return false;
}

std::string parse_error_text(const char* what) {
  // nlohmann prefixes "[json.exception.parse_error.101] "; the rest says where and why.
  std::string_view text = what;
  if (!text.empty() && text.front() == '[') {
    const auto end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  constexpr std::size_t kMaxText = 200;  // the "last read" token may be a whole long string
  std::string out(text.substr(0, kMaxText));
  if (text.size() > kMaxText) out += "...";
  return out;
}

}  // namespace

Decoded parse_message(std::string_view text) {
  Decoded d;
  if (nests_deeper_than(text, kMaxNesting)) {
    d.error = Error{std::string(code::too_deep),
                    fmt::format("message nests arrays/objects deeper than {} levels", kMaxNesting), ""};
    return d;
  }
  try {
    d.message = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    d.error = Error{std::string(code::bad_json), "message is not valid JSON: " + parse_error_text(e.what()), ""};
  }
  return d;
}

FrameDecoder::FrameDecoder(std::size_t max_message_bytes) : max_(max_message_bytes) {}

void FrameDecoder::feed(std::string_view bytes) {
  if (broken_) return;
  // Drop consumed bytes before growing, so a long-lived stream does not keep its history.
  if (pos_ > 0 && (pos_ == buf_.size() || pos_ >= buf_.size() / 2)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(bytes);
}

std::optional<Decoded> FrameDecoder::next() {
  if (broken_ || buffered() < kHeaderBytes) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
  const std::size_t length = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
  if (length > max_) {
    broken_ = true;
    buf_.clear();
    buf_.shrink_to_fit();
    pos_ = 0;
    Decoded d;
    d.error = Error{std::string(code::too_large),
                    fmt::format("message of {} bytes is over the limit of {} bytes", length, max_), ""};
    return d;
  }
  if (buffered() < kHeaderBytes + length) return std::nullopt;
  const std::string_view text(buf_.data() + pos_ + kHeaderBytes, length);
  pos_ += kHeaderBytes + length;
  return parse_message(text);
}

bool tokens_equal(std::string_view presented, std::string_view expected) {
  // Walk the expected token whatever was presented, so the time taken says nothing about
  // how much of a guess was right.
  unsigned diff = presented.size() == expected.size() ? 0U : 1U;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const char got = i < presented.size() ? presented[i] : '\0';
    diff |= static_cast<unsigned char>(got ^ expected[i]);
  }
  return diff == 0;
}

std::string describe(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  if (ms != 0 && ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
  return fmt::format("{} ms", ms);
}

std::string_view to_string(Sender sender) {
  switch (sender) {
    case Sender::agent:
      return "agent";
    case Sender::controller:
      return "controller";
    case Sender::either:
      return "either side";
  }
  return "?";
}

std::string_view to_string(FieldType type) {
  switch (type) {
    case FieldType::string:
      return "a string";
    case FieldType::integer:
      return "an integer";
    case FieldType::number:
      return "a number";
    case FieldType::boolean:
      return "a boolean";
    case FieldType::object:
      return "an object";
    case FieldType::array:
      return "an array";
  }
  return "?";
}

}  // namespace wanlab::protocol
