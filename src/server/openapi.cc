// server::openapi_document: GET /openapi.json, the OpenAPI 3.0 description of every route of
// server/api.h with its request schema, an example body and the statuses it answers. The HTTP side
// refuses to start when a route it serves is missing here (check_documented), and the HTTP test
// posts every example and checks the answer, so the document stays true. Every route but
// /openapi.json is also documented under /models/{model}/ (the model by the path; `model` an enum of
// the served names).
#include "server/openapi.h"

#include <stdexcept>

namespace server {
namespace {

using nlohmann::json;

const char* kSchemas = R"({
  "GenerateParameters": {"type": "object", "properties": {
      "max_new_tokens": {"type": "integer", "minimum": 1},
      "do_sample": {"type": "boolean", "default": false},
      "temperature": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
      "top_k": {"type": "integer", "minimum": 1},
      "top_p": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1},
      "seed": {"type": "integer", "minimum": 0},
      "stop": {"type": "array", "maxItems": 4, "items": {"type": "string"}},
      "truncate": {"type": "integer", "minimum": 1},
      "details": {"type": "boolean"}, "return_full_text": {"type": "boolean"},
      "top_n_tokens": {"type": "integer", "minimum": 0, "maximum": 5}}},
  "Error": {"type": "object", "required": ["error", "error_type"],
            "properties": {"error": {"type": "string"}, "error_type": {"type": "string"}}},
  "TokenIds": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": -2147483648,
               "maximum": 2147483647}},
  "Inputs": {"oneOf": [{"type": "string"},
                       {"type": "array", "minItems": 1, "items": {"type": "string"}},
                       {"$ref": "#/components/schemas/TokenIds"},
                       {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/TokenIds"}}]},
  "Texts": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}}]},
  "Question": {"type": "object", "required": ["question", "context"], "properties": {"question": {"type": "string"}, "context": {"type": "string"}}},
  "TruncationDirection": {"type": "string", "enum": ["right", "left", "Right", "Left"]},
  "PromptName": {"type": "string", "minLength": 1, "maxLength": 256,
                 "description": "a prompt of the sentence-transformers folder (config_sentence_transformers.json), put before each text"}
})";

// One route: its summary, request schema (null for GET), an example body, and success response schema.
struct Route {
  const char* method;
  const char* path;
  const char* summary;
  const char* request;   // JSON schema of the body, or nullptr
  const char* example;   // an example body, or nullptr
  const char* response;  // JSON schema of the 200 body, or nullptr for none
};

