// `roformer tokenize | fill-mask | embed | similarity | classify | ner | qa | forward`: inference on Hugging Face
// RoFormer model directories (config.json, vocab.txt + tokenizer files, weights). A thin layer over
// src/infer: read lines (stdin or --input; text, {"text": ...} JSONL, pairs), run them in batches of
// --batch-size (sorted by length, padded, output in input order) and print one JSON line per input.
// Input is read in chunks, so output streams; a bad line stops the command with "NAME:LINE: why".
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <omp.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "commands.h"
#include "enum_option.h"
#include "model_option.h"
#include "thread_option.h"
#include "io/output_path.h"
#include "infer/fill_mask.h"
#include "infer/forward_io.h"
#include "infer/input.h"
#include "infer/pipeline.h"

namespace roformer {
namespace {

struct InferOptions {
  std::string model_dir, input, format = "auto", jieba_dict, pooling = "auto", rope_scaling, prompt_name;
  model::LinearOptions linears;    // --quantize, --gemm
  std::string function = "auto";  // infer::LoadOptions
  std::string inputs, out;  // forward
  int64_t batch_size = 16, top_k = 5, max_length = 0;
  bool normalize = false, pairs = false, truncate = false, offsets = false;
  std::string truncation_side = "right";
  int threads = 0;
  std::string aggregation = "simple";  // ner
  infer::QaOptions qa;                 // qa
};

// The input stream (stdin or --input) and its reader.
struct Input {
  std::ifstream file;
  std::unique_ptr<infer::LineReader> reader;
  explicit Input(const InferOptions& o) {
    if (o.input.empty() || o.input == "-") {
      reader = std::make_unique<infer::LineReader>(std::cin, "<stdin>", infer::parse_input_format(o.format));
      return;
    }
    file.open(o.input, std::ios::binary);
    if (!file) throw std::runtime_error(o.input + ": cannot open");
    reader = std::make_unique<infer::LineReader>(file, o.input, infer::parse_input_format(o.format));
  }
};

// weights: false for tokenize; mlm_head: false where only hidden states are used (no MLM head cost).
std::unique_ptr<infer::Pipeline> load(const InferOptions& o, bool weights = true, bool mlm_head = true) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  infer::LoadOptions lo;
  lo.jieba_dict = o.jieba_dict;
  lo.weights = weights;
  lo.mlm_head = mlm_head;
  lo.rope_scaling = o.rope_scaling;
  static_cast<model::LinearOptions&>(lo) = o.linears;
  lo.classify_function = o.function;
  lo.release_packed_arena = true;  // only forwards run here: hold the packed weights once
  return infer::Pipeline::load(o.model_dir, lo);
}

// Reads chunks of inputs (read(reader, &item) → false at the end) and hands each to process; an
// InputError is reported at its line.
template <typename Item, typename Read, typename Process>
void for_chunks(const InferOptions& o, Read read, Process process) {
  Input input(o);
  infer::LineReader& r = *input.reader;
  const int64_t chunk = std::max<int64_t>(o.batch_size * 64, 256);
  std::vector<Item> items;
  std::vector<int64_t> lines;
  for (bool more = true; more;) {
    items.clear();
    lines.clear();
    Item item;
    while (static_cast<int64_t>(items.size()) < chunk && (more = read(r, &item))) {
      items.push_back(std::move(item));
      lines.push_back(r.line());
    }
    if (items.empty()) break;
    try {
      process(items);
    } catch (const infer::InputError& e) {
      throw std::runtime_error(r.where(lines.at(e.index), e.what()));
    }
    std::cout.flush();
  }
}

bool read_text(infer::LineReader& r, std::string* s) { return r.next_text(s); }
bool read_pair(infer::LineReader& r, std::pair<std::string, std::string>* p) { return r.next_pair(p); }

int run_tokenize(const InferOptions& o) {
  const auto p = load(o, false);
  for_chunks<std::string>(o, read_text, [&](const std::vector<std::string>& texts) {
    for (const std::string& t : texts) std::cout << p->tokenizer().encode(t).to_json(false, o.offsets) << '\n';
  });
  return 0;
}

infer::Truncate truncation(const InferOptions& o) {
  return {o.truncate, o.max_length, o.truncation_side == "left" ? text::Side::Left : text::Side::Right};
}

int run_fill_mask(const InferOptions& o) {
  const auto p = load(o);
  for_chunks<std::string>(o, read_text, [&](const std::vector<std::string>& texts) {
    for (const auto& masks : infer::fill_mask(*p, texts, o.top_k, o.batch_size, truncation(o))) {
      std::cout << infer::fill_mask_json(masks) << '\n';
    }
  });
  return 0;
}

infer::EmbedOptions embed_options(const InferOptions& o) {
  infer::EmbedOptions e;
  e.pooling = infer::parse_pooling(o.pooling);
  e.normalize = o.normalize;
  e.batch_size = o.batch_size;
  return e;
}

int run_embed(const InferOptions& o) {
  const auto p = load(o, true, false);
  // A sentence-transformers folder's prompt (--prompt-name, else its default_prompt_name) before each line.
  const std::string prompt = p->prompt(o.prompt_name);
  infer::EmbedOptions eo = embed_options(o);
  for_chunks<std::string>(o, read_text, [&](std::vector<std::string> texts) {
    for (std::string& t : texts) t = prompt + t;
    eo.skip.assign(texts.size(), p->prompt_tokens(prompt));
    for (const auto& e : p->embed(texts, eo, truncation(o))) std::cout << infer::embedding_json(e) << '\n';
  });
  return 0;
}

int run_similarity(const InferOptions& o) {
  const auto p = load(o, true, false);
  const std::string prompt = p->prompt("");  // a sentence-transformers folder's default_prompt_name, as serve's /similarity
  infer::EmbedOptions eo = embed_options(o);
  for_chunks<std::pair<std::string, std::string>>(o, read_pair, [&](std::vector<std::pair<std::string, std::string>> pairs) {
    for (auto& [a, b] : pairs) {
      a = prompt + a;
      b = prompt + b;
    }
    eo.skip.assign(2 * pairs.size(), p->prompt_tokens(prompt));  // similarity embeds a, b of each pair in turn
    for (double s : p->similarity(pairs, eo, truncation(o))) {
      std::cout << "{\"similarity\": " << infer::json_number(s) << "}\n";
    }
  });
  return 0;
}

void print_classifications(const std::vector<infer::Classification>& out) {
  for (const infer::Classification& c : out) {
    nlohmann::ordered_json j;
    // One meaning per field in every command (finetune --predict writes the same): "score" the label's
    // probability (a regression's value), "probabilities" after the head's function, "logits" raw.
    j["label"] = c.label;
    j["score"] = c.score;
    j[c.probabilities ? "probabilities" : "values"] = c.scores;
    j["logits"] = c.logits;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
}

int run_classify(const InferOptions& o) {
  const auto p = load(o, true, false);
  // The clear "no classifier head" error before reading input.
  if (!p->classifier()) p->classify({});
  if (o.pairs) {
    for_chunks<std::pair<std::string, std::string>>(o, read_pair, [&](const auto& pairs) {
      print_classifications(p->classify_pairs(pairs, o.batch_size, truncation(o)));
    });
  } else {
    for_chunks<std::string>(o, read_text, [&](const std::vector<std::string>& texts) {
      print_classifications(p->classify(texts, o.batch_size, truncation(o)));
    });
  }
  return 0;
}

// Token classification: one JSON array of entities per line, in the fields of transformers'
// token-classification pipeline ({"entity_group" or "entity", "score", "word", "start", "end"}, and
// "index" without aggregation).
int run_ner(const InferOptions& o) {
  const model::Aggregation aggregation = model::parse_aggregation(o.aggregation);
  const auto p = load(o, true, false);
  p->token_classify({}, aggregation);  // the "needs a RoFormerForTokenClassification" error before input is read
  const char* label = aggregation == model::Aggregation::none ? "entity" : "entity_group";
  for_chunks<std::string>(o, read_text, [&](const std::vector<std::string>& texts) {
    for (const auto& entities : p->token_classify(texts, aggregation, o.batch_size, truncation(o))) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const model::TokenEntity& e : entities) {
        nlohmann::ordered_json j;
        j[label] = e.label;
        j["score"] = e.score;
        if (e.index >= 0) j["index"] = e.index;
        j["word"] = e.word;
        j["start"] = e.start;
        j["end"] = e.end;
        out.push_back(std::move(j));
      }
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
  });
  return 0;
}

// Extractive QA: per line, transformers' question-answering pipeline's {"score", "start", "end",
// "answer"} (character spans of the context), or a list of them best first when there are several
// (--top-k).
int run_qa(const InferOptions& o) {
  const auto p = load(o, true, false);
  p->answer({}, o.qa);  // the "needs a RoFormerForQuestionAnswering" error before input is read
  for_chunks<std::pair<std::string, std::string>>(o, read_pair, [&](const auto& pairs) {
    std::vector<infer::Question> questions;
    for (const auto& [q, c] : pairs) questions.push_back({q, c});
    const auto answers = p->answer(questions, o.qa, o.batch_size);
    for (size_t i = 0; i < answers.size(); ++i) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const model::PipelineAnswer& a : answers[i]) {
        nlohmann::ordered_json j;
        j["score"] = a.score;
        j["start"] = a.start;
        j["end"] = a.end;
        j["answer"] = base::utf8_slice(questions[i].context, a.start, a.end);
        list.push_back(std::move(j));
      }
      const auto& out = list.size() == 1 ? list[0] : list;  // transformers: one answer is an object
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
  });
  return 0;
}

