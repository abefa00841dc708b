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

void Histogram::write(std::string& out, const std::string& name, const std::string& labels) const {
  for (size_t i = 0; i < bounds.size(); ++i) {
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds[i], counts[i]);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, count, name,
                     labels, sum, name, labels, count);
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

namespace {

// A label value as the exposition format quotes it: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string prometheus(const std::vector<ModelMetrics>& models) {
  // Every model's counters at one instant: their mutexes are taken in the list's order (the only
  // place that holds more than one).
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<std::string> labels;
  for (const ModelMetrics& m : models) {
    locks.emplace_back(m.metrics->mutex_);
    labels.push_back("model=\"" + label_value(m.model) + "\"");
  }
  std::string s;
  auto family = [&](const char* name, const char* type, const char* help) {
    s += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  // A gauge or counter with one series per model.
  auto scalar = [&](const char* name, const char* type, const char* help, auto value) {
    family(name, type, help);
    for (size_t i = 0; i < models.size(); ++i) s += fmt::format("{}{{{}}} {}\n", name, labels[i], value(models[i]));
  };
  auto histogram = [&](const char* name, const char* help, Histogram Metrics::*h) {
    family(name, "histogram", help);
    for (size_t i = 0; i < models.size(); ++i) (models[i].metrics->*h).write(s, name, labels[i]);
  };
  family("roformer_requests_total", "counter", "HTTP requests by model, route and status.");
  for (size_t i = 0; i < models.size(); ++i) {
    for (const auto& [key, count] : models[i].metrics->requests_) {
      s += fmt::format("roformer_requests_total{{{},route=\"{}\",status=\"{}\"}} {}\n", labels[i], key.first,
                       key.second, count);
    }
  }
  scalar("roformer_queue_depth", "gauge", "Requests waiting for the model thread.",
         [](const ModelMetrics& m) { return m.queue_depth; });
  scalar("roformer_requests_in_flight", "gauge", "Requests accepted and not yet answered by the model thread.",
         [](const ModelMetrics& m) { return m.in_flight; });
  scalar("roformer_requests_timed_out_total", "counter", "Requests dropped unrun after --request-timeout in the queue.",
         [](const ModelMetrics& m) { return m.metrics->timed_out_; });
  scalar("roformer_requests_cancelled_total", "counter",
         "Requests dropped unrun because their client closed the connection.",
         [](const ModelMetrics& m) { return m.metrics->cancelled_; });
  histogram("roformer_batch_size", "Sequences per forward batch.", &Metrics::batch_size_);
  histogram("roformer_batch_seconds", "Seconds per forward batch on the model thread.", &Metrics::batch_seconds_);
  histogram("roformer_queue_seconds", "Seconds a request waited from submit to its batch's start.",
            &Metrics::queue_seconds_);
  histogram("roformer_tokenize_seconds", "Seconds a request's inputs took to tokenize on its HTTP thread.",
            &Metrics::tokenize_seconds_);
  scalar("roformer_tokens_total", "counter", "Real (unpadded) tokens run through the model.",
         [](const ModelMetrics& m) { return m.metrics->tokens_; });
  scalar("roformer_padded_tokens_total", "counter", "Tokens run including padding (B x T per batch).",
         [](const ModelMetrics& m) { return m.metrics->padded_tokens_; });
  scalar("roformer_sequences_total", "counter", "Sequences run through the model.",
         [](const ModelMetrics& m) { return m.metrics->sequences_; });
  return s;
}

}  // namespace server
