// The JSON Schema subset of the MCP tools' inputs (mcp_schema.hpp).
#include "mcp_schema.hpp"

#include <set>

namespace sluice::serve {
using nlohmann::json;

namespace {

bool hasType(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

std::string typeWords(const json& type) {
  if (type.is_string())
    return "a" +
           std::string(type == "object" || type == "array" || type == "integer" ? "n " : " ") +
           type.get<std::string>();
  std::string out;
  for (std::size_t i = 0; i < type.size(); ++i)
    out += (i == 0 ? "" : i + 1 == type.size() ? " or " : ", ") + typeWords(type[i]);
  return out;
}

std::expected<void, std::string> fail(const std::string& where, const std::string& why) {
  return std::unexpected(where + ": " + why);
}

std::expected<void, std::string> checkObject(const json& schema, const json& v,
                                             const std::string& where) {
  const json empty = json::object();
  const json& props = schema.contains("properties") ? schema["properties"] : empty;
  if (schema.contains("required"))
    for (const auto& name : schema["required"])
      if (!v.contains(name.get<std::string>()))
        return fail(where, "'" + name.get<std::string>() + "' is required");
  const bool closed = schema.value("additionalProperties", true) == false;
  for (const auto& [key, value] : v.items()) {
    if (props.contains(key)) {
      if (auto r = checkJsonSchema(props[key], value, where + "." + key); !r) return r;
    } else if (closed) {
      std::string known;
      for (const auto& [name, _] : props.items()) known += (known.empty() ? "" : ", ") + name;
      return fail(where, "unknown property '" + key + "' (known: " + known + ")");
    }
  }
  return {};
}

}  // namespace

std::expected<void, std::string> checkJsonSchema(const json& schema, const json& v,
                                                 const std::string& where) {
  static const std::set<std::string> known = {
      "type",        "properties", "required",  "additionalProperties",
      "items",       "minItems",   "minLength", "enum",
      "description", "title",      "default"};
  for (const auto& [key, _] : schema.items())
    if (!known.contains(key)) return fail(where, "schema keyword '" + key + "' is not supported");
  if (schema.contains("type")) {
    const json& type = schema["type"];
    bool ok = false;
    if (type.is_string()) ok = hasType(v, type);
    for (const auto& t : type.is_array() ? type : json::array()) ok = ok || hasType(v, t);
    if (!ok) return fail(where, "must be " + typeWords(type));
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const auto& e : schema["enum"]) found = found || e == v;
    if (!found) return fail(where, "must be one of " + schema["enum"].dump());
  }
  if (v.is_string() && schema.contains("minLength") &&
      v.get<std::string>().size() < schema["minLength"].get<std::size_t>())
    return fail(where, schema["minLength"] == 1 ? "must not be empty" : "is too short");
  if (v.is_array()) {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<std::size_t>())
      return fail(where, "must have at least " + schema["minItems"].dump() + " item(s)");
    if (schema.contains("items"))
      for (std::size_t i = 0; i < v.size(); ++i)
        if (auto r = checkJsonSchema(schema["items"], v[i], where + "[" + std::to_string(i) + "]");
            !r)
          return r;
  }
  if (v.is_object()) return checkObject(schema, v, where);
  return {};
}

}  // namespace sluice::serve
