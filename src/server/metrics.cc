// server::Metrics: counters under one mutex, written out in Prometheus' text format.
#include "server/metrics.h"

#include <sstream>

namespace server {

void Metrics::request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
}

void Metrics::batch(int64_t sequences, int64_t tokens, int64_t padded_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++batches_;
  sequences_ += sequences;
  tokens_ += tokens;
  padded_tokens_ += padded_tokens;
  for (size_t i = 0; i < std::size(kBuckets); ++i) {
    if (sequences <= kBuckets[i]) ++batch_buckets_[i];
  }
}

std::string Metrics::prometheus(int64_t queue_depth, int64_t in_flight) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream s;
  s << "# HELP roformer_requests_total HTTP requests by route and status.\n"
    << "# TYPE roformer_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    s << "roformer_requests_total{route=\"" << key.first << "\",status=\"" << key.second << "\"} " << count << '\n';
  }
  s << "# HELP roformer_queue_depth Requests waiting for the model thread.\n"
    << "# TYPE roformer_queue_depth gauge\nroformer_queue_depth " << queue_depth << '\n'
    << "# HELP roformer_requests_in_flight Requests accepted and not yet answered by the model thread.\n"
    << "# TYPE roformer_requests_in_flight gauge\nroformer_requests_in_flight " << in_flight << '\n'
    << "# HELP roformer_batch_size Sequences per forward batch.\n# TYPE roformer_batch_size histogram\n";
  for (size_t i = 0; i < std::size(kBuckets); ++i) {
    s << "roformer_batch_size_bucket{le=\"" << kBuckets[i] << "\"} " << batch_buckets_[i] << '\n';
  }
  s << "roformer_batch_size_bucket{le=\"+Inf\"} " << batches_ << '\n'
    << "roformer_batch_size_sum " << sequences_ << "\nroformer_batch_size_count " << batches_ << '\n'
    << "# HELP roformer_tokens_total Real (unpadded) tokens run through the model.\n"
    << "# TYPE roformer_tokens_total counter\nroformer_tokens_total " << tokens_ << '\n'
    << "# HELP roformer_padded_tokens_total Tokens run including padding (B x T per batch).\n"
    << "# TYPE roformer_padded_tokens_total counter\nroformer_padded_tokens_total " << padded_tokens_ << '\n';
  return s.str();
}

}  // namespace server
