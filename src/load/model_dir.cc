// The one loader of model directories (see model_dir.h): config, weights, tokenizer and heads, each
// checked against the others once, then the model built, loaded and prepared as the caller asked.
#include "load/model_dir.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string_view>
#include <stdexcept>

#include "base/utf8.h"
#include "io/mapped_file.h"
#include "io/weights.h"
#include "text/basic_tokenizer.h"

namespace load {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDirHint =
    " (a model directory holds config.json, the weights in model.safetensors, model.safetensors.index.json, "
    "pytorch_model.bin or pytorch_model.bin.index.json, and its tokenizer: vocab.txt, tokenizer.json or spm.model)";

// A model directory and its files: every entry a loader may read must be a regular file (or a link
// to one). A FIFO would block the reader until some process writes to it, a device such as /dev/zero
// would never end: both are refused by name before anything is opened.
void require_directory(const std::string& dir) {
  if (!fs::is_directory(dir)) throw io::Error(dir + ": no such model directory" + kDirHint);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool read_by_loaders = name.ends_with(".json") || name.ends_with(".safetensors") || name.ends_with(".bin") ||
                                 name == "vocab.txt" || name == "spm.model";
    if (read_by_loaders && !entry.is_regular_file(ec)) {
      throw io::Error(entry.path().string() + ": not a regular file; a model directory holds regular files");
    }
  }
}

void require_config(const std::string& dir) {
  if (!fs::exists(dir + "/config.json")) throw io::Error(dir + ": no config.json" + kDirHint);
}

// A config.json that does not declare RoFormerForSequenceClassification keeps no labels (HF writes
// a default id2label into every config); weights that hold the head then say how many it has.
void adopt_stored_classifier(model::RoFormerConfig& c, const io::WeightStore& w) {
  const std::string out = "classifier.out_proj.weight";
  if (c.head || !w.contains(out) || w.at(out).shape.size() != 2 || w.at(out).shape[0] < 1) return;
  c.labels.clear();
  for (int64_t i = 0; i < w.at(out).shape[0]; ++i) c.labels.push_back("LABEL_" + std::to_string(i));
  c.problem_type = c.labels.size() == 1 ? model::ProblemType::regression : model::ProblemType::single_label_classification;
  c.set_head("RoFormerForSequenceClassification");
}

// A tokenizer gives ids below the model's vocabulary: a char/byte tokenizer defines the vocabulary
// (equal sizes); an HF vocabulary may be padded to more embedding rows than vocab.txt has lines.
void check_tokenizer_fits(const text::Tokenizer& tok, int64_t vocab_size, const std::string& dir) {
  const bool defines_vocabulary = tok.kind() == text::TokenizerKind::byte || tok.kind() == text::TokenizerKind::character;
  if (defines_vocabulary ? tok.vocab_size() != vocab_size : tok.vocab_size() > vocab_size) {
    throw io::Error(dir + ": the " + tok.kind_name() + " tokenizer has " + std::to_string(tok.vocab_size()) +
                    " tokens, which do not fit the model's vocab_size " + std::to_string(vocab_size) +
                    " (config.json)");
  }
}

void validate(const model::RoFormerConfig& c, const std::string& config_path) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw io::Error(config_path + ": " + e.what());
  }
}

}  // namespace

