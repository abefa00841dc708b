// libFuzzer target: model::RoFormerConfig::from_json_text (config.json). Contract: any text either
// gives a config or throws io::Error (the documented type: JSON, type, range and validation errors,
// including rope_scaling specs, all arrive as io::Error). A config that loads passes validate() and
// survives a round trip: to_json() is accepted again and gives the same config. With RoPE and
// softmax attention, the RoPE settings the model derives from it (base, layout, scaling; as
// rope_settings in src/model/blocks.cc) must make a valid rope::Plan: a config the reader accepts
// must not fail later, when the model is built.
#include <string>

#include "fuzz_common.h"
#include "io/weights.h"
#include "model/config.h"
#include "rope/rope.hpp"

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
  if (c.position_encoding == model::PositionEncoding::rope && c.attention_type == "softmax" &&
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
  return 0;
}
