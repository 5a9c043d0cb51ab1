#pragma once
// What the generation-job tests give a GenerationJob in place of a tokenizer and a connection: token
// texts from a table, and a channel that records the answer and the events it is sent. A job's own
// logic runs for real over them.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/generation_job.h"
#include "server/response_channel.h"

namespace sluice::server::test_fakes {

// Token i's text is pieces.at(i); `control` is the control token (EOS).
class TableText : public TokenText {
 public:
  TableText(const std::map<int32_t, std::string>& pieces, int32_t control) : pieces_(pieces), control_(control) {}
  std::string push(int32_t id) override { return pieces_.at(id); }
  std::string flush() override { return ""; }
  std::string piece(int32_t id) override { return pieces_.at(id); }
  bool is_control(int32_t id) override { return id == control_; }

 private:
  const std::map<int32_t, std::string>& pieces_;
  int32_t control_;
};

// Records the answer (status and body) or the stream's events; refuses events past accept_events
// (a client that went away).
class RecordingChannel : public ResponseChannel {
 public:
  void respond(int s, std::string body) override {
    status = s;
    response = std::move(body);
  }
  bool send_event(std::string event) override {
    if (events.size() >= accept_events) return false;
    events.push_back(std::move(event));
    return true;
  }
  void end_stream() override { ended = true; }
  std::shared_ptr<std::atomic<bool>> cancelled() const override { return flag; }
  void set_header(std::string name, std::string value) override { headers.emplace_back(std::move(name), std::move(value)); }

  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string response;
  std::vector<std::string> events;
  std::size_t accept_events = 1000;
  bool ended = false;
  std::shared_ptr<std::atomic<bool>> flag = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace sluice::server::test_fakes
