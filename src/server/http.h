// `roformer serve`'s HTTP side (cpp-httplib): the routes of server/api.h on a loopback address,
// Bearer authentication, the request-body limit and connection timeouts, TEI's error bodies for
// every failure, request metrics, a JSON access log line per request, /openapi.json, and a clean
// stop on SIGINT/SIGTERM (stop accepting, answer what was accepted, return 0). Several models can be
// served at once, each with its own queue and model thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infer/pipeline.h"
#include "server/api.h"

namespace server {

struct ServerOptions {
  std::string host = "127.0.0.1";   // loopback only: 127.0.0.1, ::1 or localhost
  int port = 8080;                   // 0: any free port (printed on the "listening" line)
  std::string api_key;               // "": open; else every route but /health and /metrics needs it
  int64_t payload_limit = 2 << 20;   // request body bytes; more: 413
  // Connections served at once (tokenization runs on their threads). cpp-httplib gives each open
  // connection a thread; threads start as connections need them, up to this many, so this bounds the
  // idle connections that can be held before new clients wait.
  int http_threads = 1024;
  // A connection is closed when a read or write waits longer than these, or when it has been idle
  // (between keep-alive requests) for keep_alive_timeout_s or served keep_alive_max_requests.
  int read_timeout_s = 5, write_timeout_s = 5, keep_alive_timeout_s = 5;
  int keep_alive_max_requests = 100;
  // After SIGINT/SIGTERM, seconds to answer what was accepted; then what is still queued is answered
  // 503 unrun (the batch running finishes) and the server exits 0.
  double shutdown_timeout_s = 30;
  bool access_log = true;            // one JSON line per request on stderr
  ApiOptions api;                    // with the scheduler's options
};

// Throws std::invalid_argument for a host that is not a loopback name.
void check_loopback(const std::string& host);

// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread it starts later: call it
// before any other thread exists (before loading the model, whose OpenMP threads would otherwise take
// the signal's default action), so that only serve_forever's signal thread receives them.
void block_stop_signals();
// One model of a server: its name (/v1/models' id, OpenAI's "model", the /models/NAME/ prefix, the
// metrics' model label; options.api.model_id is not used) and what runs it.
struct ServedModel {
  std::string name;
  Backend backend;
};

// --threads among the model threads of `models` models: with one, `threads` as given (0: OpenMP's
// default); with several, `threads` (0: omp_get_max_threads()) split as evenly as it goes, the first
// ones taking the remainder, at least 1 each. Each model thread runs its own OpenMP team of its share.
std::vector<int> split_threads(int threads, size_t models);

// Serves the models until SIGINT or SIGTERM; returns the exit status (0 after a clean stop: the
// listener closed, every accepted request answered, every model thread joined). A request is
// answered by the model its /models/NAME/ prefix names, else (several models) by its body's "model"
// field, else by the first model; a name not served is a 404 naming those served.
int serve_forever(const std::vector<ServedModel>& models, const ServerOptions& options);

// Constant-time comparison (the API key): the time depends on the lengths only.
bool same_secret(const std::string& a, const std::string& b);

}  // namespace server
