// The fine-tuning run (see finetune.h): options, labels and tokenisation, the model with its new
// classification head, then the loop of Trainer::step with evaluations, the best checkpoint, early
// stopping, checkpoints for resume and the metrics log. Data-parallel as `roformer train` (comm.h): the
// Trainer shares each batch among the ranks, every rank evaluates the whole validation set (metrics
// such as Pearson's need every prediction) so that all take the same best/early-stopping decisions,
// and rank 0 alone writes and prints.
#include "finetune.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "base/words.h"
#include "io/atomic_file.h"
#include "infer/pipeline.h"
#include "load/model_dir.h"
#include "base/utf8.h"
#include "text/roformer_tokenizer.h"
#include "text/squad.h"
#include "train/agree.h"
#include "train/checkpoint.h"
#include "train/classify_task.h"
#include "train/qa_features.h"
#include "model/metrics.h"
#include "train/run_loop.h"
#include "train/trainer.h"

namespace train {
namespace {

using nlohmann::json;

bool parse_integer(const std::string& s, int64_t* v) {
  size_t used = 0;
  try {
    *v = std::stoll(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size();
}

bool parse_number(const std::string& s, double* v) {
  size_t used = 0;
  try {
    *v = std::stod(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size() && std::isfinite(*v);
}

// Several labels on a row: multi-label; a number that is not an integer: regression; else single-label.
model::ProblemType infer_problem_type(const std::vector<data::LabeledExample>& rows) {
  bool numbers = true, integers = true;
  for (const auto& r : rows) {
    if (r.labels.size() != 1) return model::ProblemType::multi_label_classification;  // [] too: a row with no label set
    double d;
    int64_t i;
    numbers = numbers && parse_number(r.labels[0], &d);
    integers = integers && parse_integer(r.labels[0], &i);
  }
  return numbers && !integers ? model::ProblemType::regression : model::ProblemType::single_label_classification;
}

// The label names: sorted (numerically when every name is an integer); "LABEL_0" for regression.
std::vector<std::string> label_names(const std::vector<data::LabeledExample>& rows, model::ProblemType problem_type) {
  if (problem_type == model::ProblemType::regression) return {"LABEL_0"};
  std::set<std::string> names;
  for (const auto& r : rows) names.insert(r.labels.begin(), r.labels.end());
  std::vector<std::string> out(names.begin(), names.end());
  int64_t a, b;
  const bool integers = std::all_of(out.begin(), out.end(), [&](const std::string& s) { return parse_integer(s, &a); });
  if (integers) {
    std::sort(out.begin(), out.end(), [&](const std::string& x, const std::string& y) {
      parse_integer(x, &a);
      parse_integer(y, &b);
      return a < b;
    });
  }
  return out;
}

// Tokenised examples with their targets; an unknown label or a bad score names the file and line.
std::vector<TokenizedExample> tokenize(const std::vector<data::LabeledExample>& rows, const std::string& origin,
                                       const text::RoFormerTokenizer& tok, const model::RoFormerConfig& cfg,
                                       int64_t max_length, bool labelled) {
  text::EncodeOptions eo;
  eo.truncation = text::Truncation::LongestFirst;
  eo.max_length = max_length;
  std::vector<TokenizedExample> out;
  out.reserve(rows.size());
  for (const auto& r : rows) {
    auto fail = [&](const std::string& what) { throw io::Error(origin + ":" + std::to_string(r.line) + ": " + what); };
    const text::Encoding e = r.text_pair.empty() ? tok.encode(r.text, eo) : tok.encode_pair(r.text, r.text_pair, eo);
    TokenizedExample x;
    x.ids.assign(e.input_ids.begin(), e.input_ids.end());
    x.types.assign(e.token_type_ids.begin(), e.token_type_ids.end());
    check_token_ids(x.ids, cfg.vocab_size, origin + ":" + std::to_string(r.line));
    if (labelled) {
      auto index_of = [&](const std::string& name) {
        const auto it = std::find(cfg.labels.begin(), cfg.labels.end(), name);
        if (it == cfg.labels.end()) fail("label '" + name + "' is not one of the model's labels");
        return static_cast<int64_t>(it - cfg.labels.begin());
      };
      if (cfg.problem_type == model::ProblemType::single_label_classification) {
        if (r.labels.size() != 1) fail("a single-label task needs exactly one label per row");
        x.label = index_of(r.labels[0]);
      } else if (cfg.problem_type == model::ProblemType::multi_label_classification) {
        x.values.assign(cfg.labels.size(), 0.0f);
        for (const auto& name : r.labels) x.values[index_of(name)] = 1.0f;
      } else {
        double v;
        if (r.labels.size() != 1 || !parse_number(r.labels[0], &v)) fail("a regression label must be one number");
        x.values = {static_cast<float>(v)};
      }
    }
    out.push_back(std::move(x));
  }
  return out;
}


// Token classification rows: each word tokenised on its own ([CLS] w1 pieces ... [SEP], as
// transformers' is_split_into_words), cut to max_length tokens, with the head's targets over the
// words' tags. Words past the cut or with no token (an empty or control-only word) keep no target:
// their number is returned in *dropped.
std::vector<TokenizedExample> tokenize_words(const std::vector<data::TaggedExample>& rows, const std::string& origin,
                                             const text::RoFormerTokenizer& tok, const model::RoFormerConfig& cfg,
                                             int64_t max_length, bool label_all_tokens, bool labelled,
                                             std::vector<std::vector<int64_t>>* word_ids_out, int64_t* dropped) {
  std::vector<TokenizedExample> out;
  for (const auto& r : rows) {
    TokenizedExample x;
    std::vector<int64_t> word_ids = {-1};
    x.ids.push_back(tok.cls_id());
    for (size_t w = 0; w < r.words.size(); ++w) {
      const std::vector<int32_t> pieces = tok.convert_tokens_to_ids(tok.tokenize(r.words[w]));
      for (const int32_t id : pieces) {
        if (static_cast<int64_t>(x.ids.size()) + 1 >= max_length) break;
        x.ids.push_back(id);
        word_ids.push_back(static_cast<int64_t>(w));
      }
    }
    x.ids.push_back(tok.sep_id());
    word_ids.push_back(-1);
    x.types.assign(x.ids.size(), 0);
    check_token_ids(x.ids, cfg.vocab_size, origin + ":" + std::to_string(r.line));
    std::set<int64_t> seen(word_ids.begin(), word_ids.end());
    *dropped += static_cast<int64_t>(r.words.size()) - static_cast<int64_t>(seen.size() - 1);
    if (labelled) {
      model::HeadExample e{word_ids, {}, label_all_tokens};
      for (const std::string& tag : r.tags) {
        const auto it = std::find(cfg.labels.begin(), cfg.labels.end(), tag);
        if (it == cfg.labels.end()) {
          throw io::Error(origin + ":" + std::to_string(r.line) + ": tag '" + tag + "' is not one of the model's labels");
        }
        e.labels.push_back(it - cfg.labels.begin());
      }
      x.targets = cfg.head->targets(cfg, e);
    }
    if (word_ids_out) word_ids_out->push_back(std::move(word_ids));
    out.push_back(std::move(x));
  }
  return out;
}

// Multiple-choice rows: each choice the pair (context, choice) as run_swag tokenises it (longest_first
// to max_length), an example's choices consecutive, its label on the first.
std::vector<TokenizedExample> tokenize_choices(const std::vector<data::ChoiceExample>& rows, const std::string& origin,
                                               const text::RoFormerTokenizer& tok, const model::RoFormerConfig& cfg,
                                               int64_t max_length) {
  text::EncodeOptions eo;
  eo.truncation = text::Truncation::LongestFirst;
  eo.max_length = max_length;
  std::vector<TokenizedExample> out;
  for (const auto& r : rows) {
    for (size_t k = 0; k < r.choices.size(); ++k) {
      const text::Encoding e = tok.encode_pair(r.context, r.choices[k], eo);
      TokenizedExample x;
      x.ids.assign(e.input_ids.begin(), e.input_ids.end());
      x.types.assign(e.token_type_ids.begin(), e.token_type_ids.end());
      check_token_ids(x.ids, cfg.vocab_size, origin + ":" + std::to_string(r.line));
      if (k == 0) x.label = r.label;
      out.push_back(std::move(x));
    }
  }
  return out;
}

// The choices per example of a multiple-choice file: every row has the first row's number (data::read_choices);
// another file of the run must have the same.
int64_t choice_width(const std::vector<data::ChoiceExample>& rows, const std::string& origin, int64_t want) {
  const int64_t width = rows.empty() ? want : static_cast<int64_t>(rows[0].choices.size());
  if (want > 0 && width != want) {
    throw io::Error(origin + ":" + std::to_string(rows[0].line) + ": " + std::to_string(width) +
                    " endings, but the training examples have " + std::to_string(want));
  }
  return width;
}

// Each example's gold answer texts, as text::squad_scores takes them.
std::vector<std::vector<std::string>> gold_answers(const std::vector<data::SquadExample>& examples) {
  std::vector<std::vector<std::string>> golds;
  for (const auto& x : examples) {
    golds.emplace_back();
    for (const auto& a : x.answers) golds.back().push_back(a.text);
  }
  return golds;
}

// The tag names of a token-classification run: --label-list, else the training tags sorted (run_ner).
std::vector<std::string> tag_names(const std::vector<data::TaggedExample>& rows, const std::vector<std::string>& given) {
  if (!given.empty()) return given;
  std::set<std::string> names;
  for (const auto& r : rows) names.insert(r.tags.begin(), r.tags.end());
  return {names.begin(), names.end()};
}

// One invocation of `roformer finetune`: the set-up in the constructor, then the loop.
class FinetuneRun : public Recipe {
 public:
  FinetuneRun(FinetuneOptions o, std::string resume_dir)
      : o_(std::move(o)), resume_dir_(std::move(resume_dir)), writer_(comm_.rank() == 0) {
    prepare();
  }
  FinetuneResult run(const ReportHook& on_report);

  void evaluate(EvalRecord& rec) override;
  void write_model(const std::string& dir) override { save_model(dir, *m_, *tok_); }

 private:
  void prepare();
  struct TaskRows {
    std::vector<TokenizedExample> train, validation;
  };
  TaskRows text_rows();
  TaskRows tag_rows();
  TaskRows choice_rows();
  TaskRows answer_rows();
  void require_examples(size_t train, size_t validation) const;
  void build_model(const std::vector<data::LabeledExample>& train_rows, const std::vector<std::string>& tags);
  bool per_token() const { return o_.task == model::HeadTask::token_classification; }
  bool choices() const { return o_.task == model::HeadTask::multiple_choice; }
  bool qa() const { return o_.task == model::HeadTask::question_answering; }
  int64_t doc_stride() const { return o_.doc_stride >= 0 ? o_.doc_stride : std::min<int64_t>(128, o_.max_length / 3); }
  data::ChoiceColumns choice_columns() const {
    data::ChoiceColumns c = o_.choice;
    c.label = o_.columns.label;
    return c;
  }
  // The best checkpoint as `roformer classify`, `ner` and `qa` load it (infer::Pipeline, with
  // --quantize/--gemm); test predictions go through it, in its length-sorted batches of --batch.
  std::unique_ptr<infer::Pipeline> best_pipeline() const;
  // Example e's head outputs for the head's metrics: `logits` (the pipeline's, its group_ rows'
  // concatenated) with its targets as training lays them out.
  model::HeadOutputs test_outputs(const std::vector<TokenizedExample>& examples, int64_t e, std::vector<float> logits) const;
  // A labelled --test file's metrics: printed, and written to out/test_metrics.json.
  void write_test_metrics(std::map<std::string, double> metrics) const;
  // The head logits of the model's last forward, over batch b, with b's targets (for the head's metrics).
  model::HeadOutputs head_outputs(const Batch& b) const {
    const float* z = m_->head_logits();
    return {b.B, b.T, std::vector<float>(z, z + cfg_.head->logits_count(cfg_, b.B, b.T)), b.targets, b.values};
  }
  void write_predictions();
  void write_tag_predictions();
  void write_choice_predictions();
  void write_answer_predictions();
  // The answers of `examples` from the head logits of their features' rows, in row order.
  std::vector<std::string> answer_texts(const std::vector<data::SquadExample>& examples,
                                        const std::vector<model::QaAnswer>& answers) const;

  FinetuneOptions o_;
  std::string resume_dir_;
  Communicator& comm_ = world();
  bool writer_;  // rank 0: writes the run directory and prints
  FinetuneResult result_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  const text::RoFormerTokenizer* tok_ = nullptr;  // tokenizer_ as WordPiece
  std::unique_ptr<Model> m_;
  std::unique_ptr<ClassifyTask> task_;
  std::unique_ptr<Trainer> trainer_;
  std::string precision_;  // the header's words for the training precision (apply_precision)
  model::RoFormerConfig cfg_;
  TrainerState state_;
  std::string metric_;
  int64_t group_ = 1;  // multiple choice: choices per example
  std::vector<data::SquadExample> val_squad_;  // question answering: the validation examples
  std::vector<model::SpanFeature> val_spans_;  //   and their features' offsets, one per validation row
  int64_t total_steps_ = 0;
  RunDirectoryLock lock_;  // a new run's (a resumed one is locked by run_finetune)
};

// The model and tokenizer: the pre-trained directory (a new run: its encoder, a new classifier head
// initialised from --seed, the config's labels and problem type from the data) or the checkpoint a
// resumed run continues.
void FinetuneRun::build_model(const std::vector<data::LabeledExample>& train_rows, const std::vector<std::string>& tags) {
  load::Request r;
  r.mlm_head = false;  // an MLM/causal-LM checkpoint's head and pooler are not part of a classifier
  r.skip = {"cls.", "roformer.pooler."};
  // A pre-trained encoder has no task head: the new head keeps its initialisation.
  for (const model::HeadTensor& t : model::head_of(o_.task).tensors(model::RoFormerConfig{})) r.optional.push_back(t.name);
  r.init_seed = o_.seed;
  r.configure = [&](model::RoFormerConfig& c) {
    if (resume_dir_.empty()) {
      c.head = &model::head_of(o_.task);
      if (per_token()) {
        c.problem_type = model::ProblemType::none;
        c.labels = tags;
      } else if (choices() || qa()) {
        c.problem_type = model::ProblemType::none;  // one score per choice, or a start and an end score: id2label does not size the head
        c.labels = {"LABEL_0", "LABEL_1"};  // transformers' default num_labels 2
      } else {
        c.problem_type = o_.problem_type.empty() ? infer_problem_type(train_rows) : model::parse_problem_type(o_.problem_type);
        c.labels = label_names(train_rows, c.problem_type);
      }
      if (c.labels.empty()) throw io::Error(o_.train + ": no row has a label (every label list is empty)");
      c.is_decoder = false;  // a classifier reads the whole text
      if (o_.dropout >= 0) c.hidden_dropout_prob = c.attention_probs_dropout_prob = o_.dropout;
      if (!o_.rope_scaling.empty()) c.rope_scaling = o_.rope_scaling;
      try {
        c.validate();
      } catch (const std::invalid_argument& e) {
        throw io::Error(o_.train + ": " + e.what());
      }
    }
    if (o_.max_length > c.max_position_embeddings && c.position_encoding == model::PositionEncoding::learned) {
      throw std::invalid_argument("--max-length " + std::to_string(o_.max_length) + " exceeds the model's " +
                                  std::to_string(c.max_position_embeddings) + " learned positions");
    }
  };
  // Plain extrapolation: rotary (or sinusoidal, or no) positions have no table to outgrow, so a model
  // fine-tuned past max_position_embeddings declares the length it was trained at. `roformer classify`
  // and transformers (whose rotary table is computed from this field) then take such inputs, with the
  // angles of training. With --rope-scaling the field stays and the factor gives the length.
  r.positions = o_.max_length;
  load::Model loaded = load::roformer(resume_dir_.empty() ? o_.model : resume_dir_, r);
  tok_ = &loaded.wordpiece("fine-tuning and its predictions");
  tokenizer_ = std::move(loaded.tokenizer);
  cfg_ = loaded.config;
  m_ = std::move(loaded.model);
}

// Training and validation files of one task, read, checked and tokenised. Each task's builder reads
// its files, builds the model (whose labels may come from the training rows) and tokenises with it.
void FinetuneRun::require_examples(size_t train, size_t validation) const {
  if (train == 0) throw io::Error(o_.train + ": no examples");
  if (validation == 0) throw io::Error(o_.validation + ": no examples");
}

// Sequence classification (and regression): one row per text or pair.
FinetuneRun::TaskRows FinetuneRun::text_rows() {
  const auto train = data::read_labeled(o_.train, o_.columns);
  const auto val = data::read_labeled(o_.validation, o_.columns);
  require_examples(train.size(), val.size());
  build_model(train, {});
  return {tokenize(train, o_.train, *tok_, cfg_, o_.max_length, true),
          tokenize(val, o_.validation, *tok_, cfg_, o_.max_length, true)};
}

// Token classification: one row per sentence of words, a target per word's first piece (or every piece).
FinetuneRun::TaskRows FinetuneRun::tag_rows() {
  const auto train = data::read_tagged(o_.train, o_.tagged, o_.label_list);
  const auto val = data::read_tagged(o_.validation, o_.tagged, o_.label_list);
  require_examples(train.size(), val.size());
  build_model({}, tag_names(train, o_.label_list));
  int64_t dropped = 0;
  TaskRows rows{tokenize_words(train, o_.train, *tok_, cfg_, o_.max_length, o_.label_all_tokens, true, nullptr, &dropped),
                tokenize_words(val, o_.validation, *tok_, cfg_, o_.max_length, o_.label_all_tokens, true, nullptr, &dropped)};
  if (dropped > 0 && writer_) {
    std::fprintf(stderr, "%lld words past --max-length %lld or without a token keep no target\n",
                 static_cast<long long>(dropped), static_cast<long long>(o_.max_length));
  }
  return rows;
}

// Multiple choice: an example's choices are group_ consecutive rows.
FinetuneRun::TaskRows FinetuneRun::choice_rows() {
  const auto train = data::read_choices(o_.train, choice_columns());
  const auto val = data::read_choices(o_.validation, choice_columns());
  require_examples(train.size(), val.size());
  group_ = choice_width(train, o_.train, 0);
  choice_width(val, o_.validation, group_);
  build_model({}, {});
  return {tokenize_choices(train, o_.train, *tok_, cfg_, o_.max_length),
          tokenize_choices(val, o_.validation, *tok_, cfg_, o_.max_length)};
}

// Extractive QA: a row per --doc-stride window of each context; the validation windows' offsets are
// kept (val_spans_) for the answers evaluate() post-processes.
FinetuneRun::TaskRows FinetuneRun::answer_rows() {
  const auto train_squad = data::read_squad(o_.train, true);
  val_squad_ = data::read_squad(o_.validation, true);
  require_examples(train_squad.size(), val_squad_.size());
  build_model({}, {});
  QaFeatures train = qa_features(train_squad, o_.train, *tok_, cfg_, o_.max_length, doc_stride(), true);
  QaFeatures val = qa_features(val_squad_, o_.validation, *tok_, cfg_, o_.max_length, doc_stride(), true);
  if (writer_) {
    std::fprintf(stderr, "question answering: %s of %s, %s of %s (--max-length %lld, --doc-stride %lld)\n",
                 base::counted(static_cast<int64_t>(train.rows.size()), "training window").c_str(),
                 base::counted(static_cast<int64_t>(train_squad.size()), "example").c_str(),
                 base::counted(static_cast<int64_t>(val.rows.size()), "validation window").c_str(),
                 base::counted(static_cast<int64_t>(val_squad_.size()), "example").c_str(),
                 static_cast<long long>(o_.max_length), static_cast<long long>(doc_stride()));
    if (train.answers_lost + val.answers_lost > 0) {
      std::fprintf(stderr, "%lld training and %lld validation answers lie in no window whole (those windows learn "
                   "\"no answer\")\n", static_cast<long long>(train.answers_lost), static_cast<long long>(val.answers_lost));
    }
  }
  val_spans_ = std::move(val.spans);
  return {std::move(train.rows), std::move(val.rows)};
}

void FinetuneRun::prepare() {
  TaskRows rows = qa() ? answer_rows() : per_token() ? tag_rows() : choices() ? choice_rows() : text_rows();
  metric_ = o_.metric.empty() ? cfg_.head->default_metric(cfg_) : o_.metric;
  task_ = std::make_unique<ClassifyTask>(
      std::move(rows.train), std::move(rows.validation),
      ClassifyTaskConfig{cfg_.problem_type, cfg_.num_labels(), o_.batch, cfg_.pad_token_id, o_.seed, per_token(), group_, qa()});
  // A step count the schedule's doubles and the step numbers' six digits still hold exactly.
  constexpr int64_t kMaxSteps = int64_t{1} << 40;
  if (o_.epochs > kMaxSteps / task_->steps_per_epoch()) {
    throw io::Error("--epochs " + std::to_string(o_.epochs) + ": " + base::counted(task_->steps_per_epoch(), "step") +
                    " per epoch make more than 2^40 steps; at most " +
                    std::to_string(kMaxSteps / task_->steps_per_epoch()) + " epochs");
  }
  total_steps_ = o_.epochs * task_->steps_per_epoch();
  Schedule sched;
  sched.peak_lr = o_.lr;
  sched.total_steps = total_steps_;
  sched.warmup_steps = static_cast<int64_t>(std::ceil(o_.warmup_ratio * static_cast<double>(total_steps_)));
  sched.decay = Decay::linear;
  AdamWConfig adamw;
  adamw.weight_decay = o_.weight_decay;
  check_ranks_agree(comm_, run_facts(cfg_.to_json(), *tok_,
                                     {{"training data", o_.train}, {"validation data", o_.validation},
                                      {"model weights", o_.model + "/model.safetensors"},
                                      {"resumed checkpoint", resume_dir_.empty() ? "" : resume_dir_ + "/optimizer.safetensors"}},
                                     o_.to_json()));
  precision_ = apply_loop_settings(*m_, o_.loop);
  trainer_ = std::make_unique<Trainer>(
      *m_, *task_, TrainerConfig{sched, adamw, o_.clip, o_.seed, o_.loop.grad_accum, &comm_, o_.loop.bucket_mb, o_.loop.zero1});
  if (!resume_dir_.empty()) {
    state_ = restore_optimizer(resume_dir_, *trainer_, adamw);
  } else {
    lock_ = claim_run_directory(o_.out, writer_, {o_.model, o_.train, o_.validation, o_.test});
  }
  state_.options_json = o_.to_json();
  result_.best_dir = o_.out + "/best";
}

void FinetuneRun::evaluate(EvalRecord& rec) {
  std::vector<model::HeadOutputs> outputs;
  double loss = 0;
  int64_t n = 0;
  for (const Batch& b : task_->validation_batches()) {
    const int64_t count = task_->loss_count(b);
    loss += task_->evaluate(*m_, b, count).loss * static_cast<double>(count);
    n += count;
    outputs.push_back(head_outputs(b));
  }
  rec.val_loss = loss / static_cast<double>(n);
  rec.metrics = cfg_.head->metrics(cfg_, outputs, group_);
  if (qa()) {  // SQuAD's exact match and F1 over the examples' post-processed answers
    std::vector<std::vector<float>> logits;
    for (const model::HeadOutputs& b : outputs) {
      for (int64_t r = 0; r < b.B; ++r) {
        const int64_t T = static_cast<int64_t>(val_spans_[logits.size()].offsets.size());
        logits.emplace_back(b.logits.begin() + r * b.T * 2, b.logits.begin() + (r * b.T + T) * 2);
      }
    }
    const auto answers = model::postprocess_qa(static_cast<int64_t>(val_squad_.size()), val_spans_, logits, o_.qa);
    for (const auto& [name, value] :
         text::squad_scores(answer_texts(val_squad_, answers), gold_answers(val_squad_), o_.qa.version_2)) {
      rec.metrics[name] = value;
    }
  }
  rec.metrics["loss"] = rec.val_loss;
  if (!rec.metrics.count(metric_)) {
    throw std::invalid_argument("--metric " + metric_ + " is not computed for " + model::head_task_name(cfg_.head->task()) +
                                (cfg_.problem_type == model::ProblemType::none ? "" : std::string(" ") + model::problem_type_name(cfg_.problem_type)));
  }
}

std::unique_ptr<infer::Pipeline> FinetuneRun::best_pipeline() const {
  infer::LoadOptions best;
  static_cast<model::LinearOptions&>(best) = o_.linears;  // the task head stays fp32 (RoFormer::pack)
  best.tokenizer = false;  // the run's own tokenisation of the file's columns
  best.mlm_head = false;
  return infer::Pipeline::load(result_.best_dir, best);
}

// The model rows of tokenised examples as the pipeline's encodings (ids, token types, no padding).
std::vector<text::Encoding> as_encodings(const std::vector<TokenizedExample>& examples) {
  std::vector<text::Encoding> out(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    out[i].input_ids.assign(examples[i].ids.begin(), examples[i].ids.end());
    out[i].token_type_ids.assign(examples[i].types.begin(), examples[i].types.end());
    out[i].attention_mask.assign(examples[i].ids.size(), 1);
  }
  return out;
}

model::HeadOutputs FinetuneRun::test_outputs(const std::vector<TokenizedExample>& examples, int64_t e,
                                             std::vector<float> logits) const {
  const ClassifyTaskConfig c{cfg_.problem_type, cfg_.num_labels(), o_.batch, cfg_.pad_token_id, 0,
                             per_token(), group_, qa()};
  Batch b = classification_batch(examples, {e}, c, 0);
  return {b.B, b.T, std::move(logits), std::move(b.targets), std::move(b.values)};
}

void FinetuneRun::write_test_metrics(std::map<std::string, double> metrics) const {
  std::string line;
  for (const auto& [name, value] : metrics) {
    char v[32];
    std::snprintf(v, sizeof v, "%.4f", value);
    line += (line.empty() ? "" : ", ") + name + " " + v;
  }
  std::fprintf(stderr, "%s (%s): %s; %s/test_metrics.json\n", o_.test.c_str(), result_.best_dir.c_str(), line.c_str(),
               o_.out.c_str());
  io::write_file_atomic(o_.out + "/test_metrics.json", json(metrics).dump(2) + "\n");
}

void FinetuneRun::write_predictions() {
  if (per_token()) return write_tag_predictions();
  if (choices()) return write_choice_predictions();
  if (qa()) return write_answer_predictions();
  // A test file whose first row has the label column is also scored; one without it is predicted only.
  data::LabeledColumns cols = o_.columns;
  const bool labelled = data::has_column(o_.test, cols.label);
  if (!labelled) cols.label.clear();
  const auto rows = data::read_labeled(o_.test, cols);
  const auto examples = tokenize(rows, o_.test, *tok_, cfg_, o_.max_length, labelled);
  const auto classes = best_pipeline()->classify_encoded(as_encodings(examples), o_.batch);
  std::string text;
  std::vector<model::HeadOutputs> outputs;
  for (size_t i = 0; i < rows.size(); ++i) {
    const infer::Classification& c = classes[i];
    // The fields of `roformer classify` and the server (infer::Classification): "logits" the head's
    // raw outputs, "probabilities" their softmax (single-label) or sigmoid (multi-label), or a
    // regression's "values"; "label" and "score" the best label and its probability (a regression's
    // value). A multi-label prediction adds "labels": every label of probability above 0.5.
    json j = {{"line", rows[i].line}, {"label", c.label}, {"score", c.score}};
    j[c.probabilities ? "probabilities" : "values"] = c.scores;
    j["logits"] = c.logits;
    if (cfg_.problem_type == model::ProblemType::multi_label_classification) {
      std::vector<std::string> on;
      for (int64_t k = 0; k < cfg_.num_labels(); ++k) if (c.logits[k] > 0) on.push_back(cfg_.labels[k]);
      j["labels"] = on;
    }
    text += j.dump() + "\n";
    if (labelled) outputs.push_back(test_outputs(examples, static_cast<int64_t>(i), {c.logits.begin(), c.logits.end()}));
  }
  io::write_file_atomic(o_.out + "/predictions.jsonl", text);
  if (labelled) write_test_metrics(cfg_.head->metrics(cfg_, outputs, group_));
}

// Token classification: one row per test line, {"line", "tags"} with a tag per word (the prediction of
// its first sub-token), null for a word past --max-length or without a token.
void FinetuneRun::write_tag_predictions() {
  data::TaggedColumns cols = o_.tagged;
  const bool labelled = data::has_column(o_.test, cols.tags);
  if (!labelled) cols.tags.clear();
  const auto rows = data::read_tagged(o_.test, cols, o_.label_list);
  std::vector<std::vector<int64_t>> word_ids;
  int64_t dropped = 0;
  const auto examples =
      tokenize_words(rows, o_.test, *tok_, cfg_, o_.max_length, o_.label_all_tokens, labelled, &word_ids, &dropped);
  const int64_t L = cfg_.num_labels();
  const auto logits = best_pipeline()->head_logits_encoded(as_encodings(examples), o_.batch);  // (T, L) each
  std::string text;
  std::vector<model::HeadOutputs> outputs;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& words = word_ids[i];
    json tags = json::array();
    for (size_t w = 0; w < rows[i].words.size(); ++w) tags.push_back(nullptr);
    int64_t previous = -1;
    for (size_t t = 0; t < words.size(); ++t) {
      if (words[t] < 0 || words[t] == previous) continue;
      const float* z = logits[i].data() + static_cast<int64_t>(t) * L;
      tags[words[t]] = cfg_.labels[std::max_element(z, z + L) - z];
      previous = words[t];
    }
    text += json({{"line", rows[i].line}, {"tags", tags}}).dump() + "\n";
    if (labelled) outputs.push_back(test_outputs(examples, static_cast<int64_t>(i), logits[i]));
  }
  io::write_file_atomic(o_.out + "/predictions.jsonl", text);
  if (labelled) write_test_metrics(cfg_.head->metrics(cfg_, outputs, group_));
}

// Multiple choice: one row per test line, {"line", "label", "score", "probabilities", "logits"}: the
// chosen ending's index, its softmax probability over the example's choices, all of them, the scores.
void FinetuneRun::write_choice_predictions() {
  data::ChoiceColumns cols = choice_columns();
  const bool labelled = data::has_column(o_.test, cols.label);
  if (!labelled) cols.label.clear();
  const auto rows = data::read_choices(o_.test, cols);
  choice_width(rows, o_.test, group_);
  const auto examples = tokenize_choices(rows, o_.test, *tok_, cfg_, o_.max_length);
  // A choice's score reads the last position of its padded row: batches of --batch examples in file
  // order, as validation's (and transformers' Trainer with its data collator) pad them.
  const auto best = best_pipeline();
  best->set_input_order(true);
  const auto scores = best->head_logits_encoded(as_encodings(examples), o_.batch * group_);  // one per choice
  std::string text;
  std::vector<model::HeadOutputs> outputs;
  for (size_t e = 0; e < rows.size(); ++e) {
    std::vector<float> z;
    for (int64_t k = 0; k < group_; ++k) z.push_back(scores[e * group_ + k].at(0));
    const std::vector<double> p = model::apply_class_function("softmax", z.data(), group_);
    const int64_t best = std::max_element(z.begin(), z.end()) - z.begin();
    text += json({{"line", rows[e].line}, {"label", best}, {"score", p[best]}, {"probabilities", p},
                  {"logits", z}}).dump() + "\n";
    if (labelled) outputs.push_back(test_outputs(examples, static_cast<int64_t>(e), z));
  }
  io::write_file_atomic(o_.out + "/predictions.jsonl", text);
  if (labelled) write_test_metrics(cfg_.head->metrics(cfg_, outputs, group_));
}

std::vector<std::string> FinetuneRun::answer_texts(const std::vector<data::SquadExample>& examples,
                                                   const std::vector<model::QaAnswer>& answers) const {
  std::vector<std::string> out;
  for (size_t e = 0; e < examples.size(); ++e) {
    const model::QaAnswer& a = answers[e];
    if (a.chosen < 0) {
      out.emplace_back();
    } else if (a.nbest[a.chosen].placeholder) {
      out.emplace_back("empty");  // utils_qa's placeholder text
    } else {
      const model::SpanAnswer& s = a.nbest[a.chosen];
      out.emplace_back(base::utf8_slice(examples[e].context, s.start, s.end));
    }
  }
  return out;
}

// Question answering: one row per test line, {"line", "id", "answer", "start", "end", "probability"}:
// the answer's text, its character span in the context (code points, absent for no answer) and its
// probability among the n best; with --version-2, also "null_score_diff".
void FinetuneRun::write_answer_predictions() {
  const bool labelled = data::has_column(o_.test, "answers");
  const auto rows = data::read_squad(o_.test, labelled);
  const QaFeatures features = qa_features(rows, o_.test, *tok_, cfg_, o_.max_length, doc_stride(), false);
  const auto logits = best_pipeline()->head_logits_encoded(as_encodings(features.rows), o_.batch);  // (T, 2) each
  const auto answers = model::postprocess_qa(static_cast<int64_t>(rows.size()), features.spans, logits, o_.qa);
  const auto texts = answer_texts(rows, answers);
  std::string text;
  for (size_t e = 0; e < rows.size(); ++e) {
    const model::QaAnswer& a = answers[e];
    json j = {{"line", rows[e].line}, {"id", rows[e].id}, {"answer", texts[e]}};
    if (a.chosen >= 0 && !a.nbest[a.chosen].placeholder) {
      j["start"] = a.nbest[a.chosen].start, j["end"] = a.nbest[a.chosen].end;
    }
    if (a.chosen >= 0) j["probability"] = a.nbest[a.chosen].probability;
    if (o_.qa.version_2) j["null_score_diff"] = a.null_score_diff;
    text += j.dump() + "\n";
  }
  io::write_file_atomic(o_.out + "/predictions.jsonl", text);
  if (labelled) {  // the official SQuAD scores, as validation reports them
    const auto scores = text::squad_scores(texts, gold_answers(rows), o_.qa.version_2);
    write_test_metrics({scores.begin(), scores.end()});
  }
}

FinetuneResult FinetuneRun::run(const ReportHook& on_report) {
  // A run that trained all its steps, or stopped early (--patience evaluations without progress), has
  // nothing left to train: --resume then only writes the predictions it is asked for, from best/.
  const int64_t bad_evals = evaluations_without_improvement(state_.task_json, resume_dir_ + "/optimizer.safetensors");
  const bool finished = !resume_dir_.empty() &&
                        (state_.step >= total_steps_ || (o_.loop.patience > 0 && bad_evals >= o_.loop.patience));
  if (finished) {
    if (writer_) {
      std::fprintf(stderr, "%s finished at step %lld%s: nothing to train%s\n", o_.out.c_str(),
                   static_cast<long long>(state_.step), state_.step < total_steps_ ? " (stopped early)" : "",
                   o_.predict && !o_.test.empty() ? ("; predicting " + o_.test + " with its best checkpoint").c_str() : "");
      if (o_.predict && !o_.test.empty()) write_predictions();
    }
    return result_;
  }
  if (writer_) std::fprintf(stderr, "%s %s with %s on %s: %s (%s of %lld), batch %lld, lr %.2g, "
               "max length %lld, %s × %s, %s; best by %s\n",
               resume_dir_.empty() ? "fine-tuning" : "resuming",
               (cfg_.problem_type == model::ProblemType::none ? model::head_task_name(cfg_.head->task())
                                                              : model::problem_type_name(cfg_.problem_type)),
               (choices() ? base::counted(group_, "choice") : base::counted(cfg_.num_labels(), "label")).c_str(),
               o_.model.c_str(),
               base::counted(total_steps_, "step").c_str(), base::counted(o_.epochs, "epoch").c_str(),
               static_cast<long long>(task_->steps_per_epoch()), static_cast<long long>(o_.batch), o_.lr,
               static_cast<long long>(o_.max_length), base::counted(omp_get_max_threads(), "thread").c_str(),
               base::counted(comm_.size(), "process", "processes").c_str(), precision_.c_str(), metric_.c_str());
  LoopOptions lo;
  lo.out = o_.out;
  lo.total_steps = total_steps_;
  lo.steps_per_epoch = task_->steps_per_epoch();
  lo.eval_every = o_.loop.eval_every;
  lo.save_every = o_.loop.save_every;
  lo.metric = lo.best_metric = metric_;
  lo.higher_is_better = model::higher_is_better(metric_);
  lo.keep_best = true;
  lo.patience = o_.loop.patience;
  lo.keep_checkpoints = static_cast<int>(o_.loop.keep_checkpoints);
  lo.progress = o_.progress;
  lo.report.title = "fine-tuning: loss and validation " + metric_;
  RunLoop loop(std::move(lo), *trainer_, *this, state_, resume_dir_, on_report);
  static_cast<LoopResult&>(result_) = loop.run();
  if (result_.exit_code != 0) return result_;
  if (!writer_) return result_;  // the best metrics are printed once, by rank 0
  for (const auto& rec : loop.history()) {
    if (rec.step == result_.best_step) result_.best_metrics = rec.metrics;
  }
  std::fprintf(stderr, "%s after %lld steps: best %s %.4f at step %lld, saved in %s\n",
               result_.stopped_early ? "stopped early" : "done", static_cast<long long>(state_.step), metric_.c_str(),
               result_.best, static_cast<long long>(result_.best_step), result_.best_dir.c_str());
  if (o_.predict && !o_.test.empty()) write_predictions();
  return result_;
}

}  // namespace

std::string FinetuneOptions::to_json() const {
  json j = {{"model", model}, {"train", train}, {"validation", validation}, {"test", test},
                  {"text_column", columns.text}, {"text_pair_column", columns.text_pair},
                  {"label_column", columns.label}, {"problem_type", problem_type}, {"max_length", max_length},
                  {"batch", batch}, {"epochs", epochs}, {"metric", metric}, {"lr", lr}, {"warmup_ratio", warmup_ratio}, {"weight_decay", weight_decay},
                  {"clip", clip}, {"dropout", dropout}, {"rope_scaling", rope_scaling}, {"seed", seed},
                  {"predict", predict}, {"task", model::head_task_name(task)},
                  {"tokens_column", tagged.tokens}, {"tags_column", tagged.tags}, {"label_list", label_list},
                  {"label_all_tokens", label_all_tokens}, {"context_column", choice.context},
                  {"header_column", choice.header}, {"endings_column", choice.endings}, {"doc_stride", doc_stride},
                  {"n_best", qa.n_best}, {"max_answer_length", qa.max_answer_length}, {"version_2", qa.version_2},
                  {"null_threshold", qa.null_threshold}};
  loop.to_json(j);
  return j.dump(2) + "\n";
}

FinetuneOptions FinetuneOptions::from_json(const std::string& text) {
  FinetuneOptions o;
  try {
    const json j = json::parse(text);
    o.model = j.at("model"), o.train = j.at("train"), o.validation = j.at("validation"), o.test = j.at("test");
    o.columns = {j.at("text_column"), j.at("text_pair_column"), j.at("label_column")};
    o.problem_type = j.at("problem_type"), o.max_length = j.at("max_length"), o.batch = j.at("batch");
    o.epochs = j.at("epochs");
    o.metric = j.at("metric"), o.lr = j.at("lr"), o.warmup_ratio = j.at("warmup_ratio");
    o.weight_decay = j.at("weight_decay"), o.clip = j.at("clip"), o.dropout = j.at("dropout");
    o.rope_scaling = j.at("rope_scaling"), o.seed = j.at("seed"), o.predict = j.at("predict");
    o.loop.from_json(j);  // fields absent in older runs keep their defaults (save_every 0: at evaluations only)
    // absent in runs from before the head registry
    o.task = model::parse_head_task(j.value("task", std::string(model::head_task_name(o.task))));
    o.tagged = {j.value("tokens_column", "tokens"), j.value("tags_column", "ner_tags")};
    o.label_list = j.value("label_list", std::vector<std::string>{});
    o.label_all_tokens = j.value("label_all_tokens", false);
    o.choice = {j.value("context_column", "sent1"), j.value("header_column", "sent2"), j.value("endings_column", "ending")};
    o.doc_stride = j.value("doc_stride", int64_t{-1});
    o.qa.n_best = j.value("n_best", int64_t{20}), o.qa.max_answer_length = j.value("max_answer_length", int64_t{30});
    o.qa.version_2 = j.value("version_2", false), o.qa.null_threshold = j.value("null_threshold", 0.0);
  } catch (const json::exception& e) {
    throw io::Error(std::string("fine-tuning options: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw io::Error(std::string("fine-tuning options: ") + e.what());
  }
  return o;
}

void FinetuneOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  need(!model.empty(), "--model is required");
  need(!train.empty() && !validation.empty(), "--train and --validation are required");
  need(doc_stride >= -1, "--doc-stride must not be negative (-1: the default)");
  need(qa.n_best >= 1 && qa.max_answer_length >= 1, "--n-best and --max-answer-length must be positive");
  need(std::isfinite(qa.null_threshold), "--null-threshold must be finite");
  need(!choice.context.empty() && !choice.endings.empty(), "--context-column and --endings-column must not be empty");
  need(!columns.text.empty() && !columns.label.empty(), "--text-column and --label-column must not be empty");
  need(!tagged.tokens.empty() && !tagged.tags.empty(), "--tokens-column and --tags-column must not be empty");
  const bool known_problem = problem_type.empty() || [&] {
    try {
      model::parse_problem_type(problem_type);
      return true;
    } catch (const std::invalid_argument&) {
      return false;
    }
  }();
  need(known_problem, "--problem-type must be single_label_classification, multi_label_classification or regression");
  need(max_length >= 2, "--max-length must be at least 2");
  need(batch > 0 && epochs > 0, "--batch and --epochs must be positive");
  loop.validate(batch);
  need(lr > 0 && std::isfinite(lr), "--lr must be positive");
  need(warmup_ratio >= 0 && warmup_ratio <= 1, "--warmup-ratio must be in [0, 1]");
  need(weight_decay >= 0 && clip >= 0 && std::isfinite(weight_decay) && std::isfinite(clip),
       "--weight-decay and --clip must be finite and not negative");
  need(dropout < 1, "--dropout must be below 1");
  need(!predict || !test.empty(), "--predict needs --test");
  model::check_linear_options(linears);  // before training, not when the predictions are due
}

FinetuneResult run_finetune(FinetuneOptions o, bool resume, const ReportHook& on_report) {
  const RunDirectoryLock lock = resume ? RunDirectoryLock(o.out, world().rank() == 0) : RunDirectoryLock();
  std::string resume_dir;
  if (resume) {
    resume_dir = resume_options<FinetuneOptions>(o, "fine-tuning", [](FinetuneOptions& saved, const FinetuneOptions& given) {
      saved.linears = given.linears;  // the predictions' linear layers, test set and wish are the invocation's
      if (!given.test.empty()) saved.test = given.test;
      saved.predict = saved.predict || given.predict;
    }).dir;
  }
  o.validate();
  apply_threads(o.loop.threads, resume_dir);
  o.loop.precision = resolve_precision(o.loop.precision, resume_dir);
  FinetuneRun run(std::move(o), resume_dir);
  const FinetuneResult r = run.run(on_report);
  world().finish();
  return r;
}

}  // namespace train
