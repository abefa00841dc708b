// The options every training recipe shares (src/train/loop_settings.h) and the enums that name a
// choice on the command line: each name parses back to its value and an unknown one is refused naming
// the values there are; the three recipes save the loop settings under the same JSON names (the
// strings runs saved before the enums), and options saved before a field existed load with the
// recipe's default.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "io/safetensors.h"
#include "model/roformer.h"
#include "text/tokenizer.h"
#include "train/finetune.h"
#include "train/lm_task.h"
#include "train/loop_settings.h"
#include "train/trainer.h"
#include "train/translate_run.h"

namespace {

using nlohmann::json;

// parse(name(v)) == v for every value, and the error of an unknown name.
template <typename E>
void expect_round_trip(std::initializer_list<E> values, E (*parse)(const std::string&), const char* (*name)(E),
                       const std::string& bad, const std::string& error) {
  for (E v : values) EXPECT_EQ(parse(name(v)), v) << name(v);
  try {
    parse(bad);
    ADD_FAILURE() << "accepted " << bad;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), error);
  }
}

TEST(ChoiceNames, RoundTripAndNameTheValuesThereAre) {
  using train::TrainPrecision;
  expect_round_trip({TrainPrecision::fp32, TrainPrecision::bf16, TrainPrecision::automatic}, train::parse_train_precision,
                    train::train_precision_name, "fp16", "unknown precision 'fp16' (fp32, bf16, auto)");
  EXPECT_STREQ(train::train_precision_name(TrainPrecision::automatic), "auto");
  expect_round_trip({train::LmObjective::clm, train::LmObjective::mlm}, train::parse_lm_objective,
                    train::lm_objective_name, "CLM", "unknown task 'CLM' (clm, mlm)");
  using text::TokenizerKind;
  expect_round_trip({TokenizerKind::byte, TokenizerKind::character, TokenizerKind::wordpiece, TokenizerKind::sentencepiece},
                    text::parse_tokenizer_kind, text::tokenizer_kind_name, "bpe",
                    "unknown tokenizer 'bpe' (byte, char, wordpiece, sentencepiece)");
  EXPECT_STREQ(text::tokenizer_kind_name(TokenizerKind::character), "char");
  using model::Quantize;
  expect_round_trip({Quantize::automatic, Quantize::none, Quantize::int8, Quantize::bf16}, model::parse_quantize,
                    model::quantize_name, "int4", "unknown quantize 'int4' (auto, none, int8, bf16)");
  using model::Gemm;
  expect_round_trip({Gemm::automatic, Gemm::packed, Gemm::blas}, model::parse_gemm, model::gemm_name, "mkl",
                    "unknown gemm 'mkl' (auto, packed, blas)");
}

// The saved options hold the names the command line takes, as before the enums.
TEST(LoopSettings, RecipesSaveTheSameFieldsUnderTheSameNames) {
  train::TrainOptions t;
  t.task = train::LmObjective::mlm, t.tokenizer = text::TokenizerKind::wordpiece;
  t.loop.precision = train::TrainPrecision::bf16, t.loop.patience = 3, t.loop.gradient_checkpointing = true;
  const json tj = json::parse(t.to_json());
  EXPECT_EQ(tj.at("task"), "mlm");
  EXPECT_EQ(tj.at("tokenizer"), "wordpiece");
  EXPECT_EQ(tj.at("precision"), "bf16");
  EXPECT_EQ(tj.at("patience"), 3);
  EXPECT_EQ(tj.at("eval_every"), 100);  // train's defaults
  EXPECT_EQ(tj.at("save_every"), 250);
  train::FinetuneOptions f;
  f.task = model::HeadTask::question_answering, f.loop.save_every = 7;
  const json fj = json::parse(f.to_json());
  EXPECT_EQ(fj.at("task"), "question-answering");
  EXPECT_EQ(fj.at("save_every"), 7);
  const json xj = json::parse(train::TranslateTrainOptions{}.to_json());
  for (const char* key : {"eval_every", "save_every", "keep_checkpoints", "patience", "threads", "precision",
                          "grad_accum", "bucket_mb", "zero1", "gradient_checkpointing"}) {
    EXPECT_TRUE(tj.contains(key) && fj.contains(key) && xj.contains(key)) << key;
  }
  EXPECT_EQ(xj.at("keep_checkpoints"), 5);  // translate-train's default (for roformer average)

  const train::TrainOptions t2 = train::TrainOptions::from_json(t.to_json());
  EXPECT_EQ(t2.task, train::LmObjective::mlm);
  EXPECT_EQ(t2.tokenizer, text::TokenizerKind::wordpiece);
  EXPECT_EQ(t2.loop.precision, train::TrainPrecision::bf16);
  EXPECT_EQ(t2.loop.patience, 3);
  EXPECT_TRUE(t2.loop.gradient_checkpointing);
  EXPECT_EQ(train::FinetuneOptions::from_json(f.to_json()).task, model::HeadTask::question_answering);
}