// A WordPiece tokenizer can serve its vocabulary: the special tokens every encoding uses ([UNK],
// [CLS], [SEP], [PAD], [MASK] or their configured names) are lines of vocab.txt or declared added
// tokens, not ids invented past the trained embeddings; and the configured normalisation can produce
// the vocabulary's pieces (an uncased tokenizer over a cased vocab.txt never yields a piece with a
// capital: most words would become [UNK] with no error). Throws io::Error naming the files.
void check_tokenizer_serves(const text::RoFormerTokenizer& tok, const std::string& dir) {
  const text::TokenizerConfig& c = tok.config();
  const text::AddedToken* specials[] = {&c.unk_token, &c.cls_token, &c.sep_token, &c.pad_token, &c.mask_token};
  const char* names[] = {"unk_token", "cls_token", "sep_token", "pad_token", "mask_token"};
  for (size_t i = 0; i < std::size(specials); ++i) {
    const std::string& token = specials[i]->content;
    const bool added = std::any_of(c.added_tokens.begin(), c.added_tokens.end(),
                                   [&](const text::AddedToken& a) { return a.content == token; });
    if (!tok.vocab().contains(token) && !added) {
      throw io::Error(dir + ": the tokenizer's " + names[i] + " '" + token +
                      "' is not a line of vocab.txt nor an added token of tokenizer_config.json: every input "
                      "would get an id the model never trained (a vocab.txt from another model?)");
    }
  }
  const bool strip = c.strip_accents.value_or(c.do_lower_case);
  if (!c.do_basic_tokenize || (!c.do_lower_case && !strip)) return;  // no normalisation: every piece is reachable
  int64_t pieces = 0, unreachable = 0;
  std::vector<std::string> examples;
  for (int32_t id = 0; id < tok.vocab().lines(); ++id) {
    std::string_view piece = tok.vocab().token(id);
    if (piece.size() > 2 && piece.front() == '[' && piece.back() == ']') continue;  // [CLS], [unused1], ...
    if (piece.rfind("##", 0) == 0) piece.remove_prefix(2);
    if (piece.empty()) continue;
    const std::u32string u = base::utf8_decode(piece);
    const std::u32string n = strip ? text::strip_accents(c.do_lower_case ? text::py_lower(u) : u)
                                   : text::py_lower(u);
    ++pieces;
    if (n != u) {
      ++unreachable;
      if (examples.size() < 3) examples.push_back("'" + tok.vocab().token(id) + "'");
    }
  }
  // A tenth: a cased vocabulary has capitals in a fifth to a third of its pieces, an uncased one in none.
  if (unreachable >= 20 && unreachable * 10 > pieces) {
    std::string e;
    for (const auto& x : examples) e += (e.empty() ? "" : ", ") + x;
    throw io::Error(dir + ": " + std::to_string(unreachable) + " of vocab.txt's " + std::to_string(pieces) +
                    " word pieces (" + e + ", ...) can never be produced: tokenizer_config.json says "
                    "do_lower_case " + (c.do_lower_case ? "true" : "false") + ", strip_accents " +
                    (strip ? "true" : "false") + ", but the vocabulary has capitals or accents; words with them would become " +
                    c.unk_token.content + " (a cased vocabulary needs do_lower_case false in a tokenizer_config.json beside vocab.txt, as "
                    "`roformer vocab --cased --out-dir` writes it)");
  }
}

const text::RoFormerTokenizer& Model::wordpiece(const std::string& who) const {
  const auto* wp = dynamic_cast<const text::RoFormerTokenizer*>(tokenizer.get());
  if (!wp) {
    throw io::Error(dir + ": a WordPiece tokenizer (vocab.txt) is what " + who + " read; this directory has " +
                    (tokenizer ? "a " + tokenizer->kind_name() + " tokenizer" : std::string("none")));
  }
  return *wp;
}