int run_forward(const InferOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  io::check_output_path("--out", o.out, {o.model_dir, o.inputs});
  infer::forward_file(o.model_dir, o.inputs, o.out, o.linears);
  return 0;
}

}  // namespace

void add_linear_options(CLI::App* command, model::LinearOptions& linears) {
  add_enum_option(command, "--quantize", linears.quantize, model::parse_quantize, model::quantize_name,
                  "int8 (dynamic int8 linear layers, oneDNN), bf16 (bf16 linear layers with fp32 "
                  "accumulation; CPUs with AVX512-BF16 or AMX), none (fp32) or auto (int8 for a checkpoint "
                  "`roformer quantize` wrote, else fp32)");
  add_enum_option(command, "--gemm", linears.gemm, model::parse_gemm, model::gemm_name,
                  "fp32 linear layers: packed (oneDNN, weights packed at load), blas (OpenBLAS) "
                  "or auto (packed where oneDNN has its own kernel)");
}

void add_kv_cache_option(CLI::App* command, model::LinearOptions& linears) {
  add_enum_option(command, "--kv-cache", linears.kv_cache, model::parse_cache_type, model::cache_type_name,
                  "The decoder's key/value cache: fp32, or bf16 (half the memory and the bytes read per "
                  "token; keys and values rounded once as they are cached)");
}