const Route kRoutes[] = {
    {"post", "/embed", "Embeddings (TEI)",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"$ref": "#/components/schemas/Inputs"}, "normalize": {"type": "boolean", "default": true},
         "prompt_name": {"$ref": "#/components/schemas/PromptName"},
         "truncate": {"type": "boolean"}, "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": ["hello world", "a b c"]})",
     R"({"type": "array", "items": {"type": "array", "items": {"type": "number"}}})"},
    {"post", "/v1/embeddings", "Embeddings (OpenAI)",
     R"({"type": "object", "required": ["input"], "properties": {
         "input": {"$ref": "#/components/schemas/Inputs"}, "model": {"type": "string"},
         "encoding_format": {"type": "string", "enum": ["float", "base64"]},
         "dimensions": {"type": "integer"}, "user": {"type": "string"},
         "prompt_name": {"$ref": "#/components/schemas/PromptName"}}})",
     R"({"input": "hello world", "model": "roformer"})",
     R"({"type": "object", "required": ["object", "data", "model", "usage"]})"},
    {"post", "/predict", "Sequence classification (TEI); 424 without a classifier head",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {
             "oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}}]}}]},
         "raw_scores": {"type": "boolean"}, "truncate": {"type": "boolean"},
         "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": "hello world"})",
     R"({"type": "array"})"},
    {"post", "/rerank", "Re-ranking (TEI): a one-label classifier scores (query, text); an embedding model, cosines",
     R"({"type": "object", "required": ["query", "texts"], "properties": {
         "query": {"type": "string"}, "texts": {"type": "array", "minItems": 1, "items": {"type": "string"}},
         "raw_scores": {"type": "boolean"}, "return_text": {"type": "boolean"}, "truncate": {"type": "boolean"},
         "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"query": "hello", "texts": ["hello world", "a b c"], "return_text": true})",
     R"({"type": "array", "items": {"type": "object", "required": ["index", "score"], "properties": {
         "index": {"type": "integer"}, "score": {"type": "number"}, "text": {"type": "string"}}}})"},
    {"post", "/v1/rerank", "Re-ranking (Cohere's and Jina's shape), scored as /rerank",
     R"({"type": "object", "required": ["query", "documents"], "properties": {
         "query": {"type": "string"}, "model": {"type": "string"},
         "documents": {"type": "array", "minItems": 1, "items": {"oneOf": [
             {"type": "string"}, {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}]}},
         "top_n": {"type": "integer", "minimum": 1, "maximum": 1048576},
         "return_documents": {"type": "boolean", "default": true}}})",
     R"({"query": "hello", "documents": ["hello world", {"text": "a b c"}], "top_n": 1})",
     R"({"type": "object", "required": ["object", "model", "results", "usage"], "properties": {
         "results": {"type": "array", "items": {"type": "object", "required": ["index", "relevance_score"], "properties": {
             "index": {"type": "integer"}, "relevance_score": {"type": "number"},
             "document": {"type": "object", "properties": {"text": {"type": "string"}}}}}}}})"},
    {"post", "/embed_all", "Every token's last hidden state (TEI): inputs x tokens x hidden",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"$ref": "#/components/schemas/Inputs"}, "prompt_name": {"$ref": "#/components/schemas/PromptName"},
         "truncate": {"type": "boolean"}, "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": ["hello world", "a b c"]})",
     R"({"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}})"},
    {"post", "/embed_sparse", "SPLADE vectors (TEI): max over tokens of log(1 + relu(MLM logits)); 424 without an MLM head",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"$ref": "#/components/schemas/Inputs"}, "prompt_name": {"$ref": "#/components/schemas/PromptName"},
         "truncate": {"type": "boolean"}, "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": ["hello world", "a b c"]})",
     R"({"type": "array", "items": {"type": "array", "items": {"type": "object", "required": ["index", "value"],
         "properties": {"index": {"type": "integer"}, "value": {"type": "number"}}}}})"},
    {"post", "/similarity", "Cosine similarity of a sentence to others (TEI)",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"type": "object", "required": ["source_sentence", "sentences"], "properties": {
             "source_sentence": {"type": "string"},
             "sentences": {"type": "array", "minItems": 1, "items": {"type": "string"}}}},
         "truncate": {"type": "boolean"}, "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": {"source_sentence": "hello world", "sentences": ["hello", "a b c"]}})",
     R"({"type": "array", "items": {"type": "number"}})"},
    {"post", "/fill-mask", "Fill-mask (transformers' pipeline); 424 without an MLM head",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"$ref": "#/components/schemas/Texts"},
         "parameters": {"type": "object", "properties": {"top_k": {"type": "integer", "minimum": 1, "maximum": 1000}}},
         "truncate": {"type": "boolean"}, "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": "hello [MASK] world", "parameters": {"top_k": 3}})",
     R"({"type": "array"})"},
    {"post", "/token-classification", "Entities (transformers' token-classification pipeline); 424 without a token-classification head",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"$ref": "#/components/schemas/Texts"},
         "parameters": {"type": "object", "properties": {
             "aggregation_strategy": {"type": "string", "enum": ["none", "simple", "first", "average", "max"], "default": "simple"},
             "ignore_labels": {"type": "array", "items": {"type": "string"}, "default": ["O"]}}},
         "truncate": {"type": "boolean"}, "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": "hello world", "parameters": {"aggregation_strategy": "simple"}})",
     R"({"type": "array"})"},
    {"post", "/question-answering", "Extractive answers (transformers' question-answering pipeline); 424 without a question-answering head",
     R"({"type": "object", "properties": {
         "inputs": {"oneOf": [{"$ref": "#/components/schemas/Question"},
                              {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Question"}}]},
         "question": {"type": "string"}, "context": {"type": "string"},
         "parameters": {"type": "object", "properties": {
             "top_k": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
             "max_answer_len": {"type": "integer", "minimum": 1, "default": 15},
             "max_seq_len": {"type": "integer", "minimum": 4}, "doc_stride": {"type": "integer", "minimum": 1},
             "max_question_len": {"type": "integer", "minimum": 1},
             "handle_impossible_answer": {"type": "boolean", "default": false},
             "align_to_words": {"type": "boolean", "default": true}}}}})",
     R"({"inputs": {"question": "who?", "context": "he said so."}})",
     R"({"oneOf": [{"type": "object"}, {"type": "array"}]})"},
    {"post", "/generate", "Text generation (TGI) with a causal LM, batched at the step; 424 for other models",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"type": "string"}, "stream": {"type": "boolean"},
         "parameters": {"$ref": "#/components/schemas/GenerateParameters"}}})",
     R"({"inputs": "In the beginning", "parameters": {"max_new_tokens": 8, "details": true}})",
     R"({"type": "object", "required": ["generated_text"], "properties": {
         "generated_text": {"type": "string"}, "details": {"type": "object"}}})"},
    {"post", "/generate_stream", "Text generation (TGI) as server-sent events, a token each; 424 for other models",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"type": "string"}, "stream": {"type": "boolean"},
         "parameters": {"$ref": "#/components/schemas/GenerateParameters"}}})",
     R"({"inputs": "In the beginning", "parameters": {"max_new_tokens": 8}})",
     R"({"type": "string", "description": "text/event-stream: data: {index, token: {id, text, logprob, special}, generated_text, details}"})"},
    {"post", "/v1/completions", "OpenAI completions with a causal LM (stream: server-sent chunks); 424 for other models",
     R"({"type": "object", "required": ["prompt"], "properties": {
         "model": {"type": "string"},
         "prompt": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}},
                              {"type": "array", "minItems": 1, "items": {"type": "integer"}},
                              {"type": "array", "minItems": 1, "items": {"type": "array", "items": {"type": "integer"}}}]},
         "max_tokens": {"type": "integer", "minimum": 1, "default": 16},
         "temperature": {"type": "number", "minimum": 0, "maximum": 2, "default": 1},
         "top_p": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1, "default": 1},
         "n": {"type": "integer", "minimum": 1, "maximum": 16, "default": 1},
         "stream": {"type": "boolean", "default": false},
         "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
         "stop": {"oneOf": [{"type": "string"}, {"type": "array", "maxItems": 4, "items": {"type": "string"}}]},
         "seed": {"type": "integer", "minimum": 0},
         "logprobs": {"type": "integer", "minimum": 0, "maximum": 5},
         "echo": {"type": "boolean", "default": false}}})",
     R"({"model": "m", "prompt": "In the beginning", "max_tokens": 8, "temperature": 0})",
     R"({"type": "object", "required": ["choices"], "properties": {
         "id": {"type": "string"}, "object": {"type": "string"}, "choices": {"type": "array"}, "usage": {"type": "object"}}})"},
    {"post", "/translate", "Translation (transformers' pipeline); 424 unless the model is an encoder-decoder",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"$ref": "#/components/schemas/Texts"},
         "parameters": {"type": "object", "properties": {
             "num_beams": {"type": "integer", "minimum": 1, "maximum": 32, "default": 4},
             "num_return_sequences": {"type": "integer", "minimum": 1, "default": 1},
             "length_penalty": {"type": "number", "default": 1.0}, "early_stopping": {"type": "boolean"},
             "max_new_tokens": {"type": "integer", "minimum": 1},
             "max_len_a": {"type": "number", "minimum": 0, "maximum": 4, "default": 1.5},
             "max_len_b": {"type": "integer", "minimum": 0, "default": 10},
             "min_new_tokens": {"type": "integer", "minimum": 0}, "no_repeat_ngram_size": {"type": "integer", "minimum": 0},
             "do_sample": {"type": "boolean"}, "temperature": {"type": "number", "minimum": 0},
             "top_k": {"type": "integer", "minimum": 0}, "top_p": {"type": "number", "minimum": 0, "maximum": 1},
             "seed": {"type": "integer", "minimum": 0},
             "truncation": {"oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["do_not_truncate", "longest_first", "only_first"]}]},
             "clean_up_tokenization_spaces": {"type": "boolean"}, "generate_parameters": {"type": "object"}}},
         "truncate": {"type": "boolean"}, "truncation_direction": {"$ref": "#/components/schemas/TruncationDirection"}}})",
     R"({"inputs": "hello world", "parameters": {"num_beams": 2}})",
     R"({"type": "array"})"},
    {"post", "/tokenize", "Tokens of each input (TEI)",
     R"({"type": "object", "required": ["inputs"], "properties": {
         "inputs": {"$ref": "#/components/schemas/Texts"}, "add_special_tokens": {"type": "boolean"}}})",
     R"({"inputs": "hello world"})",
     R"({"type": "array", "items": {"type": "array", "items": {"type": "object", "properties": {
         "id": {"type": "integer"}, "text": {"type": "string"}, "special": {"type": "boolean"}}}}})"},
    {"post", "/decode", "Text of token ids (TEI)",
     R"({"type": "object", "required": ["ids"], "properties": {
         "ids": {"oneOf": [{"$ref": "#/components/schemas/TokenIds"},
                           {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/TokenIds"}}]},
         "skip_special_tokens": {"type": "boolean", "default": true}}})",
     R"({"ids": [1, 2, 3]})",
     R"({"type": "array", "items": {"type": "string"}})"},
    {"post", "/", "/translate for an encoder-decoder, /predict for a classifier, /token-classification and /question-answering for their heads, /similarity for {inputs: {source_sentence, ...}}, else /embed",
     R"({"type": "object"})",
     R"({"inputs": "hello world"})",
     R"({"type": "array"})"},
    {"get", "/info", "The model and the server's limits (TEI)", nullptr, nullptr,
     R"({"type": "object", "required": ["model_id", "model_type", "max_input_length"]})"},
    {"get", "/v1/models", "The served models (OpenAI); under /models/{model}/, that one", nullptr, nullptr,
     R"({"type": "object", "required": ["object", "data"]})"},
    {"get", "/health", "200 (no body) once the model is loaded", nullptr, nullptr, nullptr},
    {"get", "/metrics", "Prometheus text", nullptr, nullptr, R"({"type": "string"})"},
    {"get", "/openapi.json", "This document", nullptr, nullptr, R"({"type": "object"})"},
};

