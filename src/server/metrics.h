// The server's Prometheus counters (GET /metrics): requests by route and status, batches (histograms
// of sequences per batch and of the forward's seconds), each request's seconds in the queue, requests
// dropped after --request-timeout, sequences and tokens run, and the queue depth the scheduler reports.
// Every method is thread-safe: the HTTP threads count requests, the model thread counts batches. A
// server has one Metrics per model it serves; prometheus() writes them all, each series labelled
// model="NAME".
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace server {

// A Prometheus histogram: cumulative counts of observations ≤ each bound, their sum and count.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts = std::vector<int64_t>(bounds.size(), 0);
  double sum = 0;
  int64_t count = 0;
  void observe(double x);
  // labels: `model="a"` (without braces), put before le.
  void write(std::string& out, const std::string& name, const std::string& labels) const;
};

class Metrics;

// One model's metrics for the exposition: its name (the `model` label), its counters, and its
// scheduler's queue depth and requests in flight, read at the call.
struct ModelMetrics {
  std::string model;
  const Metrics* metrics;
  int64_t queue_depth = 0, in_flight = 0;
};

// The text exposition format (version 0.0.4) of every model's metrics: one HELP/TYPE group per metric,
// one series per model in it.
std::string prometheus(const std::vector<ModelMetrics>& models);

class Metrics {
 public:
  void request(const std::string& route, int status);
  // One forward batch of `sequences` sequences padded to `padded_tokens` (B · T) holding `tokens` real
  // ones, which took `seconds`.
  void batch(int64_t sequences, int64_t tokens, int64_t padded_tokens, double seconds);
  void queued(double seconds);  // a request's wait from submit to its batch's start
  void tokenized(double seconds);  // a request's tokenization (and validation) on its HTTP thread
  void timed_out();             // a request dropped after --request-timeout
  void cancelled();             // a queued request dropped because its client closed the connection

 private:
  friend std::string prometheus(const std::vector<ModelMetrics>& models);
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (route, status) → count
  Histogram batch_size_{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
  Histogram batch_seconds_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram queue_seconds_{{0.0001, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram tokenize_seconds_{{0.00001, 0.0001, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}};
  int64_t sequences_ = 0, tokens_ = 0, padded_tokens_ = 0, timed_out_ = 0, cancelled_ = 0;
};

}  // namespace server
