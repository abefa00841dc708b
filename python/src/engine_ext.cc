// roformer._engine: the RoFormer inference engine (src/infer, src/text) for Python (nanobind). Model
// wraps infer::Pipeline (a Hugging Face RoFormer directory: config, weights, tokenizer, optional
// classification head) and Tokenizer wraps text::RoFormerTokenizer; results are the command line's
// (`roformer embed|similarity|classify|fill-mask|forward`), as NumPy arrays and Python objects. Bad
// input raises ValueError with the engine's message. The GIL is released while the engine runs, and
// a Model's lock is held meanwhile: its activation buffers are shared, so two Python threads on one
// Model take turns (on two Models they run at once). The Python API over this module is
// roformer/engine.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <atomic>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/threads.h"
#include "base/utf8.h"
#include "infer/fill_mask.h"
#include "infer/pipeline.h"
#include "load/hub_cache.h"
#include "text/roformer_tokenizer.h"

namespace nb = nanobind;

namespace {

using Ids = nb::ndarray<const int64_t, nb::ndim<2>, nb::device::cpu, nb::c_contig>;
using Floats = nb::ndarray<nb::numpy, float>;

// Runs f with the GIL released, turning the engine's exceptions into ValueError.
template <class F>
auto engine_call(F&& f) {
  try {
    nb::gil_scoped_release release;
    return f();
  } catch (const std::exception& e) {
    throw nb::value_error(e.what());
  }
}

// A float32 NumPy array of this shape that owns data (moved in).
Floats numpy_array(std::vector<float>&& data, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<float>(std::move(data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return Floats(owned->data(), shape, owner);
}

// The engine's OpenMP threads. OpenMP keeps the count per calling thread, so a count set from one
// Python thread would not reach a call made from another: every engine call sets it on the thread
// that runs the call, from the Model's own count, else roformer.set_threads's, else OpenMP's default
// (taken at import, before anything changed it).
std::atomic<int> g_threads{0};
int g_default_threads = 1;

int checked_threads(int n) {
  if (n < 0) throw nb::value_error(("threads must be >= 0 (0: the default), got " + std::to_string(n)).c_str());
  if (n > base::kMaxThreads) throw nb::value_error(("threads: " + base::thread_count_problem(n)).c_str());
  return n;
}

// The count for one engine call, restored after it: the thread's count is also what its other OpenMP
// users (PyTorch, rope.apply's default) get.
class ThreadsForCall {
 public:
  explicit ThreadsForCall(int model_threads) : saved_(omp_get_max_threads()) {
    const int n = model_threads > 0 ? model_threads : g_threads.load();
    omp_set_num_threads(n > 0 ? n : g_default_threads);
  }
  ~ThreadsForCall() { omp_set_num_threads(saved_); }
  ThreadsForCall(const ThreadsForCall&) = delete;
  ThreadsForCall& operator=(const ThreadsForCall&) = delete;

 private:
  int saved_;
};

nb::dict encoding_dict(const text::Encoding& e) {
  nb::dict d;
  d["tokens"] = e.tokens;
  d["input_ids"] = std::vector<int64_t>(e.input_ids.begin(), e.input_ids.end());
  d["token_type_ids"] = std::vector<int64_t>(e.token_type_ids.begin(), e.token_type_ids.end());
  d["attention_mask"] = std::vector<int64_t>(e.attention_mask.begin(), e.attention_mask.end());
  return d;
}

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& dir, const std::string& jieba_dict)
      : tok_(std::make_shared<text::RoFormerTokenizer>(engine_call([&] {
          text::LoadOptions lo;
          lo.jieba_dict = jieba_dict;
          return text::RoFormerTokenizer::load(load::resolve_model(dir), lo);
        }))) {}
  std::vector<std::string> tokenize(const std::string& s) const {
    return engine_call([&] { return tok_->tokenize(s); });
  }
  nb::dict encode(const std::string& a, std::optional<std::string> b, int64_t max_length) const {
    text::EncodeOptions o;
    if (max_length > 0) o.truncation = text::Truncation::LongestFirst, o.max_length = max_length;
    const text::Encoding e = engine_call([&] { return b ? tok_->encode_pair(a, *b, o) : tok_->encode(a, o); });
    return encoding_dict(e);
  }
  int64_t size() const { return tok_->size(); }

 private:
  std::shared_ptr<text::RoFormerTokenizer> tok_;
};

class Model {
  // Runs f with the GIL released and this model's lock held (defined first: its return type is deduced).
  // The lock is taken after the GIL is released: a thread waiting for it must not hold up the
  // interpreter (nor the thread that holds the lock).
  template <class F>
  auto locked(F&& f) {
    return engine_call([&] {
      std::lock_guard<std::mutex> lock(mu_);
      const ThreadsForCall threads(threads_);
      return f();
    });
  }

