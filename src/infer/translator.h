// Translation with a trained encoder-decoder directory (roformer translate-train's checkpoints, or
// `roformer average`'s output): config.json + model.safetensors (HF EncoderDecoderModel) + spm.model.
// Texts are encoded with the SentencePiece model, decoded in batches of similar lengths (sorted by
// subword count, so padding stays small), and returned in input order, detokenised.
//
//   auto t = infer::Translator::load("runs/kjv-rv/step-020000");
//   auto out = t->translate({"In the beginning God created the heaven and the earth."}, {.beam_size = 4});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/seq2seq.h"
#include "model/translate.h"
#include "infer/pipeline.h"
#include "text/sentencepiece.h"

namespace infer {

struct Translation {
  std::string text;  // detokenised
  double score = 0;  // the hypothesis's length-normalised log-probability (model/translate.h)
  std::vector<int64_t> tokens;
  bool finished = false;  // ended with eos (false: cut at the length limit)
};

// The nbest translations of each source (subword ids, without the eos that decoding appends), in
// input order: sorted by length and decoded `batch` at a time, so that padding stays small; a source
// without subwords translates to nothing (an empty hypothesis, score 0). Translator::translate_encoded,
// and training's validation BLEU on the model it trains.
std::vector<std::vector<Translation>> translate_batched(model::Seq2Seq<float>& m, const text::SentencePiece& subwords,
                                                        const std::vector<std::vector<int64_t>>& sources,
                                                        const model::DecodeOptions& o, int64_t batch = 32);

class Translator {
 public:
  // Loads dir through load::seq2seq. Throws io::Error / base::Error naming the file.
  // options.quantize and options.gemm choose the linear layers of both stacks (model::prepare_for_inference);
  // the other fields are the encoder pipelines' and are not read.
  static std::unique_ptr<Translator> load(const std::string& dir, const LoadOptions& options = {});

  // The nbest translations of each text (best first), in input order. batch: sources decoded together.
  // A text that encodes to no subwords translates to nothing (an empty hypothesis, score 0).
  std::vector<std::vector<Translation>> translate(const std::vector<std::string>& texts, const model::DecodeOptions& o,
                                                  int64_t batch = 32);
  // The same on sources already encoded (encode below; the server encodes on its HTTP threads).
  std::vector<std::vector<Translation>> translate_encoded(const std::vector<std::vector<int64_t>>& sources,
                                                          const model::DecodeOptions& o, int64_t batch = 32);
  // A text's subword ids, without the eos that decoding appends.
  std::vector<int64_t> encode(const std::string& text) const { return sp_->encode(text); }
  // The longest source in subwords, the eos not counted: the encoder's positions less the eos's.
  int64_t max_source_length() const { return m_->config().encoder.max_position_embeddings - 1; }

  model::Seq2Seq<float>& model() { return *m_; }
  const text::SentencePiece& subwords() const { return *sp_; }

 private:
  Translator(std::unique_ptr<model::Seq2Seq<float>> m, std::shared_ptr<const text::SentencePiece> sp)
      : m_(std::move(m)), sp_(std::move(sp)) {}
  std::unique_ptr<model::Seq2Seq<float>> m_;
  std::shared_ptr<const text::SentencePiece> sp_;
};

}  // namespace infer
