// GET /openapi.json: the OpenAPI 3.0 document of every route the server answers (request schemas,
// an example body each, response statuses). check_documented is called for each route the HTTP side
// registers, so a route cannot be served undocumented.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace server {

// models: the names served (the /models/{model}/ paths' enum).
nlohmann::json openapi_document(const std::vector<std::string>& models);

// Throws std::logic_error when `document` has no `method` (lower case: "get", "post") for `path`.
void check_documented(const nlohmann::json& document, const std::string& method, const std::string& path);

}  // namespace server
