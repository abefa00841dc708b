// libFuzzer target: model::RoFormerConfig::from_json_text (config.json). Contract: any text either
// gives a config or throws io::Error (the documented type: JSON, type, range and validation errors,
// including rope_scaling specs, all arrive as io::Error). A config that loads passes validate() and
// survives a round trip: to_json() is accepted again and gives the same config. With RoPE and
// softmax attention, the RoPE settings the model derives from it (base, layout, scaling; as
// rope_settings in src/model/roformer.cc) must make a valid rope::Plan: a config the reader accepts
// must not fail later, when the model is built.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_common.h"
#include "io/weights.h"
#include "model/config.h"
#include "rope/rope.hpp"

namespace {

// FUZZ_IGNORE_KNOWN=1 (scripts/fuzz.sh sets it unless FUZZ_STRICT=1): skip inputs that hit a
// reported, still unfixed finding, so that a run explores past it (docs/reliability.md): F2, a
// rope_scaling original context beyond int64 ("yarn:4:1e300": undefined behaviour in
// rope::apply_scaling_spec's cast), and F3, one below 1 ("yarn:4:0.5": truncated to 0, accepted by
// the config, rejected by rope_plan_create when the model is built).
bool known_finding(const std::string& text) {
  static const bool ignore = [] {
    const char* e = std::getenv("FUZZ_IGNORE_KNOWN");
    return e != nullptr && *e != '\0' && *e != '0';
  }();
  if (!ignore) return false;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("rope_scaling") || !j["rope_scaling"].is_string()) return false;
  const std::string spec = j["rope_scaling"].get<std::string>();
  const size_t first = spec.find(':');
  const size_t second = first == std::string::npos ? first : spec.find(':', first + 1);
  if (second == std::string::npos) return false;
  const double v = std::strtod(spec.c_str() + second + 1, nullptr);
  return !(v >= 1 && v < 9.2e18);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (known_finding(text)) return 0;
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
