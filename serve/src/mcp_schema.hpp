// The part of JSON Schema that `sluice mcp` publishes for its tools' inputs (type, properties,
// required, additionalProperties, items, minItems, minLength, enum): a call's arguments are
// checked against the tool's own published inputSchema, so what clients read is what is
// enforced. Not a general validator: a keyword outside that set is an error in the schema.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>

namespace sluice::serve {

/// Checks `instance` against `schema`; the error names the first failing place as a path
/// under `where` ("arguments.argv[1]: must be a string").
std::expected<void, std::string> checkJsonSchema(const nlohmann::json& schema,
                                                 const nlohmann::json& instance,
                                                 const std::string& where);

}  // namespace sluice::serve
