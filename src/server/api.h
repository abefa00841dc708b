// The routes' logic, free of HTTP: a request's JSON body in, the response's JSON out, with the
// shapes of Hugging Face text-embeddings-inference (TEI) and OpenAI's embeddings API. Inputs are
// validated and tokenized here (on the calling HTTP thread); the forward goes through the Scheduler.
//
//   POST /embed          {"inputs": str | [str], "normalize": true, "truncate": false}   → [[float]]
//   POST /v1/embeddings  {"input": str | [str], "model": str, "encoding_format": "float"|"base64"}
//                        → {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
//                           "model", "usage": {"prompt_tokens", "total_tokens"}}
//   POST /predict        {"inputs": str | [a, b] | [str | [str] | [a, b]], "truncate", "raw_scores"}
//                        → [{"score", "label"}] sorted by score (a batch: one such list per input)
//   POST /similarity     {"inputs": {"source_sentence": str, "sentences": [str]}}     → [float]
//   POST /tokenize       {"inputs": str | [str], "add_special_tokens": true}
//                        → [[{"id", "text", "special"}]]
//   GET /info, GET /v1/models; POST / runs /embed or /predict by the model's kind.
//
// Every refusal is an ApiError: the HTTP status and TEI's {"error", "error_type"} body.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/pipeline.h"
#include "server/scheduler.h"

namespace server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message)
      : std::runtime_error(message), status(status), type(std::move(type)) {}
  int status;
  std::string type;  // TEI's error_type: Validation, Backend, Overloaded, Unauthorized, NotFound, ...
};

struct ApiOptions {
  std::string model_id;             // what /info and OpenAI's "model" report (the directory's name)
  int64_t max_client_batch_size = 32;  // inputs per request (TEI's default); more: 413
  bool auto_truncate = false;       // truncate's default (TEI --auto-truncate)
  SchedulerOptions scheduler;       // reported by /info
};

class Api {
 public:
  Api(serve::Pipeline& pipeline, Scheduler& scheduler, const ApiOptions& options);

  nlohmann::json embed(const nlohmann::json& request);
  nlohmann::json openai_embeddings(const nlohmann::json& request);
  nlohmann::json predict(const nlohmann::json& request);
  nlohmann::json similarity(const nlohmann::json& request);
  nlohmann::json tokenize(const nlohmann::json& request) const;
  nlohmann::json root(const nlohmann::json& request);  // /embed or /predict by the model's kind
  nlohmann::json info() const;
  nlohmann::json models() const;
  bool is_classifier() const { return pipeline_.classifier() != nullptr; }

 private:
  // Texts (or pairs, second non-empty) → checked encodings; 413 past the length without truncate.
  std::vector<text::Encoding> encode(const std::vector<std::string>& first, const std::vector<std::string>& second,
                                     bool truncate) const;
  Output run(Task task, std::vector<text::Encoding> encodings);
  std::vector<std::vector<float>> embed_texts(const std::vector<std::string>& texts, bool truncate, bool normalize,
                                              int64_t* tokens = nullptr);

  serve::Pipeline& pipeline_;
  Scheduler& scheduler_;
  const ApiOptions options_;
};

// "…" → base64 (RFC 4648, padded), for OpenAI's encoding_format "base64" (little-endian float32).
std::string base64(const std::string& bytes);

}  // namespace server
