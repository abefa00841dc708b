// The routes' logic, free of HTTP: a request's JSON body in, the response's JSON out, with the
// shapes of Hugging Face text-embeddings-inference (TEI), OpenAI's embeddings API and transformers'
// fill-mask pipeline. Inputs are validated and tokenized here (on the calling HTTP thread); the
// forward goes through the Scheduler. INPUTS below is a string, a list of strings, a list of token
// ids or a list of such lists (ids go to the model as given: no [CLS]/[SEP] added, as TEI).
// TRUNC is "truncate": bool and "truncation_direction": "right" | "left" (either case).
//
//   POST /embed          {"inputs": INPUTS, "normalize": true, "prompt_name": str, TRUNC} → [[float]]
//   POST /v1/embeddings  {"input": INPUTS, "model": str, "encoding_format": "float"|"base64",
//                         "dimensions": the embedding size only, "prompt_name": str}
//                        → {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
//                           "model", "usage": {"prompt_tokens", "total_tokens"}}
//   POST /predict        {"inputs": str | [a, b] | [str | [str] | [a, b]], TRUNC, "raw_scores"}
//                        → [{"score", "label"}] sorted by score (a batch: one such list per input)
//   POST /rerank         {"query": str, "texts": [str], TRUNC, "raw_scores", "return_text"}
//                        → [{"index", "score", "text"?}] best first: a one-label classifier scores
//                          each (query, text) pair (TEI's re-rankers); an embedding model gives cosines
//   POST /v1/rerank      {"query": str, "documents": [str | {"text": str}], "top_n", "return_documents": true,
//                         "model"} → {"object": "list", "model", "results": [{"index", "relevance_score",
//                         "document"?: {"text"}}] best first, "usage"} (Cohere's and Jina's shape), as /rerank
//   POST /embed_all      {"inputs": INPUTS, "prompt_name", TRUNC} → [[[float]]] (inputs × tokens × hidden)
//   POST /embed_sparse   {"inputs": INPUTS, "prompt_name", TRUNC} → [[{"index", "value"}]]: SPLADE,
//                        max over tokens of log(1 + relu(MLM logits)), its non-zero entries
//   POST /similarity     {"inputs": {"source_sentence": str, "sentences": [str]}, TRUNC} → [float]
//   POST /fill-mask      {"inputs": str | [str], "parameters": {"top_k": 5}, TRUNC}
//                        → HF's [{"score", "token", "token_str", "sequence"}] (per mask, per input)
//   POST /tokenize       {"inputs": str | [str], "add_special_tokens": true}
//                        → [[{"id", "text", "special"}]]
//   POST /decode         {"ids": [int] | [[int]], "skip_special_tokens": true}           → [str]
//   POST /translate      {"inputs": str | [str], "parameters": {generate()'s num_beams, length_penalty,
//                         num_return_sequences, max_new_tokens, ...; max_len_a, max_len_b}, TRUNC}
//                        → transformers' [{"translation_text"}] (an encoder-decoder model only)
//   POST /generate       TGI's {"inputs": str, "parameters": {max_new_tokens, do_sample, temperature,
//                         top_k, top_p, seed, stop, details, return_full_text, top_n_tokens}}
//                        → {"generated_text", "details"?} (a causal LM only)
//   POST /generate_stream the same as server-sent events: {"index", "token": {"id", "text", "logprob",
//                         "special"}, "generated_text": null | the text, "details": null | {...}}
//   POST /v1/completions OpenAI's {"model", "prompt": str | [str], "max_tokens", "temperature", "top_p",
//                         "n", "stream", "stop", "seed", "logprobs", "echo"} → {"choices": [{"text",
//                         "index", "logprobs", "finish_reason"}], "usage", ...}, or its stream of chunks
//   GET /info, GET /v1/models; POST / runs /translate for a translation model, /generate (or its
//   stream, with "stream": true) for a causal LM, /predict for a classifier, /similarity for TEI's
//   {"inputs": {"source_sentence", ...}}, else /embed (huggingface_hub's InferenceClient posts there).
//
// Every refusal is an ApiError: the HTTP status and TEI's {"error", "error_type"} body.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "infer/pipeline.h"
#include "server/generation.h"
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
  // The prompt of a sentence-transformers folder the embedding routes use when a request names none
  // (TEI --default-prompt-name); "": the folder's default_prompt_name.
  std::string default_prompt_name;
  SchedulerOptions scheduler;       // reported by /info
  GenerationOptions generation;     // a causal LM's slots, reported by /info
  // Called on the HTTP thread of a request waiting for the model: has its client closed the
  // connection? Then the request is dropped from the queue (Scheduler::cancel). Null: never asked.
  std::function<bool()> client_gone;
};

// One input: a text, a sentence pair (pair: [CLS] a [SEP] b [SEP]) or token ids given by the client.
struct Input {
  std::string a, b;
  bool pair = false;
  std::vector<int32_t> ids;
  bool tokens = false;  // ids holds the input, to be run as it is
};

// A streaming response: server-sent events, pulled by the HTTP thread until the end.
class EventStream {
 public:
  virtual ~EventStream() = default;
  // The next piece of the body ("data: ...\n\n" events), waiting at most `wait` for the model: false
  // at the end; true with "" when nothing came (the caller checks its client).
  virtual bool next(std::string& chunk, std::chrono::milliseconds wait) = 0;
  virtual void cancel() = 0;  // the client is gone: its slots are freed at the next step
};