 public:
  Model(const std::string& dir, const std::string& rope_scaling, const std::string& jieba_dict, int threads)
      : threads_(checked_threads(threads)) {
    infer::LoadOptions o;
    o.rope_scaling = rope_scaling;
    o.jieba_dict = jieba_dict;
    p_ = locked([&] { return infer::Pipeline::load(load::resolve_model(dir), o); });
  }

  // As `roformer embed`: a sentence-transformers folder's prompt (prompt_name, else its default) before each text.
  Floats embed(const std::vector<std::string>& texts, const std::string& pooling, bool normalize, int64_t batch,
               const std::string& prompt_name) {
    infer::EmbedOptions o;
    o.pooling = engine_call([&] { return infer::parse_pooling(pooling); });
    o.normalize = normalize;
    o.batch_size = batch;
    const std::string prompt = engine_call([&] { return p_->prompt(prompt_name); });
    std::vector<std::string> prompted = texts;
    for (std::string& t : prompted) t = prompt + t;
    o.skip.assign(prompted.size(), engine_call([&] { return p_->prompt_tokens(prompt); }));
    const auto rows = locked([&] { return p_->embed(prompted, o); });
    const size_t H = static_cast<size_t>(p_->embedding_size(o.pooling));
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return numpy_array(std::move(flat), {rows.size(), H});
  }

  std::vector<double> similarity(const std::vector<std::pair<std::string, std::string>>& pairs,
                                 const std::string& pooling, int64_t batch) {
    infer::EmbedOptions o;
    o.pooling = engine_call([&] { return infer::parse_pooling(pooling); });
    o.batch_size = batch;
    return locked([&] { return p_->similarity(pairs, o); });
  }

  nb::list classify(const std::vector<std::string>& texts, int64_t batch) {
    const auto out = locked([&] { return p_->classify(texts, batch); });
    nb::list result;
    for (const auto& c : out) {
      nb::dict d;
      d["label"] = c.label;
      d["label_id"] = c.label_id;
      d["score"] = c.score;
      d[c.probabilities ? "probabilities" : "values"] = c.scores;  // as `roformer classify` prints them
      d["logits"] = c.logits;
      result.append(d);
    }
    return result;
  }

  // Per text, transformers' token-classification pipeline's entities (as `roformer ner` prints them).
  nb::list token_classification(const std::vector<std::string>& texts, const std::string& aggregation, int64_t batch) {
    const model::Aggregation a = engine_call([&] { return model::parse_aggregation(aggregation); });
    const auto out = locked([&] { return p_->token_classify(texts, a, batch); });
    nb::list result;
    for (const auto& entities : out) {
      nb::list per_text;
      for (const model::TokenEntity& e : entities) {
        nb::dict d;
        d[a == model::Aggregation::none ? "entity" : "entity_group"] = e.label;
        d["score"] = e.score;
        if (e.index >= 0) d["index"] = e.index;
        d["word"] = e.word;
        d["start"] = e.start;
        d["end"] = e.end;
        per_text.append(d);
      }
      result.append(per_text);
    }
    return result;
  }

