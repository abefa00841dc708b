// roformer._engine: the RoFormer inference engine (src/serve, src/text) for Python (nanobind). Model
// wraps serve::Pipeline (a Hugging Face RoFormer directory: config, weights, tokenizer, optional
// classification head) and Tokenizer wraps text::RoFormerTokenizer; results are the command line's
// (`roformer embed|similarity|classify|fill-mask|forward`), as NumPy arrays and Python objects. Bad
// input raises ValueError with the engine's message; the GIL is released while the engine runs.
// The Python API over this module is roformer/engine.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serve/fill_mask.h"
#include "serve/pipeline.h"
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

// A (rows, cols) float32 NumPy array that owns a copy of data.
Floats numpy_array(const float* data, size_t rows, size_t cols) {
  auto* copy = new std::vector<float>(data, data + rows * cols);
  nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return Floats(copy->data(), {rows, cols}, owner);
}

Floats numpy_array3(const float* data, size_t a, size_t b, size_t c) {
  auto* copy = new std::vector<float>(data, data + a * b * c);
  nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return Floats(copy->data(), {a, b, c}, owner);
}

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
          return text::RoFormerTokenizer::load(dir, lo);
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
 public:
  Model(const std::string& dir, const std::string& rope_scaling, const std::string& jieba_dict, int threads) {
    if (threads > 0) omp_set_num_threads(threads);
    serve::LoadOptions o;
    o.rope_scaling = rope_scaling;
    o.jieba_dict = jieba_dict;
    p_ = engine_call([&] { return serve::Pipeline::load(dir, o); });
  }

  Floats embed(const std::vector<std::string>& texts, const std::string& pooling, bool normalize, int64_t batch) {
    serve::EmbedOptions o;
    o.pooling = engine_call([&] { return serve::parse_pooling(pooling); });
    o.normalize = normalize;
    o.batch_size = batch;
    const auto rows = engine_call([&] { return p_->embed(texts, o); });
    const size_t H = static_cast<size_t>(p_->config().hidden_size);
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return numpy_array(flat.data(), rows.size(), H);
  }

  std::vector<double> similarity(const std::vector<std::pair<std::string, std::string>>& pairs,
                                 const std::string& pooling, int64_t batch) {
    serve::EmbedOptions o;
    o.pooling = engine_call([&] { return serve::parse_pooling(pooling); });
    o.batch_size = batch;
    return engine_call([&] { return p_->similarity(pairs, o); });
  }

  nb::list classify(const std::vector<std::string>& texts, int64_t batch) {
    const auto out = engine_call([&] { return p_->classify(texts, batch); });
    nb::list result;
    for (const auto& c : out) {
      nb::dict d;
      d["label"] = c.label;
      d["label_id"] = c.label_id;
      d["score"] = c.score;
      d["scores"] = c.scores;
      result.append(d);
    }
    return result;
  }

  nb::list fill_mask(const std::vector<std::string>& texts, int64_t top_k, int64_t batch) {
    const auto out = engine_call([&] { return serve::fill_mask(*p_, texts, top_k, batch); });
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
    model::RoFormer<float>& m = p_->model();
    engine_call([&] { return m.forward(in); });
    const auto& c = p_->config();
    nb::dict d;
    d["last_hidden_state"] = numpy_array3(m.hidden_state(c.num_hidden_layers), B, T, c.hidden_size);
    if (m.logits()) d["logits"] = numpy_array3(m.logits(), B, T, c.vocab_size);
    return d;
  }

  int64_t hidden_size() const { return p_->config().hidden_size; }
  int64_t max_length() const { return p_->max_length(); }
  std::vector<std::string> labels() const {
    return p_->classifier() ? p_->classifier()->labels : std::vector<std::string>{};
  }

 private:
  std::unique_ptr<serve::Pipeline> p_;
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
      .def("embed", &Model::embed, nb::arg("texts"), nb::arg("pooling") = "cls", nb::arg("normalize") = false,
           nb::arg("batch_size") = 16)
      .def("similarity", &Model::similarity, nb::arg("pairs"), nb::arg("pooling") = "cls", nb::arg("batch_size") = 16)
      .def("classify", &Model::classify, nb::arg("texts"), nb::arg("batch_size") = 16)
      .def("fill_mask", &Model::fill_mask, nb::arg("texts"), nb::arg("top_k") = 5, nb::arg("batch_size") = 16)
      .def("forward", &Model::forward, nb::arg("input_ids"), nb::arg("attention_mask").none() = nb::none(),
           nb::arg("token_type_ids").none() = nb::none())
      .def_prop_ro("hidden_size", &Model::hidden_size)
      .def_prop_ro("max_length", &Model::max_length)
      .def_prop_ro("labels", &Model::labels);
  m.def("set_threads", [](int n) { omp_set_num_threads(n); });
}