// Options saved before --patience on train and translate-train, --save-every on finetune and
// translate-train (and before --precision, --keep-checkpoints, ...): the recipe's defaults.
TEST(LoopSettings, OptionsSavedBeforeAFieldExistedLoadWithTheDefault) {
  const auto without = [](const std::string& text, std::initializer_list<const char*> keys) {
    json j = json::parse(text);
    for (const char* k : keys) j.erase(k);
    return j.dump();
  };
  train::TrainOptions t;
  t.loop.eval_every = 10, t.loop.save_every = 5;
  const train::TrainOptions t2 =
      train::TrainOptions::from_json(without(t.to_json(), {"patience", "keep_checkpoints", "precision", "grad_accum"}));
  EXPECT_EQ(t2.loop.patience, 0);
  EXPECT_EQ(t2.loop.keep_checkpoints, 2);
  EXPECT_EQ(t2.loop.precision, train::TrainPrecision::fp32);
  EXPECT_EQ(t2.loop.eval_every, 10);  // as saved
  EXPECT_EQ(t2.loop.save_every, 5);

  train::FinetuneOptions f;
  f.loop.patience = 2, f.loop.eval_every = 5;
  const train::FinetuneOptions f2 = train::FinetuneOptions::from_json(without(f.to_json(), {"save_every", "task"}));
  EXPECT_EQ(f2.loop.save_every, 0);
  EXPECT_EQ(f2.loop.patience, 2);
  EXPECT_EQ(f2.task, model::HeadTask::text_classification);

  train::TranslateTrainOptions x;
  x.loop.eval_every = 5;
  const train::TranslateTrainOptions x2 =
      train::TranslateTrainOptions::from_json(without(x.to_json(), {"save_every", "patience"}));
  EXPECT_EQ(x2.loop.save_every, 0);
  EXPECT_EQ(x2.loop.patience, 0);
  EXPECT_EQ(x2.loop.keep_checkpoints, 5);
  EXPECT_EQ(x2.loop.eval_every, 5);
}

// A saved name no enum has, or a field of the wrong type, is one error naming the field.
TEST(LoopSettings, BadSavedValuesNameTheField) {
  json j = json::parse(train::TrainOptions{}.to_json());
  j["precision"] = "bf17";
  try {
    train::TrainOptions::from_json(j.dump());
    FAIL();
  } catch (const io::Error& e) {
    EXPECT_EQ(std::string(e.what()), "training options: 'precision': unknown precision 'bf17' (fp32, bf16, auto)");
  }
  json f = json::parse(train::FinetuneOptions{}.to_json());
  f["patience"] = "many";
  try {
    train::FinetuneOptions::from_json(f.dump());
    FAIL();
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fine-tuning options: 'patience': "), std::string::npos) << e.what();
  }
  f = json::parse(train::FinetuneOptions{}.to_json());
  f["task"] = "summarization";
  EXPECT_THROW(train::FinetuneOptions::from_json(f.dump()), io::Error);
}

TEST(LoopSettings, ValidateNamesTheOption) {
  train::LoopSettings s;
  EXPECT_NO_THROW(s.validate(8));
  const auto refused = [](train::LoopSettings bad, int64_t batch, const std::string& option) {
    try {
      bad.validate(batch);
      ADD_FAILURE() << option << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(option, 0), 0u) << e.what();
    }
  };
  refused({.save_every = -1}, 8, "--save-every");
  refused({.patience = -1}, 8, "--patience");
  refused({.keep_checkpoints = 0}, 8, "--keep-checkpoints");
  refused({.grad_accum = 9}, 8, "--grad-accum");
  EXPECT_NO_THROW(train::LoopSettings{.grad_accum = 9}.validate(0));  // no row count: translate-train
}

}  // namespace