  // Per (question, context), transformers' question-answering pipeline's answers, best first (as
  // `roformer qa` prints them, always a list).
  nb::list question_answering(const std::vector<std::pair<std::string, std::string>>& pairs, int64_t top_k,
                              int64_t max_answer_len, int64_t max_seq_len, int64_t doc_stride,
                              bool handle_impossible_answer, int64_t batch) {
    infer::QaOptions o;
    o.top_k = top_k, o.max_answer_length = max_answer_len, o.max_seq_len = max_seq_len, o.doc_stride = doc_stride;
    o.handle_impossible_answer = handle_impossible_answer;
    constexpr int64_t kMax = int64_t{1} << 20;  // the command line's and the server's bounds
    if (top_k < 1 || top_k > kMax || max_answer_len < 1 || max_answer_len > kMax || max_seq_len < 0 ||
        max_seq_len > kMax || doc_stride < 0 || doc_stride > kMax) {
      throw nb::value_error("top_k and max_answer_len must be in [1, 2^20], max_seq_len and doc_stride in [0, 2^20]");
    }
    std::vector<infer::Question> questions;
    for (const auto& [q, c] : pairs) questions.push_back({q, c});
    const auto out = locked([&] { return p_->answer(questions, o, batch); });
    nb::list result;
    for (size_t i = 0; i < out.size(); ++i) {
      nb::list answers;
      for (const model::PipelineAnswer& a : out[i]) {
        nb::dict d;
        d["score"] = a.score;
        d["start"] = a.start;
        d["end"] = a.end;
        d["answer"] = std::string(base::utf8_slice(questions[i].context, a.start, a.end));
        answers.append(d);
      }
      result.append(answers);
    }
    return result;
  }

  nb::list fill_mask(const std::vector<std::string>& texts, int64_t top_k, int64_t batch) {
    const auto out = locked([&] { return infer::fill_mask(*p_, texts, top_k, batch); });
    nb::list result;
    for (const auto& masks : out) {
      nb::list per_text;
      for (const auto& preds : masks) {
        nb::list per_mask;
        for (const auto& pr : preds) {
          nb::dict d;
          d["score"] = pr.score;
          d["token"] = pr.token;
          d["token_str"] = pr.token_str;
          d["sequence"] = pr.sequence;
          per_mask.append(d);
        }
        per_text.append(per_mask);
      }
      result.append(per_text);
    }
    return result;
  }

  // The encoder (and MLM head) on one batch of ids: last_hidden_state (B, T, H), logits (B, T, V).
  nb::dict forward(Ids ids, std::optional<Ids> attention_mask, std::optional<Ids> token_type_ids) {
    const int64_t B = static_cast<int64_t>(ids.shape(0)), T = static_cast<int64_t>(ids.shape(1));
    auto check_shape = [&](const std::optional<Ids>& a, const char* name) {
      if (a && (static_cast<int64_t>(a->shape(0)) != B || static_cast<int64_t>(a->shape(1)) != T)) {
        throw nb::value_error((std::string(name) + " must have the shape of input_ids").c_str());
      }
    };
    check_shape(attention_mask, "attention_mask");
    check_shape(token_type_ids, "token_type_ids");
    model::Inputs in;
    in.ids = ids.data();
    in.attention_mask = attention_mask ? attention_mask->data() : nullptr;
    in.token_types = token_type_ids ? token_type_ids->data() : nullptr;
    in.B = B, in.T = T;
    const auto& c = p_->config();
    const size_t b = static_cast<size_t>(B), t = static_cast<size_t>(T);
    const size_t H = static_cast<size_t>(c.hidden_size), V = static_cast<size_t>(c.vocab_size);
    std::vector<float> hidden, logits;
    bool has_logits = false;
    locked([&] {  // the outputs are the model's buffers: copied before another call can overwrite them
      model::RoFormer<float>& m = p_->model();
      m.forward(in);
      const float* h = m.hidden_state(c.num_hidden_layers);
      hidden.assign(h, h + b * t * H);
      has_logits = m.logits() != nullptr;  // an encoder-only checkpoint has no MLM head
      if (has_logits) logits.assign(m.logits(), m.logits() + b * t * V);
    });
    nb::dict d;
    d["last_hidden_state"] = numpy_array(std::move(hidden), {b, t, H});
    if (has_logits) d["logits"] = numpy_array(std::move(logits), {b, t, V});
    return d;
  }