void add_infer_commands(CLI::App& app, CommandTable& commands) {
  auto o = std::make_shared<InferOptions>();
  auto common = [&](CLI::App* c, bool batched) {
    c->add_option("--model", o->model_dir, "Hugging Face model directory (config.json, vocab.txt, weights)")->transform(model_location())->required();
    c->add_option("--input", o->input, "Input file, one item per line (default: stdin)");
    c->add_option("--input-format", o->format, "auto ('{' starts a JSON line), text or jsonl")
        ->check(CLI::IsMember({"auto", "text", "jsonl"}))->capture_default_str();
    c->add_option("--jieba-dict", o->jieba_dict, "jieba dict.txt (default: $ROFORMER_JIEBA_DICT, python3-jieba's)");
    if (batched) {
      c->add_option("--batch-size", o->batch_size, "Sequences per forward (sorted by length, padded)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
      c->add_option("--threads", o->threads, "OpenMP threads (0: all)")->check(roformer::thread_count());
      c->add_flag("--truncate", o->truncate,
                  "Cut inputs longer than the model (or --max-length) instead of stopping with an error "
                  "([CLS]/[SEP] kept; pairs longest-first), as transformers' truncation=True");
      c->add_option("--max-length", o->max_length, "With --truncate: tokens per input (default and at most: the model's)")
          ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
      c->add_option("--truncation-side", o->truncation_side, "With --truncate: cut the right (end) or left (start)")
          ->check(CLI::IsMember({"right", "left"}))->capture_default_str();
      c->add_option("--rope-scaling", o->rope_scaling,
                    "Accept inputs up to F x max_position_embeddings: linear:F, ntk:F, dynamic-ntk:F:ORIG, "
                    "yarn:F:ORIG, llama3:F:ORIG");
      add_linear_options(c, o->linears);
    }
    return c;
  };
  CLI::App* tok = common(app.add_subcommand("tokenize", "Text lines → JSONL {tokens, input_ids} ([CLS]/[SEP] added)"), false);
  tok->add_flag("--offsets", o->offsets,
                "Add \"offsets\": each token's [start, end) in the line, in code points (HF's offset_mapping; "
                "[0, 0] for [CLS]/[SEP])");
  CLI::App* fill = common(app.add_subcommand("fill-mask", "Top-k predictions for each [MASK] of each line (HF fill-mask)"), true);
  fill->add_option("--top-k", o->top_k, "Predictions per mask")->check(CLI::Range(int64_t{1}, int64_t{1} << 30))->capture_default_str();
  CLI::App* emb = common(app.add_subcommand("embed", "One embedding per line: JSONL {embedding}"), true);
  CLI::App* sim = common(app.add_subcommand("similarity", "Cosine similarity of pairs: {\"a\", \"b\"} JSON or a<TAB>b lines"), true);
  for (CLI::App* c : {emb, sim}) {
    c->add_option("--pooling", o->pooling,
                  "auto (a sentence-transformers folder's Pooling, Dense and Normalize modules, else cls), or one mode "
                  "instead of them: cls ([CLS] hidden state), mean (over the attention mask), pooler (RoFormer-Sim's "
                  "sentence vector), max, mean_sqrt_len, weightedmean or lasttoken")
        ->check(CLI::IsMember(infer::pooling_names()))->capture_default_str();
    c->add_flag("--normalize", o->normalize, "L2-normalise the embeddings");
  }
  emb->add_option("--prompt-name", o->prompt_name,
                  "The prompt of a sentence-transformers folder (config_sentence_transformers.json) put before each line "
                  "(default: its default_prompt_name)");
  CLI::App* cls = common(app.add_subcommand("classify", "Sequence classification (RoFormerForSequenceClassification head)"), true);
  cls->add_flag("--pairs", o->pairs, "Sentence pairs: {\"text\", \"text_pair\"} or {\"a\", \"b\"} JSON, or a<TAB>b lines");
  cls->add_option("--function", o->function,
                  "Logits to scores: softmax, sigmoid, none, or auto (sigmoid for multi-label and single-label "
                  "heads, none for regression, else softmax)")
      ->check(CLI::IsMember({"auto", "softmax", "sigmoid", "none"}))->capture_default_str();
  CLI::App* ner = common(app.add_subcommand("ner", "Token classification (RoFormerForTokenClassification): entities "
                                                  "of each line, as transformers' token-classification pipeline"), true);
  ner->add_option("--aggregation-strategy", o->aggregation,
                  "none (every token), simple (runs of one entity type), first, average or max (whole words, "
                  "scored by their first token, their mean or their best token)")
      ->check(CLI::IsMember({"none", "simple", "first", "average", "max"}))->capture_default_str();
  CLI::App* qa = common(app.add_subcommand("qa", "Extractive question answering (RoFormerForQuestionAnswering): "
                                                 "{\"question\", \"context\"} lines (or question<TAB>context), "
                                                 "as transformers' question-answering pipeline"), true);
  qa->add_option("--top-k", o->qa.top_k, "Answers per question")->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  qa->add_option("--max-answer-len", o->qa.max_answer_length, "Longest answer, in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  qa->add_option("--max-seq-len", o->qa.max_seq_len, "Tokens of a window: question and context part (default: "
                 "384, or less as the tokenizer's model_max_length and the model allow)")->check(CLI::Range(int64_t{4}, int64_t{1} << 24));
  qa->add_option("--doc-stride", o->qa.doc_stride, "Context tokens two windows share (default: min(128, "
                 "max-seq-len / 2))")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  qa->add_flag("--handle-impossible-answer", o->qa.handle_impossible_answer,
               "The empty answer (\"no answer\") competes, scored by [CLS] (SQuAD v2.0 models)");
  CLI::App* fwd = app.add_subcommand("forward", "Run a safetensors batch; write every hidden state and attention map");
  fwd->add_option("--model", o->model_dir, "Hugging Face model directory (config.json, weights)")->transform(model_location())->required();
  fwd->add_option("--inputs", o->inputs, "safetensors with input_ids [, attention_mask, token_type_ids] (I64, (B, T))")->required();
  fwd->add_option("--out", o->out, "Output safetensors (written atomically)")->required();
  fwd->add_option("--threads", o->threads, "OpenMP threads (0: all)")->check(roformer::thread_count());
  add_linear_options(fwd, o->linears);

  commands.add(tok, [o] { return run_tokenize(*o); });
  commands.add(fill, [o] { return run_fill_mask(*o); });
  commands.add(emb, [o] { return run_embed(*o); });
  commands.add(sim, [o] { return run_similarity(*o); });
  commands.add(cls, [o] { return run_classify(*o); });
  commands.add(ner, [o] { return run_ner(*o); });
  commands.add(qa, [o] { return run_qa(*o); });
  commands.add(fwd, [o] { return run_forward(*o); });
}

}  // namespace roformer