Model roformer(const std::string& dir, const Request& r) {
  require_directory(dir);
  Model out;
  out.dir = dir;
  const std::string config_path = dir + "/config.json";
  if (r.weights) require_config(dir);
  const bool has_config = fs::exists(config_path);  // a tokenizer-only directory may lack one
  if (has_config) out.config = model::RoFormerConfig::from_json_file(config_path);
  if (!r.classifier) {
    out.config.head = nullptr;
    out.config.labels.clear();
  }
  if (r.configure) r.configure(out.config);
  validate(out.config, config_path);
  if (r.tokenizer) {
    out.tokenizer = text::load_tokenizer(dir, r.tokenizer_options);
    // The cause first: a special token missing from vocab.txt also makes the tokenizer one token too large.
    if (const auto* wp = dynamic_cast<const text::RoFormerTokenizer*>(out.tokenizer.get())) check_tokenizer_serves(*wp, dir);
    if (has_config) check_tokenizer_fits(*out.tokenizer, out.config.vocab_size, dir);
  }
  if (!r.weights) return out;

  const auto weights = io::open_weights(dir);
  if (r.classifier) adopt_stored_classifier(out.config, *weights);
  model::check_config_against_weights(out.config, *weights, config_path, "", r.optional);
  if (r.positions > out.config.max_position_embeddings && out.config.rope_scaling == "none" &&
      out.config.position_encoding != model::PositionEncoding::learned) {
    out.config.max_position_embeddings = r.positions;
  }
  out.model = std::make_unique<model::RoFormer<float>>(out.config);
  if (r.init_seed) out.model->init_weights(*r.init_seed);
  std::vector<std::string> skip = r.skip;
  if (!r.classifier) {
    for (const model::HeadDef* h : model::head_registry()) {
      for (const model::HeadTensor& t : h->tensors(out.config)) skip.push_back(t.name);
    }
  }
  out.model->load(*weights, skip, r.mlm_head, r.optional);
  out.int8_checkpoint = weights->has_int8_tensors();
  if (r.inference) {
    out.model->set_keep(model::Keep::outputs);
    model::prepare_for_inference(*out.model, *r.inference, out.int8_checkpoint, r.release_packed_arena);
  }
  return out;
}

bool is_seq2seq(const std::string& dir) {
  try {
    return io::read_json_object(dir + "/config.json").value("model_type", "") == "encoder-decoder";
  } catch (const std::exception&) {  // no such file, not JSON, or "model_type" not a string
    return false;
  }
}

bool is_causal_lm(const std::string& dir) {
  try {
    return io::read_json_object(dir + "/config.json").value("is_decoder", false);
  } catch (const std::exception&) {  // no such file, not JSON, or "is_decoder" not a boolean
    return false;
  }
}

Seq2Seq seq2seq(const std::string& dir, const Request& r) {
  require_directory(dir);
  require_config(dir);
  Seq2Seq out;
  out.dir = dir;
  const std::string config_path = dir + "/config.json";
  out.config = model::Seq2SeqConfig::from_json_file(config_path);
  if (r.tokenizer) {
    if (!fs::exists(dir + "/spm.model")) throw io::Error(dir + ": no spm.model (the SentencePiece model of a translation directory)");
    out.tokenizer = std::make_shared<const text::SentencePiece>(text::SentencePiece::load(dir + "/spm.model"));
    if (out.tokenizer->vocab_size() > out.config.encoder.vocab_size) {
      throw io::Error(dir + "/spm.model: " + std::to_string(out.tokenizer->vocab_size()) +
                      " pieces do not fit the model's vocabulary of " + std::to_string(out.config.encoder.vocab_size));
    }
  }
  if (!r.weights) return out;

  const auto weights = io::open_weights(dir);
  model::check_seq2seq_against_weights(out.config, *weights, config_path);
  out.model = std::make_unique<model::Seq2Seq<float>>(out.config);
  if (r.init_seed) out.model->init_weights(*r.init_seed);
  out.model->load(*weights);
  out.int8_checkpoint = weights->has_int8_tensors();
  if (r.inference) {
    out.model->encoder().set_keep(model::Keep::outputs);  // activation memory independent of depth
    // The arena is kept: the encoder and decoder views share the embeddings and their owner's arena.
    model::prepare_for_inference(out.model->encoder(), *r.inference, out.int8_checkpoint, false);
    model::prepare_for_inference(out.model->decoder(), *r.inference, out.int8_checkpoint, false);
  }
  return out;
}

}  // namespace load
