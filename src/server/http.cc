// server::serve_forever: httplib::Server wiring, authentication, error bodies and the signal thread.
#include "server/http.h"

#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <thread>
#include <variant>
#include <vector>

#include "server/openapi.h"


namespace server {
namespace {

using nlohmann::json;

json error_body(const std::string& message, const std::string& type) {
  return {{"error", message}, {"error_type", type}};
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// cpp-httplib's task queue: a connection holds its thread while it is open, idle ones included. This
// pool starts a thread whenever a connection arrives and none is free, up to `max` (then connections
// wait for one), so that idle or slow connections cost a parked thread each instead of starving the
// clients behind them. Threads stay (parked) until shutdown.
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max) : max_(max) {}
  ~ConnectionPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && threads_.size() < max_) {
      try {
        threads_.emplace_back([this] { work(); });
        ++idle_;  // counted idle until it takes a job
      } catch (const std::system_error&) {  // no more threads (ulimit): the connection waits for one
      }
    }
    ready_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, every accepted connection served
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      --idle_;
      lock.unlock();
      fn();
      lock.lock();
      ++idle_;
    }
  }

  const size_t max_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;  // grows only: joined at shutdown
  size_t idle_ = 0;
  bool stopping_ = false;
};

// The request a route is serving on this thread, for client_gone. cpp-httplib 0.11 does not hand a
// handler its socket: it is found once, by the connection's two ports, among the process's sockets.
thread_local const httplib::Request* serving = nullptr;
thread_local int serving_fd = -2;  // -2: not looked up yet; -1: not found

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The socket whose local and peer ports are the request's (unique among loopback connections).
int connection_of(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof local, peer_size = sizeof peer;
    if (e->d_name[0] == '.' || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) {
      continue;
    }
    if (port_of(local) == req.local_port && port_of(peer) == req.remote_port) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// ApiOptions::client_gone: whether the client of the request served on this thread has closed or
// reset its connection (a peek that reads end-of-stream or an error; pending bytes or none: still there).
bool client_gone() {
  if (!serving) return false;
  if (serving_fd == -2) serving_fd = connection_of(*serving);
  if (serving_fd < 0) return false;
  char c;
  const ssize_t n = recv(serving_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// What a route answers: a JSON body, or a stream of server-sent events.
using Reply = std::variant<json, std::unique_ptr<EventStream>>;

// Sends the events as they come (chunked text/event-stream). A client that is gone (a write fails, or
// its socket is no longer writable while the model is quiet) cancels the stream: its slots are freed.
// Streams being sent, and whether the server is waiting for them to end: cpp-httplib's stop() ends a
// chunked response where it is, so on a stop signal with streams open, new requests get 503 while
// those streams run to their ends (within --shutdown-timeout), and only then the server stops; with
// none open it stops at once, as for the other routes.
std::atomic<int64_t> open_streams{0};
std::atomic<bool> draining{false};

// A refusal decided before routing (401 without the API key, 503 while draining) for a request with a
// body: cpp-httplib reads the body only after pre-routing, and a request answered there leaves its
// body on a keep-alive connection to be parsed as the next request (a 400 with the JSON as its
// method). Such a refusal is kept here and sent by the handler or the error handler, after the body
// was read; the connection then stays usable.
struct Refusal {
  int status = 0;  // 0: none
  json body;
};
thread_local Refusal refusal;

// Sends the pending refusal, if any; true when it did.
bool send_refusal(httplib::Response& res) {
  if (refusal.status == 0) return false;
  reply(res, refusal.status, refusal.body);
  refusal = Refusal{};
  return true;
}

void stream_events(httplib::Response& res, std::unique_ptr<EventStream> events) {
  std::shared_ptr<EventStream> s(std::move(events));
  ++open_streams;
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [s](size_t, httplib::DataSink& sink) {
        std::string chunk;
        for (;;) {
          if (!s->next(chunk, std::chrono::milliseconds(100))) {
            sink.done();
            return true;
          }
          if (!chunk.empty()) {
            if (sink.write(chunk.data(), chunk.size())) return true;
            s->cancel();
            return false;
          }
          if (!sink.is_writable()) {
            s->cancel();
            return false;
          }
        }
      },
      [s](bool success) {
        if (!success) s->cancel();
        --open_streams;
      });
}

// A body's "stream" flag (absent: false).
bool wants_stream(const json& body) {
  if (!body.is_object() || !body.contains("stream") || body["stream"].is_null()) return false;
  if (!body["stream"].is_boolean()) throw ApiError(422, "Validation", "`stream` must be a boolean");
  return body["stream"].get<bool>();
}

// The request body as JSON (422 when malformed).
json parse_body(const httplib::Request& req) {
  try {
    return json::parse(req.body);
  } catch (const json::exception& e) {  // parse errors, and numbers beyond double (1e999: out_of_range)
    throw ApiError(422, "Validation", std::string("malformed JSON body: ") + e.what());
  }
}

// Answers a request with what `f` returns, every failure as TEI's error body.
void answer(const httplib::Request& req, httplib::Response& res, const std::function<Reply()>& f) {
  if (send_refusal(res)) return;
  serving = &req;
  serving_fd = -2;
  struct Done {
    ~Done() { serving = nullptr; }
  } done;
  try {
    Reply r = f();
    if (auto* j = std::get_if<json>(&r)) {
      reply(res, 200, *j);
    } else {
      stream_events(res, std::move(std::get<std::unique_ptr<EventStream>>(r)));
    }
  } catch (const ApiError& e) {
    reply(res, e.status, error_body(e.what(), e.type));
  } catch (const std::exception& e) {
    reply(res, 500, error_body(e.what(), "Backend"));
  }
}

using Call = std::function<Reply(Api&, const json&)>;

// Every route served, with its call; each must be in openapi.json (check_documented).
struct Served {
  const char* method;  // "get" or "post", as OpenAPI spells it
  const char* path;
  Call call;
};

const std::vector<Served>& served() {
  static const std::vector<Served> routes = {
      {"post", "/embed", [](Api& a, const json& r) { return a.embed(r); }},
      {"post", "/v1/embeddings", [](Api& a, const json& r) { return a.openai_embeddings(r); }},
      {"post", "/predict", [](Api& a, const json& r) { return a.predict(r); }},
      {"post", "/rerank", [](Api& a, const json& r) { return a.rerank(r); }},
      {"post", "/v1/rerank", [](Api& a, const json& r) { return a.v1_rerank(r); }},
      {"post", "/embed_all", [](Api& a, const json& r) { return a.embed_all(r); }},
      {"post", "/embed_sparse", [](Api& a, const json& r) { return a.embed_sparse(r); }},
      {"post", "/similarity", [](Api& a, const json& r) { return a.similarity(r); }},
      {"post", "/fill-mask", [](Api& a, const json& r) { return a.fill_mask(r); }},
      {"post", "/token-classification", [](Api& a, const json& r) { return a.token_classification(r); }},
      {"post", "/question-answering", [](Api& a, const json& r) { return a.question_answering(r); }},
      {"post", "/translate", [](Api& a, const json& r) { return a.translate(r); }},
      {"post", "/generate", [](Api& a, const json& r) -> Reply {
         if (wants_stream(r)) return a.generate_stream(r);
         return a.generate(r);
       }},
      {"post", "/generate_stream", [](Api& a, const json& r) -> Reply { return a.generate_stream(r); }},
      {"post", "/v1/completions", [](Api& a, const json& r) -> Reply {
         if (wants_stream(r)) return a.completions_stream(r);
         return a.completions(r);
       }},
      {"post", "/tokenize", [](Api& a, const json& r) { return a.tokenize(r); }},
      {"post", "/decode", [](Api& a, const json& r) { return a.decode(r); }},
      {"post", "/", [](Api& a, const json& r) -> Reply {  // huggingface_hub's text_generation(stream=True) posts here
         if (a.is_generator() && wants_stream(r)) return a.generate_stream(r);
         return a.root(r);
       }},
      {"get", "/info", [](Api& a, const json&) { return a.info(); }},
      {"get", "/v1/models", [](Api& a, const json&) { return a.models(); }},
  };
  return routes;
}

// Routes answered outside Api (GET): probes, metrics and the OpenAPI document.
constexpr const char* kServerRoutes[] = {"/health", "/metrics", "/openapi.json"};

// The method `path` is served with ("GET" or "POST"; "" for no route), for 405's Allow header.
std::string allowed_methods(const std::string& path) {
  for (const Served& r : served()) {
    if (path == r.path) return std::string(r.method) == "post" ? "POST" : "GET";
  }
  for (const char* p : kServerRoutes) {
    if (path == p) return "GET";
  }
  return "";
}

// One model served: its Api with its own Scheduler (queue, token budget, model thread) or Generation
// (slots, model thread), and its own Metrics.
struct Model {
  std::string name;
  Metrics metrics;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Generation> generation;  // a causal LM's slots
  std::unique_ptr<Api> api;
};

// The model a request is answered by on this thread, for the metrics of its access (null: the first).
thread_local Model* serving_model = nullptr;

// The models served, and which one a request is for: a /models/NAME/ prefix names it; else, with
// several models, the body's "model" field; else the first --model. With one model a request without
// the prefix is that model's whatever its "model" field says (OpenAI's answers echo the field).
class Models {
 public:
  std::vector<std::unique_ptr<Model>> all;

  Model& first() const { return *all.front(); }

  ApiError unknown(const std::string& name) const {
    std::string served;
    for (const auto& m : all) served += (served.empty() ? "" : ", ") + m->name;
    return ApiError(404, "NotFound", "model \"" + name + "\" is not served here (served: " + served + ")");
  }

  Model& named(const std::string& name) const {
    for (const auto& m : all) {
      if (m->name == name) return *m;
    }
    throw unknown(name);
  }

  // A request without the prefix: by its body's "model" (a string) when several models are served.
  Model& for_body(const json& body) const {
    if (all.size() > 1 && body.is_object()) {
      const auto it = body.find("model");
      if (it != body.end() && it->is_string()) return named(it->get<std::string>());
    }
    return first();
  }

  // "/models/NAME/ROUTE" → NAME's model and "/ROUTE" (the longest served name that the path continues
  // with "/": names may hold "/", as Hugging Face ids do, sent as is or as %2F; "/models/NAME" alone is
  // "/models/NAME/"). Null for a path without the prefix; 404 for a name not served.
  std::pair<Model*, std::string> split(const std::string& path) const {
    static const std::string prefix = "/models/";
    if (path.rfind(prefix, 0) != 0) return {nullptr, path};
    std::string rest = path.substr(prefix.size());
    Model* best = nullptr;
    for (const auto& m : all) {
      if (rest == m->name) rest += '/';  // /models/NAME is POST /'s /models/NAME/ (huggingface_hub posts there)
      if (rest.size() > m->name.size() && rest.compare(0, m->name.size(), m->name) == 0 &&
          rest[m->name.size()] == '/' && (!best || m->name.size() > best->name.size())) {
        best = m.get();
      }
    }
    if (!best) throw unknown(rest.substr(0, rest.find('/')));
    return {best, rest.substr(best->name.size())};
  }

  // Every model's metrics (or only `only`'s) in the exposition format: /metrics.
  std::string prometheus(const Model* only = nullptr) const {
    std::vector<ModelMetrics> m;
    for (const auto& x : all) {
      if (only && x.get() != only) continue;
      m.push_back({x->name, &x->metrics, x->scheduler->queue_depth(), x->scheduler->in_flight()});
    }
    return server::prometheus(m);
  }

  // /v1/models: every model served, in --model order.
  json list() const {
    json data = json::array();
    for (const auto& m : all) data.push_back(m->api->models()["data"][0]);
    return {{"object", "list"}, {"data", std::move(data)}};
  }
};

// The route a path names (a /models/NAME/ prefix taken off; "" when the name is not served), for the
// metrics label and 405's Allow header.
std::string route_of(const Models& models, const std::string& path) {
  try {
    return models.split(path).second;
  } catch (const ApiError&) {
    return "";
  }
}

// The metrics label of a path: a route, or "other" (so /metrics stays bounded).
std::string metric_route(const Models& models, const std::string& path) {
  const std::string route = route_of(models, path);
  return allowed_methods(route).empty() ? "other" : route;
}

const Served* find_served(const std::string& method, const std::string& path) {
  for (const Served& r : served()) {
    if (method == r.method && path == r.path) return &r;
  }
  return nullptr;
}

// Registers every route, plain (the model by the body, else the first) and under /models/NAME/.
void add_routes(httplib::Server& svr, const Models& models, const json& openapi) {
  for (const Served& r : served()) {
    check_documented(openapi, r.method, r.path);
    check_documented(openapi, r.method, std::string("/models/{model}") + r.path);
    const bool post = std::string(r.method) == "post";
    const bool list = std::string(r.path) == "/v1/models";
    const auto handler = [&models, call = r.call, post, list](const httplib::Request& req, httplib::Response& res) {
      answer(req, res, [&]() -> Reply {
        if (list) return models.list();
        const json body = post ? parse_body(req) : json();
        Model& m = models.for_body(body);
        serving_model = &m;
        return call(*m.api, body);
      });
    };
    if (post) {
      svr.Post(r.path, handler);
    } else {
      svr.Get(r.path, handler);
    }
  }
  for (const char* path : kServerRoutes) check_documented(openapi, "get", path);
  for (const char* path : {"/health", "/metrics"}) check_documented(openapi, "get", std::string("/models/{model}") + path);
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  svr.Get("/metrics", [&models](const httplib::Request&, httplib::Response& res) {
    res.set_content(models.prometheus(), "text/plain; version=0.0.4");
  });
  svr.Get("/openapi.json", [doc = openapi.dump()](const httplib::Request&, httplib::Response& res) {
    res.set_content(doc, "application/json");
  });
  // /models/NAME/ROUTE: one handler per method, which finds the model and the route.
  for (const char* method : {"get", "post"}) {
    const auto handler = [&models, method](const httplib::Request& req, httplib::Response& res) {
      if (std::string(method) == "get") {  // the model's own /health and /metrics
        try {
          const auto [m, route] = models.split(req.path);
          serving_model = m;
          if (route == "/health") {
            res.status = 200;
            return;
          }
          if (route == "/metrics") {
            res.set_content(models.prometheus(m), "text/plain; version=0.0.4");
            return;
          }
        } catch (const ApiError&) {  // answered below
        }
      }
      answer(req, res, [&]() -> Reply {
        const auto [m, route] = models.split(req.path);
        const Served* r = find_served(method, route);
        if (!r) {
          const std::string allow = allowed_methods(route);
          if (allow.empty() || allow == req.method) throw ApiError(404, "NotFound", "no route " + req.method + " " + req.path);
          res.set_header("Allow", allow);
          throw ApiError(405, "MethodNotAllowed", req.method + " " + req.path + ": method not allowed (allowed: " +
                                                      allow + ")");
        }
        serving_model = m;
        const json body = std::string(method) == "post" ? parse_body(req) : json();
        return r->call(*m->api, body);
      });
    };
    if (std::string(method) == "get") {
      svr.Get("/models/(.+)", handler);
    } else {
      svr.Post("/models/(.+)", handler);
    }
  }
}

// When the request being served on this thread began (pre-routing), for the access log's duration.
thread_local std::chrono::steady_clock::time_point request_start;

// One JSON line per request on stderr, written with one call so that lines of concurrent requests
// do not interleave.
void access_log(const httplib::Request& req, const httplib::Response& res, const std::string& model) {
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - request_start).count();
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  json line = {{"time", stamp},       {"remote", req.remote_addr}, {"method", req.method},
               {"path", req.path},    {"status", res.status},      {"ms", std::round(ms * 1000) / 1000},
               {"bytes_in", req.body.size()}, {"bytes_out", res.body.size()}, {"model", model}};
  if (res.status >= 400) {
    const json body = json::parse(res.body, nullptr, false);
    if (body.is_object() && body.contains("error_type")) line["error_type"] = body["error_type"];
  }
  const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
}

// Before routing: the access log's clock starts; Bearer authentication (/health and /metrics stay
// open for probes and scrapers, also under /models/NAME/).
void add_pre_routing(httplib::Server& svr, const Models& models, const std::string& key) {
  svr.set_pre_routing_handler([&models, key](const httplib::Request& req, httplib::Response& res) {
    request_start = std::chrono::steady_clock::now();
    serving_model = nullptr;
    refusal = Refusal{};
    // A request without a body is refused here; one with a body once it is read (Refusal).
    const auto refuse = [&](int status, json body) {
      if (req.method == "GET" || req.method == "HEAD") {
        reply(res, status, body);
        return httplib::Server::HandlerResponse::Handled;
      }
      refusal = Refusal{status, std::move(body)};
      return httplib::Server::HandlerResponse::Unhandled;
    };
    if (draining) return refuse(503, error_body("the server is shutting down", "Overloaded"));
    if (key.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string route = route_of(models, req.path);
    if (route == "/health" || route == "/metrics") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) == 0 && same_secret(auth.substr(prefix.size()), key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    return refuse(401, error_body("missing or wrong API key (Authorization: Bearer KEY)", "Unauthorized"));
  });
}

// Errors httplib produces itself (404 unknown route, 405 a route's other methods, 413 body too large,
// 400 bad request) get TEI's body.
void add_error_bodies(httplib::Server& svr, const Models& models, int64_t payload_limit) {
  svr.set_error_handler([&models, payload_limit](const httplib::Request& req, httplib::Response& res) {
    if (send_refusal(res) || !res.body.empty()) return;
    const std::string allow = allowed_methods(route_of(models, req.path));
    // A route asked with another method: 404 from the router, or 400 for methods httplib does not parse.
    if ((res.status == 404 || res.status == 400) && !allow.empty() && req.method != allow) {
      res.set_header("Allow", allow);
      reply(res, 405, error_body(req.method + " " + req.path + ": method not allowed (allowed: " + allow + ")",
                                 "MethodNotAllowed"));
    } else if (res.status == 404) {
      reply(res, 404, error_body("no route " + req.method + " " + req.path, "NotFound"));
    } else if (res.status == 413) {
      reply(res, 413, error_body("request body larger than the limit of " + std::to_string(payload_limit) +
                                     " bytes (--payload-limit)", "Validation"));
    } else {
      reply(res, res.status, error_body("bad request (HTTP " + std::to_string(res.status) + ")", "Validation"));
    }
  });
}

}  // namespace

void check_loopback(const std::string& host) {
  if (host != "127.0.0.1" && host != "::1" && host != "localhost") {
    throw std::invalid_argument("--host " + host + ": the server listens on loopback only (127.0.0.1, ::1, localhost)");
  }
}

bool same_secret(const std::string& a, const std::string& b) {
  size_t diff = a.size() ^ b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b.empty() ? 0 : b[i % b.size()]);
  }
  return diff == 0;
}

