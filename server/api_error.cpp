#include "server/api_error.h"

#include "util/json.h"

namespace sluice::server {

std::string ApiError::to_json() const {
  auto nullable = [](const std::string& s) { return s.empty() ? std::string("null") : json::quote(s); };
  return "{\"error\":{\"message\":" + json::quote(message) + ",\"type\":" + json::quote(type) +
         ",\"param\":" + nullable(param) + ",\"code\":" + nullable(code) + "}}";
}

ApiError ApiError::bad_request(std::string message, std::string param) {
  return {400, std::move(message), "invalid_request_error", std::move(param), ""};
}

ApiError ApiError::unauthorized() {
  return {401, "Invalid or missing API key. Send `Authorization: Bearer KEY`.", "invalid_request_error", "",
          "invalid_api_key"};
}

ApiError ApiError::not_found(const std::string& path) {
  return {404, "Unknown path: " + path, "invalid_request_error", "", "not_found"};
}

ApiError ApiError::method_not_allowed(const std::string& method, const std::string& path) {
  return {405, "Method " + method + " is not allowed on " + path, "invalid_request_error", "", "method_not_allowed"};
}

ApiError ApiError::payload_too_large(std::size_t limit) {
  return {413, "Request body larger than the limit of " + std::to_string(limit) + " bytes", "invalid_request_error",
          "", "payload_too_large"};
}

ApiError ApiError::uri_too_long(std::size_t limit) {
  return {414, "Request target longer than the limit of " + std::to_string(limit) + " bytes", "invalid_request_error",
          "", "uri_too_long"};
}

ApiError ApiError::header_fields_too_large(std::size_t limit) {
  return {431, "Request header larger than the limit of " + std::to_string(limit) + " bytes",
          "invalid_request_error", "", "header_fields_too_large"};
}

ApiError ApiError::overloaded(std::string message) {
  return {503, std::move(message), "server_error", "", "server_overloaded"};
}

ApiError ApiError::shutting_down() {
  return {503, "The server is shutting down", "server_error", "", "server_shutting_down"};
}

ApiError ApiError::draining() {
  return ApiError{503, "the server is draining: it finishes the requests in flight and stops; send this one to another replica",
                  "unavailable_error", "", "draining"};
}

ApiError ApiError::server_error(std::string message) {
  return {500, std::move(message), "server_error", "", ""};
}

}  // namespace sluice::server
