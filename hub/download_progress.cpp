#include "hub/download_progress.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace sluice::hub {

void DownloadProgress::begin(const std::string& repo) {
  std::lock_guard lock(mutex_);
  state_ = View{};
  state_.repo = repo;
  state_.phase = "resolving";
  started_ = std::chrono::steady_clock::now();
}

void DownloadProgress::set_phase(const std::string& phase) {
  std::lock_guard lock(mutex_);
  state_.phase = phase;
}

void DownloadProgress::plan(int files, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  state_.files_total = files;
  state_.total_bytes = bytes;
  state_.phase = "downloading";
  started_ = std::chrono::steady_clock::now();
}

void DownloadProgress::add_bytes(std::uint64_t n) {
  std::lock_guard lock(mutex_);
  state_.done_bytes += n;
}

void DownloadProgress::drop_bytes(std::uint64_t n) {
  std::lock_guard lock(mutex_);
  state_.done_bytes -= std::min(n, state_.done_bytes);
}

void DownloadProgress::file_done(const std::string& name) {
  std::lock_guard lock(mutex_);
  ++state_.files_done;
  state_.finished.push_back(name);
}

void DownloadProgress::fail(const std::string& error) {
  std::lock_guard lock(mutex_);
  state_.phase = "failed";
  state_.error = error;
}

DownloadProgress::View DownloadProgress::view() const {
  std::lock_guard lock(mutex_);
  View v = state_;
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return v;
}

std::string loading_health_json(const DownloadProgress::View& v, const std::string& model) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("status"), w.String("loading");
  w.Key("model"), w.String(model.c_str());
  w.Key("download");
  w.StartObject();
  w.Key("phase"), w.String(v.phase.c_str());
  w.Key("files_done"), w.Int(v.files_done);
  w.Key("files_total"), w.Int(v.files_total);
  w.Key("bytes_done"), w.Uint64(v.done_bytes);
  w.Key("bytes_total"), w.Uint64(v.total_bytes);
  w.Key("percent"), w.Double(v.total_bytes ? 100.0 * static_cast<double>(v.done_bytes) / static_cast<double>(v.total_bytes)
                                           : (v.phase == "done" || v.phase == "loading" ? 100.0 : 0.0));
  w.Key("seconds"), w.Double(v.seconds);
  if (!v.error.empty()) w.Key("error"), w.String(v.error.c_str());
  w.EndObject();
  w.EndObject();
  return {buffer.GetString(), buffer.GetSize()};
}

}  // namespace sluice::hub