void block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::vector<int> split_threads(int threads, size_t models) {
  if (models <= 1) return std::vector<int>(models, threads);
  const int total = threads > 0 ? threads : omp_get_max_threads();
  const int n = static_cast<int>(models);
  std::vector<int> share(models);
  for (int i = 0; i < n; ++i) share[i] = std::max(1, total / n + (i < total % n ? 1 : 0));
  return share;
}

int serve_forever(const std::vector<ServedModel>& served_models, const ServerOptions& o) {
  check_loopback(o.host);
  block_stop_signals();
  if (served_models.empty()) throw std::invalid_argument("server::serve_forever: no model to serve");
  const std::vector<int> threads = split_threads(o.api.scheduler.threads, served_models.size());
  // The OpenMP workers that loaded the models (this thread's team) end here. libgomp lets idle workers
  // spin before they sleep only while it manages no more threads than there are CPUs; with this
  // team alive beside the model threads', every parallel region of a forward woke its workers from
  // sleep (two cores: 16.1 ms instead of 9.6 ms per 64-token int8 forward).
  omp_pause_resource_all(omp_pause_soft);
  Models models;
  for (size_t i = 0; i < served_models.size(); ++i) {
    const ServedModel& s = served_models[i];
    for (const auto& m : models.all) {
      if (m->name == s.name) throw std::invalid_argument("two models named \"" + s.name + "\"");
    }
    auto m = std::make_unique<Model>();
    m->name = s.name;
    ApiOptions api_options = o.api;
    api_options.model_id = s.name;
    api_options.scheduler.threads = threads[i];
    api_options.client_gone = client_gone;
    api_options.scheduler.slots = o.api.generation.slots;  // a translation model's step batcher
    api_options.scheduler.max_total_tokens = o.api.generation.max_total_tokens;
    m->scheduler = std::make_unique<Scheduler>(s.backend, api_options.scheduler, m->metrics);
    if (s.backend.lm) {
      GenerationOptions g = o.api.generation;
      g.threads = threads[i];
      g.max_queued = o.api.scheduler.max_concurrent_requests;
      m->generation = std::make_unique<Generation>(*s.backend.lm, *s.backend.lm_tokenizer, g, m->metrics);
    }
    m->api = std::make_unique<Api>(s.backend, *m->scheduler, m->metrics, api_options, m->generation.get());
    models.all.push_back(std::move(m));
  }
  std::vector<std::string> names;
  for (const auto& m : models.all) names.push_back(m->name);
  httplib::Server svr;
  const int connections = o.http_threads;
  svr.new_task_queue = [connections] { return new ConnectionPool(static_cast<size_t>(connections)); };
  svr.set_payload_max_length(static_cast<size_t>(o.payload_limit));
  svr.set_tcp_nodelay(true);  // headers and body go out as separate writes: Nagle would hold the body ~40 ms
  svr.set_read_timeout(o.read_timeout_s, 0);
  svr.set_write_timeout(o.write_timeout_s, 0);
  svr.set_keep_alive_timeout(o.keep_alive_timeout_s);
  svr.set_keep_alive_max_count(static_cast<size_t>(o.keep_alive_max_requests));
  add_pre_routing(svr, models, o.api_key);
  add_routes(svr, models, openapi_document(names));
  add_error_bodies(svr, models, o.payload_limit);
  const bool log = o.access_log;
  svr.set_logger([&models, log](const httplib::Request& req, const httplib::Response& res) {
    Model& m = serving_model ? *serving_model : models.first();
    m.metrics.request(metric_route(models, req.path), res.status);
    if (log) access_log(req, res, m.name);
  });
  // Debian's cpp-httplib is compiled with a listen backlog of 5: a burst of new connections would see
  // SYNs dropped and retried a second later. The listening socket is kept to raise it after bind.
  int listener = -1;
  svr.set_socket_options([&listener](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listener = sock;
  });
  const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port));
  if (listener >= 0) ::listen(listener, SOMAXCONN);
  std::string listing;
  for (const std::string& n : names) listing += (listing.empty() ? "" : ", ") + n;
  std::cerr << "roformer serve: " << listing << " listening on http://" << o.host << ":" << port << std::endl;
  // The signal thread: waits for SIGINT/SIGTERM (blocked everywhere), then stops the listener and
  // gives what was accepted --shutdown-timeout to be answered; what is still queued then is dropped.
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::thread signals([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    std::unique_lock<std::mutex> lock(done_mutex);
    if (done) return;
    std::cerr << "roformer serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping" << std::endl;
    const auto timeout = std::chrono::duration<double>(o.shutdown_timeout_s);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (open_streams > 0) {  // the streams accepted run to their ends first (stop() would cut them)
      draining = true;
      while (open_streams > 0 && std::chrono::steady_clock::now() < deadline) {
        done_cv.wait_for(lock, std::chrono::milliseconds(20));
      }
    }
    svr.stop();
    if (!done_cv.wait_until(lock, deadline, [&] { return done; })) {
      int64_t n = 0;
      for (const auto& m : models.all) {
        n += m->scheduler->drop_queued("the server is shutting down: --shutdown-timeout passed before this "
                                       "request reached the model");
      }
      std::cerr << "roformer serve: --shutdown-timeout passed, " << n << " queued requests answered 503" << std::endl;
    }
  });
  const bool ok = svr.listen_after_bind();  // returns once stopped, its connections answered
  {
    std::lock_guard<std::mutex> lock(done_mutex);
    done = true;
  }
  done_cv.notify_all();
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes the signal thread if no signal came
  signals.join();
  for (const auto& m : models.all) {  // every queue drains (the stops run their models' threads to the end)
    m->scheduler->stop();
    if (m->generation) m->generation->stop();
  }
  return ok ? 0 : 1;
}

}  // namespace server
