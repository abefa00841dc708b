// libFuzzer target: model::RoFormerConfig::from_json_text (config.json). Contract: any text either
// gives a config or throws io::Error (the documented type: JSON, type, range and validation errors,
// including rope_scaling specs, all arrive as io::Error). A config that loads passes validate() and
// survives a round trip: to_json() is accepted again and gives the same config. With RoPE and
// softmax attention, the RoPE settings the model derives from it (base, layout, scaling; as
// rope_settings in src/model/blocks.cc) must make a valid rope::Plan: a config the reader accepts
// must not fail later, when the model is built. A loaded config is also checked against a checkpoint
// (model::check_config_against_weights, which runs before any model is allocated; the checkpoint is
// case1's layout, 2 layers of hidden 64, with HF's rotary table): it passes or throws io::Error, and
// a pass means every tensor the arena would hold outside the heads is stored with its shape.
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "model/config.h"
#include "model/params.h"
#include "rope/rope.hpp"

namespace {

// The roformer-hf case1 fixture's layout with zero weights, in a memfd (made once).
const io::SafeTensors& checkpoint() {
  static fuzz::MemFile file;
  static const std::unique_ptr<io::SafeTensors> st = [] {
    const model::RoFormerConfig c = model::RoFormerConfig::from_json_text(
        R"({"vocab_size": 129, "hidden_size": 64, "embedding_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 64})", "case1");
    const std::vector<model::ParamInfo> layout = model::param_layout(c);
    static std::vector<float> zeros(static_cast<size_t>(model::param_count(layout)) + 64 * 16);
    std::vector<io::TensorView> views;
    for (const model::ParamInfo& info : layout) views.push_back({info.name, io::DType::F32, info.shape, zeros.data()});
    views.push_back({"roformer.encoder.embed_positions.weight", io::DType::F32, {64, 16}, zeros.data()});
    const std::string bytes = io::safetensors_bytes(views);
    return std::make_unique<io::SafeTensors>(file.write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }();
  return *st;
}

void check_against_checkpoint(const model::RoFormerConfig& c) {
  const io::SafeTensors& w = checkpoint();
  try {
    model::check_config_against_weights(c, w, "config.json");
  } catch (const io::Error& e) {
    fuzz::note(std::string("against the checkpoint: io::Error: ") + e.what());
    return;  // documented
  } catch (const std::exception& e) {
    fuzz::undocumented("check_config_against_weights", e);
  }
  for (const model::ParamInfo& info : model::param_layout(c)) {
    if (info.name.rfind("cls.", 0) == 0 || info.name.rfind("classifier.", 0) == 0 ||
        info.name.rfind("roformer.pooler.", 0) == 0) {
      continue;  // heads: the loader's to decide
    }
    FUZZ_CHECK(w.contains(info.name) && w.at(info.name).shape == info.shape,
               "check_config_against_weights passed a config that implies " + info.name + " " +
                   io::shape_str(info.shape) + ", which the checkpoint does not hold");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  model::RoFormerConfig c;
  try {
    c = model::RoFormerConfig::from_json_text(text, "config.json");
  } catch (const io::Error& e) {
    fuzz::note(std::string("io::Error: ") + e.what());
    return 0;  // documented
  } catch (const std::exception& e) {
    fuzz::undocumented("RoFormerConfig::from_json_text", e);
  }
  fuzz::note("accepted");
  try {
    c.validate();
  } catch (const std::exception& e) {
    fuzz::finding(std::string("a loaded config fails validate(): ") + e.what());
  }
  if (c.position_encoding == model::PositionEncoding::rope && c.attention_type == model::AttentionType::softmax &&
      c.head_dim() <= 65536) {
    try {
      rope_config rc = rope::default_config(static_cast<int32_t>(c.head_dim()));
      rc.base = c.rope_theta;
      rc.layout = c.rope_half_layout ? ROPE_LAYOUT_HALF : ROPE_LAYOUT_INTERLEAVED;
      rope::apply_scaling_spec(c.rope_scaling, &rc);
      const rope::Plan plan(rc);
    } catch (const std::exception& e) {
      fuzz::finding(std::string("config accepted, but the model's RoPE plan rejects it: ") + e.what());
    }
  }
  std::string json;
  try {
    json = c.to_json();
  } catch (const std::exception& e) {
    fuzz::finding(std::string("to_json() of a loaded config threw: ") + e.what());
  }
  try {
    const model::RoFormerConfig again = model::RoFormerConfig::from_json_text(json, "roundtrip");
    FUZZ_CHECK(again.to_json() == json, "to_json → from_json_text → to_json changed the config:\n" + json);
  } catch (const std::exception& e) {
    fuzz::finding(std::string("from_json_text rejects to_json()'s output: ") + e.what() + "\n" + json);
  }
  check_against_checkpoint(c);
  return 0;
}
