// server::Metrics: counters under one mutex, written out in Prometheus' text format.
#include "server/metrics.h"

#include <fmt/core.h>

namespace server {

void Histogram::observe(double x) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (x <= bounds[i]) ++counts[i];
  }
  sum += x;
  ++count;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (size_t i = 0; i < bounds.size(); ++i) {
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], counts[i]);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count, name, sum, name, count);
}

void Metrics::request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
}

void Metrics::batch(int64_t sequences, int64_t tokens, int64_t padded_tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_size_.observe(static_cast<double>(sequences));
  batch_seconds_.observe(seconds);
  sequences_ += sequences;
  tokens_ += tokens;
  padded_tokens_ += padded_tokens;
}

void Metrics::queued(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_seconds_.observe(seconds);
}

void Metrics::tokenized(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  tokenize_seconds_.observe(seconds);
}

void Metrics::timed_out() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++timed_out_;
}

void Metrics::cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++cancelled_;
}

std::string Metrics::prometheus(int64_t queue_depth, int64_t in_flight) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string s = "# HELP roformer_requests_total HTTP requests by route and status.\n"
                  "# TYPE roformer_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    s += fmt::format("roformer_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, count);
  }
  s += fmt::format(
      "# HELP roformer_queue_depth Requests waiting for the model thread.\n"
      "# TYPE roformer_queue_depth gauge\nroformer_queue_depth {}\n"
      "# HELP roformer_requests_in_flight Requests accepted and not yet answered by the model thread.\n"
      "# TYPE roformer_requests_in_flight gauge\nroformer_requests_in_flight {}\n"
      "# HELP roformer_requests_timed_out_total Requests dropped unrun after --request-timeout in the queue.\n"
      "# TYPE roformer_requests_timed_out_total counter\nroformer_requests_timed_out_total {}\n"
      "# HELP roformer_requests_cancelled_total Requests dropped unrun because their client closed the connection.\n"
      "# TYPE roformer_requests_cancelled_total counter\nroformer_requests_cancelled_total {}\n",
      queue_depth, in_flight, timed_out_, cancelled_);
  batch_size_.write(s, "roformer_batch_size", "Sequences per forward batch.");
  batch_seconds_.write(s, "roformer_batch_seconds", "Seconds per forward batch on the model thread.");
  queue_seconds_.write(s, "roformer_queue_seconds", "Seconds a request waited from submit to its batch's start.");
  tokenize_seconds_.write(s, "roformer_tokenize_seconds", "Seconds a request's inputs took to tokenize on its HTTP thread.");
  s += fmt::format(
      "# HELP roformer_tokens_total Real (unpadded) tokens run through the model.\n"
      "# TYPE roformer_tokens_total counter\nroformer_tokens_total {}\n"
      "# HELP roformer_padded_tokens_total Tokens run including padding (B x T per batch).\n"
      "# TYPE roformer_padded_tokens_total counter\nroformer_padded_tokens_total {}\n"
      "# HELP roformer_sequences_total Sequences run through the model.\n"
      "# TYPE roformer_sequences_total counter\nroformer_sequences_total {}\n",
      tokens_, padded_tokens_, sequences_);
  return s;
}

}  // namespace server
