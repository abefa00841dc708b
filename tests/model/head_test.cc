// Every head of the registry (model/head.h), from the registry itself: whole-model gradients with the
// head's dropout on, against central differences in float64; the head's loss and its gradient
// against a plain float64 cross-entropy; its tensors under HF's names; config.json round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "grad_check.h"
#include "model/head.h"
#include "model/roformer.h"

namespace {

model::RoFormerConfig tiny(const model::HeadDef& head) {
  model::RoFormerConfig c;
  c.vocab_size = 11;
  c.embedding_size = 8;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 12;
  c.max_position_embeddings = 8;
  c.hidden_dropout_prob = 0.2;
  c.attention_probs_dropout_prob = 0.1;
  c.head = &head;
  if (head.uses_labels()) {
    c.labels = head.architecture() == std::string("RoFormerForQuestionAnswering") ? std::vector<std::string>{"LABEL_0", "LABEL_1"}
                                                                                   : std::vector<std::string>{"O", "B-PER", "I-PER"};
  }
  if (c.sequence_classifier()) c.problem_type = model::ProblemType::single_label_classification;
  return c;
}

std::vector<double> normal(size_t n, uint64_t seed, double scale = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z;
  std::vector<double> v(n);
  for (double& x : v) x = scale * z(rng);
  return v;
}

// The tensor names each HF class stores besides the encoder's (transformers' modeling_roformer.py).
std::vector<std::string> hf_names(const std::string& architecture) {
  if (architecture == "RoFormerForSequenceClassification") {
    return {"classifier.dense.weight", "classifier.dense.bias", "classifier.out_proj.weight", "classifier.out_proj.bias"};
  }
  if (architecture == "RoFormerForQuestionAnswering") return {"qa_outputs.weight", "qa_outputs.bias"};
  return {"classifier.weight", "classifier.bias"};  // token classification, multiple choice
}

// --task of roformer finetune: every task's name parses back to it, and an unknown one is refused
// naming the ones there are.
TEST(Heads, TaskNamesRoundTrip) {
  for (model::HeadTask t : {model::HeadTask::text_classification, model::HeadTask::token_classification,
                            model::HeadTask::question_answering, model::HeadTask::multiple_choice}) {
    EXPECT_EQ(model::parse_head_task(model::head_task_name(t)), t);
  }
  EXPECT_STREQ(model::head_task_name(model::HeadTask::multiple_choice), "multiple-choice");
  try {
    model::parse_head_task("text_classification");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown task 'text_classification' (text-classification, token-classification, "
                           "question-answering, multiple-choice)");
  }
}

TEST(Heads, RegistryFindsEveryHeadByArchitectureAndTask) {
  EXPECT_EQ(model::head_registry().size(), 4u);
  for (const model::HeadDef* h : model::head_registry()) {
    EXPECT_EQ(model::find_head(h->architecture()), h);
    EXPECT_EQ(&model::head_named(model::head_task_name(h->task())), h);
    EXPECT_EQ(&model::head_of(h->task()), h);
  }
  EXPECT_EQ(model::find_head("RoFormerForMaskedLM"), nullptr);
  try {
    model::head_named("summarization");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token-classification"), std::string::npos) << e.what();
  }
}

class EveryHead : public testing::TestWithParam<const model::HeadDef*> {};

TEST_P(EveryHead, TensorsCarryHuggingFaceNamesAndReplaceTheMlmHead) {
  const model::RoFormerConfig c = tiny(*GetParam());
  model::RoFormer<float> m(c);
  EXPECT_FALSE(m.has_mlm_head());
  std::vector<std::string> names;
  for (const auto& info : m.layout()) {
    EXPECT_NE(info.name.rfind("cls.", 0), 0u) << info.name;
    if (info.name.rfind("roformer.", 0) != 0) names.push_back(info.name);
  }
  EXPECT_EQ(names, hf_names(GetParam()->architecture()));
}

TEST_P(EveryHead, ConfigJsonRoundTrip) {
  const model::RoFormerConfig c = tiny(*GetParam());
  const std::string text = c.to_json();
  EXPECT_NE(text.find(GetParam()->architecture()), std::string::npos);
  const auto back = model::RoFormerConfig::from_json_text(text, "config.json");
  EXPECT_EQ(back.head, c.head);
  EXPECT_EQ(back.labels, c.labels);
  EXPECT_EQ(back.to_json(), text);
}

// Loss Σ head_logits · G through the whole model, dropout on in the encoder and the head.
TEST_P(EveryHead, WholeModelGradientsWithDropout) {
  const model::RoFormerConfig c = tiny(*GetParam());
  model::RoFormer<double> m(c);
  m.init_weights(4);
  const std::vector<double> jitter = normal(m.params.size(), 5, 0.2);
  for (size_t i = 0; i < jitter.size(); ++i) m.params[i] += jitter[i];
  const int64_t B = 4, T = 5;
  std::vector<int64_t> ids(B * T), mask(B * T, 1), types(B * T, 0);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = 1 + (i * 7) % (c.vocab_size - 1);
  mask[B * T - 1] = 0;
  model::Inputs in{.ids = ids.data(), .token_types = types.data(), .attention_mask = mask.data(), .B = B, .T = T};
  const int64_t n = c.head->logits_count(c, B, T);
  const std::vector<double> G = normal(static_cast<size_t>(n), 6);
  auto loss = [&] {
    m.forward(in, true, 77);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += m.head_logits()[i] * G[i];
    return s;
  };
  loss();
  m.zero_grad();
  m.backward_from_head_logits(G.data());
  const std::vector<double> analytic = m.grads;
  std::vector<int64_t> at;
  for (const auto& info : m.layout()) {
    for (int64_t j : testing_util::picks(info.size, 3, info.offset)) {
      if (info.name == "roformer.embeddings.word_embeddings.weight" && j / c.embedding_size == c.pad_token_id) continue;
      at.push_back(info.offset + j);
    }
  }
  EXPECT_GT(testing_util::expect_gradient("params", m.params, analytic, at, loss, testing_util::kModelCheck), 40);
  // Inference has no dropout: two forwards agree.
  m.forward(in);
  const std::vector<double> a(m.head_logits(), m.head_logits() + n);
  m.forward(in);
  EXPECT_EQ(a, std::vector<double>(m.head_logits(), m.head_logits() + n));
}

// The head's loss against a plain float64 cross-entropy over its own grouping of the logits, and its
// gradient against central differences of that loss.
TEST_P(EveryHead, LossAndItsGradient) {
  const model::HeadDef& h = *GetParam();
  const model::RoFormerConfig c = tiny(h);
  const int64_t B = 6, T = 5, choices = 3;
  const int64_t n = h.logits_count(c, B, T);
  std::vector<float> z(static_cast<size_t>(n));
  const std::vector<double> zd = normal(z.size(), 9);
  for (size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>(zd[i]);
  // Rows of `width` scores (stride between a row's scores) and a target each.
  struct Row {
    std::vector<int64_t> at;
    int64_t target;
    double weight;
  };
  std::vector<Row> rows;
  std::vector<int64_t> ids;
  const std::string arch = h.architecture();
  std::mt19937_64 rng(3);
  if (arch == "RoFormerForSequenceClassification") {
    for (int64_t b = 0; b < B; ++b) {
      ids.push_back(static_cast<int64_t>(rng() % 3));
      rows.push_back({{b * 3, b * 3 + 1, b * 3 + 2}, ids.back(), 1});
    }
  } else if (arch == "RoFormerForTokenClassification") {
    for (int64_t t = 0; t < B * T; ++t) {
      ids.push_back(t % 4 == 0 ? model::kIgnoreIndex : static_cast<int64_t>(rng() % 3));
      if (ids.back() != model::kIgnoreIndex) rows.push_back({{t * 3, t * 3 + 1, t * 3 + 2}, ids.back(), 1});
    }
  } else if (arch == "RoFormerForQuestionAnswering") {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < 2; ++k) {
        ids.push_back(b == 0 && k == 1 ? T : static_cast<int64_t>(rng() % T));  // one end past the row: not counted
        std::vector<int64_t> at;
        for (int64_t t = 0; t < T; ++t) at.push_back((b * T + t) * 2 + k);
        if (ids.back() < T) rows.push_back({at, ids.back(), 0.5});
      }
    }
  } else {
    for (int64_t e = 0; e < B / choices; ++e) {
      ids.push_back(static_cast<int64_t>(rng() % choices));
      rows.push_back({{e * 3, e * 3 + 1, e * 3 + 2}, ids.back(), 1});
    }
  }
  auto reference = [&](const std::vector<double>& x) {
    double s = 0;
    for (const Row& r : rows) {
      double m = -INFINITY, sum = 0;
      for (int64_t i : r.at) m = std::max(m, x[i]);
      for (int64_t i : r.at) sum += std::exp(x[i] - m);
      s += r.weight * (m + std::log(sum) - x[r.at[r.target]]);
    }
    return s;
  };
  const int64_t normaliser = 7;
  std::vector<float> d(z.size());
  const model::HeadLoss got = h.loss(c, z.data(), B, T, {ids.data(), nullptr}, choices, normaliser, d.data());
  std::vector<double> x(z.begin(), z.end());  // the logits as the head saw them
  EXPECT_NEAR(got.sum, reference(x), 1e-5 * std::max(1.0, reference(x)));
  std::vector<double> analytic(d.begin(), d.end());
  for (double& v : analytic) v *= normaliser;  // d(Σ / normaliser) → d Σ
  testing_util::expect_gradient("logits", x, analytic, testing_util::every(static_cast<int64_t>(x.size())),
                                [&] { return reference(x); }, {1e-6, false, 1e-5, 1e-4, true});
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryHead, testing::ValuesIn(model::head_registry()),
                         [](const testing::TestParamInfo<const model::HeadDef*>& i) {
                           std::string name = model::head_task_name(i.param->task());
                           for (char& ch : name) if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace

namespace {

// Token classification's metrics are seqeval 1.2.2's: tag sequences with conlleval's edge cases (an
// I- after O or after another type starts an entity; a wrong end is a miss), the numbers seqeval
// printed for them (precision_score, recall_score, f1_score, accuracy_score, classification_report,
// and the strict IOB2 mode). The tags reach the head as targets and as the argmax of its logits.
TEST(TokenClassificationHead, MetricsAreSeqevals) {
  const model::HeadDef& h = model::head_named("token-classification");
  model::RoFormerConfig c = tiny(h);
  c.labels = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"};
  const std::vector<std::vector<std::string>> truth = {{"B-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-LOC", "O"},
                                                       {"I-PER", "I-PER", "O", "B-ORG"},
                                                       {"O", "B-LOC", "B-LOC", "I-PER"}};
  const std::vector<std::vector<std::string>> predicted = {{"B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "O"},
                                                           {"B-PER", "I-PER", "O", "I-ORG"},
                                                           {"O", "B-LOC", "I-LOC", "I-PER"}};
  const int64_t B = 3, T = 9, L = 7;  // [CLS] words [SEP] padding: -100 where nothing counts
  model::HeadOutputs out{B, T, std::vector<float>(B * T * L, 0.0f), std::vector<int64_t>(B * T, model::kIgnoreIndex), {}};
  auto id = [&](const std::string& tag) { return std::find(c.labels.begin(), c.labels.end(), tag) - c.labels.begin(); };
  for (int64_t r = 0; r < B; ++r) {
    for (size_t w = 0; w < truth[r].size(); ++w) {
      const int64_t t = 1 + static_cast<int64_t>(w);
      out.ids[r * T + t] = id(truth[r][w]);
      out.logits[(r * T + t) * L + id(predicted[r][w])] = 1.0f;
    }
  }
  const auto m = h.metrics(c, {out}, 1);
  EXPECT_NEAR(m.at("precision"), 0.6666666666666666, 1e-15);
  EXPECT_NEAR(m.at("recall"), 0.5714285714285714, 1e-15);
  EXPECT_NEAR(m.at("f1"), 0.6153846153846153, 1e-15);
  EXPECT_NEAR(m.at("accuracy"), 0.7333333333333333, 1e-15);
  EXPECT_NEAR(m.at("strict_precision"), 0.25, 1e-15);
  EXPECT_NEAR(m.at("strict_recall"), 0.2, 1e-15);
  EXPECT_NEAR(m.at("strict_f1"), 0.22222222222222224, 1e-15);
  EXPECT_EQ(m.at("PER_f1"), 1.0);
  EXPECT_EQ(m.at("PER_number"), 3);
  EXPECT_EQ(m.at("LOC_precision"), 0.0);
  EXPECT_EQ(m.at("LOC_number"), 3);
  EXPECT_EQ(m.at("ORG_recall"), 1.0);
}

// run_ner's alignment: a word's tag on its first sub-token, -100 on the others, or with
// label_all_tokens the tag again with B-X turned into I-X.
TEST(TokenClassificationHead, TargetsFollowRunNer) {
  const model::HeadDef& h = model::head_named("token-classification");
  model::RoFormerConfig c = tiny(h);
  c.labels = {"O", "B-PER", "I-PER"};
  const std::vector<int64_t> words = {-1, 0, 0, 1, 2, 2, -1};
  const int64_t X = model::kIgnoreIndex;
  EXPECT_EQ(h.targets(c, {words, {1, 2, 0}, false}), (std::vector<int64_t>{X, 1, X, 2, 0, X, X}));
  EXPECT_EQ(h.targets(c, {words, {1, 2, 0}, true}), (std::vector<int64_t>{X, 1, 2, 2, 0, 0, X}));
}

}  // namespace