  int64_t hidden_size() const { return p_->config().hidden_size; }
  int64_t max_length() const { return p_->max_length(); }
  std::vector<std::string> labels() const {
    return p_->classifier() ? p_->classifier()->labels : std::vector<std::string>{};
  }
  int threads() const { return threads_; }
  void set_threads(int n) { threads_ = checked_threads(n); }

 private:
  std::unique_ptr<infer::Pipeline> p_;
  std::mutex mu_;
  std::atomic<int> threads_;  // 0: roformer.set_threads's count
};

}  // namespace

NB_MODULE(_engine, m) {
  m.doc() = "The RoFormer engine (roformer.engine is the Python API over it)";
  nb::class_<Tokenizer>(m, "Tokenizer")
      .def(nb::init<const std::string&, const std::string&>(), nb::arg("dir"), nb::arg("jieba_dict") = "")
      .def("tokenize", &Tokenizer::tokenize)
      .def("encode", &Tokenizer::encode, nb::arg("text"), nb::arg("text_pair").none() = nb::none(),
           nb::arg("max_length") = -1)
      .def("__len__", &Tokenizer::size);
  nb::class_<Model>(m, "Model")
      .def(nb::init<const std::string&, const std::string&, const std::string&, int>(), nb::arg("dir"),
           nb::arg("rope_scaling") = "", nb::arg("jieba_dict") = "", nb::arg("threads") = 0)
      .def("embed", &Model::embed, nb::arg("texts"), nb::arg("pooling") = "auto", nb::arg("normalize") = false,
           nb::arg("batch_size") = 16, nb::arg("prompt_name") = "")
      .def("similarity", &Model::similarity, nb::arg("pairs"), nb::arg("pooling") = "auto", nb::arg("batch_size") = 16)
      .def("classify", &Model::classify, nb::arg("texts"), nb::arg("batch_size") = 16)
      .def("fill_mask", &Model::fill_mask, nb::arg("texts"), nb::arg("top_k") = 5, nb::arg("batch_size") = 16)
      .def("token_classification", &Model::token_classification, nb::arg("texts"),
           nb::arg("aggregation_strategy") = "simple", nb::arg("batch_size") = 16)
      .def("question_answering", &Model::question_answering, nb::arg("pairs"), nb::arg("top_k") = 1,
           nb::arg("max_answer_len") = 15, nb::arg("max_seq_len") = 0, nb::arg("doc_stride") = 0,
           nb::arg("handle_impossible_answer") = false, nb::arg("batch_size") = 16)
      .def("forward", &Model::forward, nb::arg("input_ids"), nb::arg("attention_mask").none() = nb::none(),
           nb::arg("token_type_ids").none() = nb::none())
      .def_prop_ro("hidden_size", &Model::hidden_size)
      .def_prop_ro("max_length", &Model::max_length)
      .def_prop_ro("labels", &Model::labels)
      .def_prop_rw("threads", &Model::threads, &Model::set_threads);
  g_default_threads = omp_get_max_threads();
  m.def("set_threads", [](int n) { g_threads = checked_threads(n); }, nb::arg("n"));
  m.def("get_threads", [] {
    const int n = g_threads.load();
    return n > 0 ? n : g_default_threads;
  });
}