class Api {
 public:
  // generation: a causal LM's slots (with backend.lm), else null.
  Api(Backend backend, Scheduler& scheduler, Metrics& metrics, const ApiOptions& options,
      Generation* generation = nullptr);

  nlohmann::json embed(const nlohmann::json& request);
  nlohmann::json openai_embeddings(const nlohmann::json& request);
  nlohmann::json predict(const nlohmann::json& request);
  nlohmann::json rerank(const nlohmann::json& request);
  // Cohere's and Jina's /v1/rerank: {"query", "documents": [str | {"text"}], "top_n", "return_documents", "model"}
  // → {"results": [{"index", "relevance_score", "document"?: {"text"}}], "model", "usage"}, scored as /rerank.
  nlohmann::json v1_rerank(const nlohmann::json& request);
  // TEI's /embed_all (every token's hidden state) and /embed_sparse (SPLADE; 424 without an MLM head).
  nlohmann::json embed_all(const nlohmann::json& request);
  nlohmann::json embed_sparse(const nlohmann::json& request);
  nlohmann::json similarity(const nlohmann::json& request);
  nlohmann::json fill_mask(const nlohmann::json& request);
  // transformers' token-classification and question-answering pipelines' shapes, which
  // huggingface_hub's InferenceClient.token_classification and .question_answering send and read.
  nlohmann::json token_classification(const nlohmann::json& request);
  nlohmann::json question_answering(const nlohmann::json& request);
  nlohmann::json translate(const nlohmann::json& request);
  // A causal LM's routes: TGI's /generate and /generate_stream, OpenAI's /v1/completions (stream: true
  // → completions_stream). Validation fails before anything is streamed.
  nlohmann::json generate(const nlohmann::json& request);
  std::unique_ptr<EventStream> generate_stream(const nlohmann::json& request);
  nlohmann::json completions(const nlohmann::json& request);
  std::unique_ptr<EventStream> completions_stream(const nlohmann::json& request);
  bool is_generator() const { return generation_ != nullptr; }
  nlohmann::json tokenize(const nlohmann::json& request) const;
  nlohmann::json decode(const nlohmann::json& request) const;
  // By the model and the body: /translate, /predict, /token-classification, /question-answering,
  // /similarity or /embed.
  nlohmann::json root(const nlohmann::json& request);
  nlohmann::json info() const;
  nlohmann::json models() const;
  bool is_classifier() const { return pipeline_ && pipeline_->classifier() != nullptr; }
  bool has_head(const char* architecture) const { return pipeline_ && pipeline_->config().has_head(architecture); }

 private:
  // 413 for more inputs than max_client_batch_size.
  void check_batch_size(size_t inputs) const;
  // Inputs → checked encodings: 413 past the length without truncate, or past max_client_batch_size.
  std::vector<text::Encoding> encode(const std::vector<Input>& inputs, const infer::Truncate& truncate) const;
  // Puts the request's prompt (prompt_name, else the defaults) before each text input; returns what
  // EmbedOptions::skip takes (empty when the prompt is pooled, as by default). 422 for a bad name.
  std::vector<int64_t> apply_prompt(std::vector<Input>& inputs, const nlohmann::json* prompt_name) const;
  // /rerank's scores of each text for the query (a one-label classifier's sigmoid, or logit with raw;
  // an embedding model's cosines); tokens: plus the tokens run.
  std::vector<double> rerank_scores(const std::string& query, const std::vector<Input>& texts,
                                    const infer::Truncate& truncate, bool raw, int64_t* tokens);
  Output run(Task task, std::vector<text::Encoding> encodings, int64_t top_k = 0, std::vector<int64_t> skip = {});
  Output wait(Ticket& t);  // the scheduler's answer (cancelled if the client goes), failures as ApiErrors
  infer::Pipeline& encoder() const;     // 424 for a translation model
  infer::Translator& translator() const;  // 424 for an encoder model
  model::DecodeOptions decode_options(const nlohmann::json& params) const;  // of translation_parameters
  int64_t max_new_tokens() const;       // the decoder's positions less the decoder start token's
  // The inputs' vectors; prompt_name: the request's `prompt_name` field (or null), whose prompt goes before
  // each text (422 for a name the folder lacks or with token-id inputs).
  std::vector<std::vector<float>> embed_inputs(std::vector<Input> inputs, const infer::Truncate& truncate,
                                               bool normalize, int64_t* tokens = nullptr,
                                               const nlohmann::json* prompt_name = nullptr);

  Generation& generation() const;         // 424 without a causal LM
  // The sequences of a TGI or OpenAI request, submitted (429 when the slots' queue is full).
  struct Sequences;
  Sequences tgi_sequences(const nlohmann::json& request) const;
  Sequences openai_sequences(const nlohmann::json& request) const;
  // whole: the route gathers them (GenerationRequest::whole), instead of streaming.
  void submit(Sequences& s, bool whole = false) const;
  void gather(Sequences& s) const;  // every sequence to its end; 499 when the client goes

  infer::Pipeline* pipeline_;        // exactly one of these three is set (Backend)
  infer::Translator* translator_;
  Generation* generation_;
  const text::Tokenizer* lm_tokenizer_;
  Scheduler& scheduler_;
  Metrics& metrics_;  // tokenization times
  const ApiOptions options_;
};

// "…" → base64 (RFC 4648, padded), for OpenAI's encoding_format "base64" (little-endian float32).
std::string base64(const std::string& bytes);

}  // namespace server
