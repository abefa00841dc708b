// `roformer serve --model [NAME=]DIR ...`: the HTTP server (src/server) for a RoFormer model directory, with
// TEI's and OpenAI's embeddings routes, for a causal LM with TGI's and OpenAI's generation routes
// (step-level batching over --slots), or for a translate-train encoder-decoder with /translate
// (docs/serve.md). Loads the model as the other inference
// commands do (--quantize, --gemm, --threads, --pooling), then serves on loopback until SIGINT/SIGTERM.
// --model repeated serves several models in one process, each with its own queue and model thread.
#include <CLI/CLI.hpp>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "commands.h"
#include "thread_option.h"
#include "load/hub_cache.h"
#include "load/model_dir.h"
#include "infer/pipeline.h"
#include "infer/translator.h"
#include "server/http.h"

namespace roformer {
namespace {

struct ServeOptions {
  std::vector<std::string> models;  // --model DIR or NAME=DIR, repeated
  std::string model_id, jieba_dict, rope_scaling, pooling = "auto";
  model::LinearOptions linears;  // --quantize, --gemm
  double max_padding = 0.1;
  server::ServerOptions server;
};

// The name a directory serves as: its own; a run's best/, latest step-NNNNNN/ or a Hugging Face
// snapshot is named by the run or repository around it ("runs/sst/best" serves as "sst", not "best").
std::string name_of_dir(const std::string& model_dir) {
  std::filesystem::path dir = std::filesystem::path(model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  const std::string name = dir.filename().string(), parent = dir.parent_path().filename().string();
  const std::string repo = dir.parent_path().parent_path().filename().string();  // models--org--name
  if (parent == "snapshots" && repo.rfind("models--", 0) == 0) {
    std::string id = repo.substr(8);
    for (size_t at; (at = id.find("--")) != std::string::npos;) id.replace(at, 2, "/");
    return id;
  }
  if ((name == "best" || name.rfind("step-", 0) == 0) && !parent.empty()) return parent;
  return name;
}

// A --model value: NAME=DIR, or DIR (an existing path, or one without '=') named by name_of_dir.
// NAME goes into URLs (/models/NAME/embed) and metric labels: letters, digits and . _ - : @ /, at
// most 128, no '/' at either end.
std::pair<std::string, std::string> name_and_dir(const std::string& value) {
  const size_t eq = value.find('=');
  if (eq == std::string::npos || std::filesystem::exists(value)) {
    const std::string dir = load::resolve_model(value);
    return {name_of_dir(dir), dir};
  }
  const std::string name = value.substr(0, eq);
  bool ok = !name.empty() && name.size() <= 128 && name.front() != '/' && name.back() != '/';
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._-:@/", c) != nullptr);
  if (!ok) {
    throw std::invalid_argument("--model " + value + ": the name before '=' must be 1 to 128 letters, digits or . _ - : @ / "
                                "(no '/' at either end)");
  }
  return {name, load::resolve_model(value.substr(eq + 1))};
}

// What a served model needs alive while the server runs.
struct Loaded {
  load::Model lm;
  std::unique_ptr<infer::Translator> translator;
  std::unique_ptr<infer::Pipeline> pipeline;
};

// Loads one model directory as the server runs it: a causal LM, an encoder-decoder or an encoder.
server::Backend load_backend(const std::string& model_dir, const ServeOptions& o, Loaded& keep) {
  infer::LoadOptions lo;
  static_cast<model::LinearOptions&>(lo) = o.linears;
  if (load::is_causal_lm(model_dir)) {  // `roformer train`'s causal LMs: /generate, /generate_stream, /v1/completions
    load::Request r;
    r.inference = static_cast<const model::LinearOptions&>(lo);
    r.release_packed_arena = true;
    keep.lm = load::roformer(model_dir, r);
    const model::RoFormerConfig& c = keep.lm.model->config();
    if (c.attention_type != model::AttentionType::softmax || c.unilm_mask()) {
      throw std::invalid_argument(model_dir + "/config.json: generation is served for causal LMs with softmax "
                                  "attention (this one has " + model::attention_type_name(c.attention_type) +
                                  (c.unilm_mask() ? ", UniLM's mask" : "") + "); `roformer generate` runs it");
    }
    return {.lm = keep.lm.model.get(), .lm_tokenizer = keep.lm.tokenizer.get()};
  }
  if (load::is_seq2seq(model_dir)) {  // translate-train's encoder-decoder: POST /translate
    keep.translator = infer::Translator::load(model_dir, lo);
    return {.translator = keep.translator.get()};
  }
  lo.jieba_dict = o.jieba_dict;
  lo.mlm_head = true;  // for /fill-mask; embed and classify forwards stop before it (Pipeline::run)
  lo.rope_scaling = o.rope_scaling;
  lo.release_packed_arena = true;
  keep.pipeline = infer::Pipeline::load(model_dir, lo);
  keep.pipeline->set_max_padding(o.max_padding);
  // --default-prompt-name: one of the folder's prompts (of every encoder served), or an error now.
  keep.pipeline->prompt(o.server.api.default_prompt_name);
  return {.pipeline = keep.pipeline.get()};
}

int run_serve(ServeOptions& o) {
  // Before any thread exists (OpenMP's start with the model): SIGINT/SIGTERM go to the signal thread.
  server::block_stop_signals();
  server::check_loopback(o.server.host);
  const double timeout = o.server.api.scheduler.request_timeout_s;
  if (!(timeout >= 0 && timeout <= 86400)) {  // CLI::Range lets NaN through
    throw std::invalid_argument("--request-timeout must be a number of seconds in [0, 86400]");
  }
  if (!(o.max_padding >= 0 && o.max_padding <= 1)) throw std::invalid_argument("--max-padding must be in [0, 1]");
  const double shutdown = o.server.shutdown_timeout_s;
  if (!(shutdown >= 0 && shutdown <= 86400)) {
    throw std::invalid_argument("--shutdown-timeout must be a number of seconds in [0, 86400]");
  }
  if (o.models.size() > 1 && !o.model_id.empty()) {
    throw std::invalid_argument("--model-id names the one model served; with several, name each: --model NAME=DIR");
  }
  if (o.models.size() > 64) throw std::invalid_argument("--model: at most 64 models in one server");
  o.server.api.scheduler.pooling = infer::parse_pooling(o.pooling);
  std::vector<Loaded> keep(o.models.size());
  std::vector<server::ServedModel> served;
  for (size_t i = 0; i < o.models.size(); ++i) {
    auto [name, dir] = name_and_dir(o.models[i]);
    if (o.models.size() == 1 && !o.model_id.empty()) name = o.model_id;
    for (const server::ServedModel& s : served) {
      if (s.name == name) {
        throw std::invalid_argument("--model " + o.models[i] + ": a model named \"" + name +
                                    "\" is served already; name them apart with --model NAME=DIR");
      }
    }
    served.push_back({name, load_backend(dir, o, keep[i])});
  }
  o.server.api.model_id = served.front().name;
  return server::serve_forever(served, o.server);
}

}  // namespace

void add_serve_command(CLI::App& app, CommandTable& commands) {
  auto o = std::make_shared<ServeOptions>();
  server::ServerOptions& s = o->server;
  server::SchedulerOptions& q = s.api.scheduler;
  CLI::App* c = app.add_subcommand("serve", "HTTP server with TEI- and OpenAI-compatible routes (docs/serve.md)");
  c->add_option("--model", o->models,
                "Hugging Face model directory (config.json, vocab.txt, weights), a translate-train checkpoint or a "
                "causal LM, or a Hugging Face id; NAME=DIR names it; repeat it to serve several models")
      ->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->type_name("[NAME=]MODEL")->required();
  c->add_option("--model-id", o->model_id,
                "The name /info and OpenAI's \"model\" report (default: the directory's name); one --model only");
  c->add_option("--host", s.host, "Loopback address to listen on")
      ->check(CLI::IsMember({"127.0.0.1", "::1", "localhost"}))->capture_default_str();
  c->add_option("--port", s.port, "TCP port (0: any free one, printed at start)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  c->add_option("--api-key", s.api_key, "Require Authorization: Bearer KEY (all routes but /health and /metrics)");
  c->add_option("--max-concurrent-requests", q.max_concurrent_requests,
                "Requests accepted at once (queued or running); more get 429")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  c->add_option("--max-batch-tokens", q.max_batch_tokens, "Padded tokens (sequences x longest) per forward batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))->capture_default_str();
  c->add_option("--max-batch-requests", q.max_batch_requests, "Sequences per forward batch (0: no limit but the tokens)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  c->add_option("--max-padding", o->max_padding,
                "A batch is split into forwards whose padding stays within this share of their tokens")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  server::GenerationOptions& g = s.api.generation;
  c->add_option("--slots", g.slots, "Rows decoded together, step by step: a causal LM's sequences, a translation model's sources x num_beams")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))->capture_default_str();
  c->add_option("--max-total-tokens", g.max_total_tokens,
                "Token budget of the slots: a causal LM's prompt + max new tokens (0: slots x context); a translation's "
                 "num_beams x (source + eos + new-token limit) (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))->capture_default_str();
  c->add_option("--prefill-chunk", g.prefill_chunk, "Prompt tokens fed per decoding step beside the running sequences")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  c->add_option("--max-client-batch-size", s.api.max_client_batch_size, "Inputs per request; more get 413")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  c->add_flag("--auto-truncate", s.api.auto_truncate, "Truncate long inputs unless a request says truncate: false");
  c->add_option("--payload-limit", s.payload_limit, "Request body bytes; larger bodies get 413")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30))->capture_default_str();
  c->add_option("--http-threads", s.http_threads, "Connections served at once (each holds a thread, started when needed; they tokenize)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  c->add_option("--read-timeout", s.read_timeout_s, "Seconds a connection may wait for the client's next bytes")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  c->add_option("--write-timeout", s.write_timeout_s, "Seconds a response may wait for the client to read it")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  c->add_option("--keep-alive-timeout", s.keep_alive_timeout_s, "Seconds an idle keep-alive connection stays open")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  c->add_option("--keep-alive-max-requests", s.keep_alive_max_requests, "Requests per connection before it is closed")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  c->add_option("--request-timeout", q.request_timeout_s,
                "Seconds a request may wait in the queue; later it is dropped with 503 (0: no limit)")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  c->add_option("--shutdown-timeout", s.shutdown_timeout_s,
                "Seconds after SIGINT/SIGTERM to answer accepted requests; then queued ones get 503 and it exits")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  CLI::Option* access_log = c->add_flag("--access-log", s.access_log, "One JSON line per request on stderr (default on)");
  add_off_flag(c, "--no-access-log", s.access_log, "No access log")->excludes(access_log);
  c->add_option("--pooling", o->pooling,
                "auto (a sentence-transformers folder's Pooling, Dense and Normalize modules, else cls), or one mode "
                "instead of them: cls, mean, pooler, max, mean_sqrt_len, weightedmean or lasttoken")
      ->check(CLI::IsMember(infer::pooling_names()))->capture_default_str();
  c->add_option("--default-prompt-name", s.api.default_prompt_name,
                "The sentence-transformers prompt for embedding requests without prompt_name (default: the folder's "
                "default_prompt_name)");
  c->add_option("--threads", q.threads, "OpenMP threads of the model thread (0: all); several models share them out")->check(roformer::thread_count());
  c->add_option("--jieba-dict", o->jieba_dict, "jieba dict.txt (default: $ROFORMER_JIEBA_DICT, python3-jieba's)");
  c->add_option("--rope-scaling", o->rope_scaling,
                "Accept inputs up to F x max_position_embeddings: linear:F, ntk:F, dynamic-ntk:F:ORIG, yarn:F:ORIG, llama3:F:ORIG");
  add_linear_options(c, o->linears);
  add_kv_cache_option(c, o->linears);
  commands.add(c, [o] { return run_serve(*o); });
}

}  // namespace roformer
