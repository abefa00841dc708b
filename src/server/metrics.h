// The server's Prometheus counters (GET /metrics): requests by route and status, batches (a histogram
// of sequences per batch), sequences and tokens run, and the queue depth the scheduler reports.
// Every method is thread-safe: the HTTP threads count requests, the model thread counts batches.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace server {

class Metrics {
 public:
  void request(const std::string& route, int status);
  // One forward batch of `sequences` sequences padded to `padded_tokens` (B · T) holding `tokens` real ones.
  void batch(int64_t sequences, int64_t tokens, int64_t padded_tokens);
  // The text exposition format (version 0.0.4); queue_depth is read at the call.
  std::string prometheus(int64_t queue_depth, int64_t in_flight) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (route, status) → count
  // Batch sizes in sequences: cumulative buckets as Prometheus histograms want them.
  static constexpr int64_t kBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<int64_t> batch_buckets_ = std::vector<int64_t>(std::size(kBuckets), 0);
  int64_t batches_ = 0, sequences_ = 0, tokens_ = 0, padded_tokens_ = 0;
};

}  // namespace server
