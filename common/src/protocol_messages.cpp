// The message table: every type the protocol knows, who may send it, and its fields.
// Adding a message type is one line here (and a line in docs/protocol.md).
#include <algorithm>

#include <fmt/format.h>

#include "wanlab/common/protocol.hpp"

namespace wanlab::protocol {
namespace {

constexpr auto req = required_field;
constexpr auto opt = optional_field;
constexpr auto str = FieldType::string;
constexpr auto integer = FieldType::integer;
constexpr auto object = FieldType::object;
constexpr auto number = FieldType::number;
constexpr auto boolean = FieldType::boolean;
constexpr auto array = FieldType::array;

// One line per type, so a new type is one line (clang-format would fold them).
// clang-format off
const std::vector<MessageSpec>& specs() {
  static const std::vector<MessageSpec> table = {
    // agent -> controller
    {"hello", Sender::agent, {req("node", str), req("pid", integer), req("agent_version", str), req("gpus", integer), opt("token", str), opt("run", str)}},
    {"ready", Sender::agent, {req("run", str)}},
    {"connected", Sender::agent, {req("run", str)}},
    {"progress", Sender::agent, {req("run", str), req("worker", integer), req("iteration", integer)}},
    {"report", Sender::agent, {req("run", str), req("report", object), opt("tcp", array)}},
    {"failed", Sender::agent, {req("run", str), req("message", str)}},
    {"want", Sender::agent, {req("run", str), req("worker", integer), req("peer", integer), req("iteration", integer), req("tag", integer), req("bytes", integer)}},
    {"delivered", Sender::agent, {req("run", str), req("src", integer), req("dst", integer), req("iteration", integer), req("tag", integer), req("bytes", integer)}},
    {"prefill_request", Sender::agent, {req("run", str), req("id", integer), req("at_ns", integer), req("tokens", integer)}},
    {"prefill_done", Sender::agent, {req("run", str), req("id", integer), req("complete", boolean), req("started_ns", integer), req("finished_ns", integer), req("preemptions", integer)}},
    {"kv_received", Sender::agent, {req("run", str), req("id", integer), req("at_unix_ns", integer)}},
    // controller -> agent
    {"welcome", Sender::controller, {req("controller_version", str)}},
    {"assign", Sender::controller, {req("run", str), req("assignment", object)}},
    {"connect", Sender::controller, {req("run", str)}},
    {"start", Sender::controller, {req("run", str), req("delay_ms", integer)}},
    {"grant", Sender::controller, {req("run", str), req("worker", integer), req("peer", integer), req("iteration", integer), req("tag", integer)}},
    {"prefill", Sender::controller, {req("run", str), req("id", integer), req("slot", integer), req("start_ns", integer), req("tokens", integer), req("layers", integer), req("flops_per_layer", number), req("layer_shape", object), req("kv_bytes", integer), req("decode", object)}},
    {"prompt", Sender::controller, {req("run", str), req("id", integer), req("address", str), req("port", integer), req("bytes", integer)}},
    {"abort", Sender::controller, {req("run", str), req("reason", str)}},
    {"bye", Sender::controller, {}},
    // either way
    {"error", Sender::either, {req("code", str), req("message", str), opt("field", str)}},
    {"ping", Sender::either, {}},
    {"pong", Sender::either, {}},
  };
  return table;
}
// clang-format on

bool has_type(const nlohmann::json& value, FieldType type) {
  switch (type) {
    case FieldType::string:
      return value.is_string();
    case FieldType::integer:
      return value.is_number_integer();
    case FieldType::number:
      return value.is_number();
    case FieldType::boolean:
      return value.is_boolean();
    case FieldType::object:
      return value.is_object();
    case FieldType::array:
      return value.is_array();
  }
  return false;
}

// "integer 3", "number 1.5", "string": what was found instead, short.
std::string found(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer " + value.dump();
  if (value.is_number_float()) return "number " + value.dump();
  if (value.is_boolean()) return value.dump();
  return value.type_name();
}

Error error(std::string_view code, std::string message, std::string field) {
  return {std::string(code), std::move(message), std::move(field)};
}

}  // namespace

std::span<const MessageSpec> message_specs() {
  return specs();
}

const MessageSpec* find_spec(std::string_view type) {
  const auto& table = specs();
  auto it = std::find_if(table.begin(), table.end(), [&](const MessageSpec& s) { return s.type == type; });
  return it == table.end() ? nullptr : &*it;
}

std::optional<Error> validate(const nlohmann::json& m, std::optional<Sender> from) {
  if (!m.is_object()) return error(code::not_object, fmt::format("a message is a JSON object, not {}", found(m)), "");

  const auto v = m.find("v");
  if (v == m.end())
    return error(code::missing_field, fmt::format("missing \"v\" (the protocol version, {})", kVersion), "v");
  if (!v->is_number_integer())
    return error(code::wrong_type, fmt::format("\"v\" must be an integer, not {}", found(*v)), "v");
  if (*v != kVersion)
    return error(code::unsupported_version,
                 fmt::format("protocol version {} is not supported (this side speaks {})", v->dump(), kVersion), "v");

  const auto t = m.find("type");
  if (t == m.end()) return error(code::missing_field, "missing \"type\"", "type");
  if (!t->is_string())
    return error(code::wrong_type, fmt::format("\"type\" must be a string, not {}", found(*t)), "type");
  const auto& type = t->get_ref<const std::string&>();
  const MessageSpec* spec = find_spec(type);
  if (!spec) return error(code::unknown_type, fmt::format("unknown message type \"{}\"", type), "type");
  if (from && spec->sender != Sender::either && spec->sender != *from)
    return error(
        code::wrong_direction,
        fmt::format("\"{}\" is sent by the {}, not by the {}", type, to_string(spec->sender), to_string(*from)),
        "type");

  for (const FieldSpec& f : spec->fields) {
    const auto it = m.find(f.name);
    if (it == m.end()) {
      if (!f.required) continue;
      return error(code::missing_field, fmt::format("\"{}\" needs \"{}\" ({})", type, f.name, to_string(f.type)),
                   std::string(f.name));
    }
    if (!has_type(*it, f.type))
      return error(code::wrong_type,
                   fmt::format("\"{}\" of \"{}\" must be {}, not {}", f.name, type, to_string(f.type), found(*it)),
                   std::string(f.name));
  }
  return std::nullopt;
}

}  // namespace wanlab::protocol
