// server::serve_forever: httplib::Server wiring, authentication, error bodies and the signal thread.
#include "server/http.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <iostream>
#include <stdexcept>
#include <thread>


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

// Runs a route: parses the body (POST), calls the Api, and turns every failure into TEI's error body.
template <class F>
httplib::Server::Handler route(F f, bool post = true) {
  return [f, post](const httplib::Request& req, httplib::Response& res) {
    try {
      json body;
      if (post) {
        try {
          body = json::parse(req.body);
        } catch (const json::exception& e) {  // parse errors, and numbers beyond double (1e999: out_of_range)
          throw ApiError(422, "Validation", std::string("malformed JSON body: ") + e.what());
        }
      }
      reply(res, 200, f(body));
    } catch (const ApiError& e) {
      reply(res, e.status, error_body(e.what(), e.type));
    } catch (const std::exception& e) {
      reply(res, 500, error_body(e.what(), "Backend"));
    }
  };
}

const char* kRoutes[] = {"/", "/embed", "/v1/embeddings", "/v1/models", "/predict", "/similarity",
                         "/tokenize", "/info", "/health", "/metrics"};

std::string metric_route(const std::string& path) {
  for (const char* r : kRoutes) {
    if (path == r) return path;
  }
  return "other";  // unknown paths share one label, so /metrics stays bounded
}

void add_routes(httplib::Server& svr, Api& api, Scheduler& scheduler, Metrics& metrics) {
  svr.Post("/embed", route([&](const json& r) { return api.embed(r); }));
  svr.Post("/v1/embeddings", route([&](const json& r) { return api.openai_embeddings(r); }));
  svr.Post("/predict", route([&](const json& r) { return api.predict(r); }));
  svr.Post("/similarity", route([&](const json& r) { return api.similarity(r); }));
  svr.Post("/tokenize", route([&](const json& r) { return api.tokenize(r); }));
  svr.Post("/", route([&](const json& r) { return api.root(r); }));
  svr.Get("/info", route([&](const json&) { return api.info(); }, false));
  svr.Get("/v1/models", route([&](const json&) { return api.models(); }, false));
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.prometheus(scheduler.queue_depth(), scheduler.in_flight()), "text/plain; version=0.0.4");
  });
}

// Bearer authentication before routing; /health and /metrics stay open (probes, scrapers).
void add_auth(httplib::Server& svr, const std::string& key) {
  if (key.empty()) return;
  svr.set_pre_routing_handler([key](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || req.path == "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) == 0 && same_secret(auth.substr(prefix.size()), key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    reply(res, 401, error_body("missing or wrong API key (Authorization: Bearer KEY)", "Unauthorized"));
    return httplib::Server::HandlerResponse::Handled;
  });
}

// Errors httplib produces itself (404 unknown route, 413 body too large, 400 bad request) get TEI's body.
void add_error_bodies(httplib::Server& svr, int64_t payload_limit) {
  svr.set_error_handler([payload_limit](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
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

int serve_forever(serve::Pipeline& pipeline, const ServerOptions& o) {
  check_loopback(o.host);
  block_stop_signals();
  Metrics metrics;
  Scheduler scheduler(pipeline, o.api.scheduler, metrics);
  Api api(pipeline, scheduler, o.api);
  httplib::Server svr;
  const int threads = o.http_threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(static_cast<size_t>(o.payload_limit));
  add_auth(svr, o.api_key);
  add_routes(svr, api, scheduler, metrics);
  add_error_bodies(svr, o.payload_limit);
  svr.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
    metrics.request(metric_route(req.path), res.status);
  });
  const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port));
  std::cerr << "roformer serve: " << o.api.model_id << " listening on http://" << o.host << ":" << port << std::endl;
  // The signal thread: waits for SIGINT/SIGTERM (blocked everywhere), then stops the listener.
  std::atomic<bool> done{false};
  std::thread signals([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    if (done) return;
    std::cerr << "roformer serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping" << std::endl;
    svr.stop();
  });
  const bool ok = svr.listen_after_bind();  // returns once stopped, its connections answered
  done = true;
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes the signal thread if no signal came
  signals.join();
  scheduler.stop();
  return ok ? 0 : 1;
}

}  // namespace server
