// Internal to src/io: JSON parsing that rejects duplicate object keys (nlohmann keeps the last one
// silently, which would let a crafted safetensors header or shard index hide an entry).
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/weights.h"

namespace io::detail {

// Parses [first, last); throws io::Error "<origin>: <what> is not valid JSON: ..." or
// "<origin>: duplicate key '<k>' in <what>".
template <typename It>
nlohmann::json parse_json_strict(It first, It last, const std::string& origin, const std::string& what) {
  std::vector<std::set<std::string>> scopes;
  std::string duplicate;
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      scopes.emplace_back();
    } else if (event == E::object_end) {
      if (!scopes.empty()) scopes.pop_back();
    } else if (event == E::key && !scopes.empty() && parsed.is_string()) {
      if (!scopes.back().insert(parsed.get<std::string>()).second && duplicate.empty()) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(first, last, cb);
  } catch (const nlohmann::json::exception& e) {
    throw Error(origin + ": " + what + " is not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) throw Error(origin + ": duplicate key '" + duplicate + "' in " + what);
  return j;
}

}  // namespace io::detail
