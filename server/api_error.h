#pragma once
// Errors in OpenAI's shape: {"error":{"message","type","param","code"}} with an HTTP status.
#include <string>
#include <utility>
#include <variant>

namespace sluice::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" → null
  std::string code;   // "" → null

  std::string to_json() const;

  static ApiError bad_request(std::string message, std::string param = "");
  static ApiError unauthorized();
  static ApiError not_found(const std::string& path);
  static ApiError method_not_allowed(const std::string& method, const std::string& path);
  static ApiError payload_too_large(std::size_t limit);
  static ApiError uri_too_long(std::size_t limit);              // 414
  static ApiError header_fields_too_large(std::size_t limit);   // 431
  static ApiError overloaded(std::string message);      // 503: the queue is full
  static ApiError shutting_down();                      // 503: cancelled by shutdown before it started
  static ApiError draining();                           // 503: the server finishes its work and stops
  static ApiError server_error(std::string message);    // 500
};

// A parsed value or the error to answer with.
template <class T>
class ApiResult {
 public:
  ApiResult(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  ApiResult(ApiError error) : state_(std::in_place_index<1>, std::move(error)) {}
  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(state_); }
  const T& value() const { return std::get<0>(state_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  const ApiError& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, ApiError> state_;
};

}  // namespace sluice::server