json error_response(const char* description) {
  return {{"description", description},
          {"content", {{"application/json", {{"schema", {{"$ref", "#/components/schemas/Error"}}}}}}}};
}

}  // namespace

json openapi_document(const std::vector<std::string>& models) {
  json paths = json::object();
  for (const Route& r : kRoutes) {
    json op = {{"summary", r.summary}, {"operationId", std::string(r.method) + r.path}};
    const bool text = std::string(r.path) == "/metrics";
    op["responses"]["200"] = {{"description", "OK"}};
    if (r.response) {  // /health answers 200 with no body
      op["responses"]["200"]["content"] = {{text ? "text/plain" : "application/json",
                                            {{"schema", json::parse(r.response)}}}};
    }
    if (r.request) {
      json media = {{"schema", json::parse(r.request)}};
      if (r.example) media["example"] = json::parse(r.example);
      op["requestBody"] = {{"required", true}, {"content", {{"application/json", media}}}};
      op["responses"]["400"] = error_response("an HTTP request the server cannot read (e.g. a POST without a body)");
      op["responses"]["413"] = error_response("too many inputs, an input too long without truncate, a body too large");
      op["responses"]["422"] = error_response("malformed JSON or a field of the wrong type or value");
      op["responses"]["424"] = error_response("the model cannot do this (not the head the route needs; not an encoder-decoder)");
      op["responses"]["429"] = error_response("--max-concurrent-requests requests in flight");
      op["responses"]["503"] = error_response("waited longer than --request-timeout for the model");
    }
    if (std::string(r.path) != "/health" && std::string(r.path) != "/metrics") {
      op["responses"]["401"] = error_response("--api-key is set and the request lacks it");
    }
    if (r.request) {
      op["responses"]["404"] = error_response("several models are served and the body's \"model\" names none of them");
    }
    if (std::string(r.path) != "/openapi.json") {
      // The same route answered by the model the path names: /models/{model}/embed, /models/{model}/ (POST /).
      json named = op;
      named["operationId"] = std::string(r.method) + "/models/{model}" + r.path;
      named["summary"] = std::string(r.summary) + "; by the model the path names";
      named["parameters"] = json::array({{{"name", "model"}, {"in", "path"}, {"required", true},
                                          {"description", "a served model's name (GET /v1/models)"},
                                          {"schema", {{"type", "string"}, {"enum", models}}}}});
      named["responses"]["404"] = error_response("no model of that name is served");
      paths[std::string("/models/{model}") + r.path][r.method] = std::move(named);
    }
    paths[r.path][r.method] = std::move(op);
  }
  std::string names;
  for (const std::string& m : models) names += (names.empty() ? "" : ", ") + m;
  return {{"openapi", "3.0.3"},
          {"info", {{"title", "roformer serve"}, {"version", "1"},
                    {"description", "RoFormer inference for " + names +
                                        ": text-embeddings-inference, OpenAI embeddings and completions, fill-mask, translation and TGI generation routes"}}},
          {"paths", std::move(paths)},
          {"components", {{"schemas", json::parse(kSchemas)},
                          {"securitySchemes", {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}}}};
}

void check_documented(const json& document, const std::string& method, const std::string& path) {
  const json& paths = document.at("paths");
  if (!paths.contains(path) || !paths[path].contains(method)) {
    throw std::logic_error("server route " + method + " " + path + " is not in openapi.json (server/openapi.cc)");
  }
}

}  // namespace server
