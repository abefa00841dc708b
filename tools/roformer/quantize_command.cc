// `roformer quantize`: writes an int8 copy of a Hugging Face RoFormer directory once, so that serving
// it reads a quarter of the linear weights' bytes and needs no --quantize: every linear layer the
// inference engine runs in int8 (attention, cross-attention, feed-forward, embedding projection, the
// MLM head's dense) is stored as I8 with one F32 scale per output row (symmetric, max |w| / 127;
// io::WeightStore::kRowScaleSuffix); everything else (embeddings, norms, biases, the classifier) is
// copied as stored. The other files of the directory (config, vocabulary, tokenizer) are copied.
// Loading it dequantises into the parameter arena and packs int8 (--quantize auto), which
// reproduces the same int8 weights on CPUs with VNNI (and requantises to 7 bits on those without).
// Transformers cannot load the result: it is our serving format.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <memory>
#include <vector>

#include "commands.h"
#include "model_option.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "ops/packed_linear.h"

namespace roformer {
namespace {

namespace fs = std::filesystem;

struct QuantizeOptions {
  std::string model, out;
};

// The weights RoFormer::pack runs in int8, by their HF names' endings.
bool is_packed_linear(const std::string& name, const io::Tensor& t) {
  static const char* kEndings[] = {"attention.self.query.weight", "attention.self.key.weight",
                                   "attention.self.value.weight", "attention.output.dense.weight",
                                   "intermediate.dense.weight",   "output.dense.weight",
                                   "roformer.embeddings_project.weight", "cls.predictions.transform.dense.weight"};
  return t.shape.size() == 2 && std::any_of(std::begin(kEndings), std::end(kEndings),
                                            [&](const char* e) { return name.ends_with(e); });
}

bool is_weight_file(const fs::path& p) {
  const std::string n = p.filename().string();
  return n == "pytorch_model.bin" || n.ends_with(".safetensors") || n.ends_with(".safetensors.index.json") ||
         (n.starts_with("pytorch_model-") && n.ends_with(".bin"));
}

int run_quantize(const QuantizeOptions& o) {
  io::check_output_path("--out", o.out, {o.model});
  std::vector<std::string> writes = {"model.safetensors"};  // and the model's other files, copied
  for (const auto& entry : fs::directory_iterator(o.model)) {
    if (entry.is_regular_file() && !is_weight_file(entry.path())) writes.push_back(entry.path().filename().string());
  }
  io::check_output_directory("--out", o.out, writes);
  const auto weights = io::open_weights(o.model);
  fs::create_directories(o.out);
  std::vector<io::TensorView> views;
  // Kept alive until the file is written; deques, so that references to their elements stay valid.
  std::deque<std::vector<float>> floats;
  std::deque<std::vector<int8_t>> int8s;
  size_t bytes_in = 0, bytes_out = 0, quantized = 0;
  for (const std::string& name : weights->names()) {
    const io::Tensor& t = weights->at(name);
    bytes_in += t.bytes;
    const bool float_dtype = t.dtype == io::DType::F32 || t.dtype == io::DType::F16 || t.dtype == io::DType::BF16 ||
                             (t.dtype == io::DType::I8 && weights->has_int8_tensors());
    if (!float_dtype) {  // ids and other integer buffers, as stored
      views.push_back({name, t.dtype, t.shape, t.data});
      bytes_out += t.bytes;
      continue;
    }
    floats.push_back(weights->f32(name));
    const std::vector<float>& w = floats.back();
    if (!is_packed_linear(name, t)) {
      views.push_back({name, io::DType::F32, t.shape, w.data()});
      bytes_out += 4 * w.size();
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    floats.emplace_back(rows);
    std::vector<float>& scale = floats.back();
    int8s.emplace_back(w.size());
    std::vector<int8_t>& q = int8s.back();
    if (!ops::quantize_rows(w.data(), rows, cols, 127, q.data(), scale.data())) {
      throw std::runtime_error(weights->path() + ": tensor '" + name + "' holds a NaN or infinity");
    }
    views.push_back({name, io::DType::I8, t.shape, q.data()});
    views.push_back({name + io::WeightStore::kRowScaleSuffix, io::DType::F32, {rows}, scale.data()});
    bytes_out += q.size() + 4 * scale.size();
    ++quantized;
  }
  for (const auto& entry : fs::directory_iterator(o.model)) {  // config, vocabulary, tokenizer files
    if (entry.is_regular_file() && !is_weight_file(entry.path())) {
      fs::copy_file(entry.path(), fs::path(o.out) / entry.path().filename(), fs::copy_options::overwrite_existing);
    }
  }
  io::write_file_atomic(o.out + "/model.safetensors",
                        io::safetensors_bytes(views, {{"format", "pt"}, {"roformer_quantization", "int8-row-scaled"}}));
  fmt::print("{}: {} linear weights in int8, {:.1f} MiB of weights → {:.1f} MiB\n", o.out, quantized,
             bytes_in / 1048576.0, bytes_out / 1048576.0);
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, CommandTable& commands) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* q = app.add_subcommand("quantize", "Write an int8 copy of a model directory (served with --quantize auto)");
  q->add_option("--model", o->model, "Hugging Face RoFormer model directory")->transform(model_location())->required();
  q->add_option("--out", o->out, "Output directory (config and tokenizer files copied, model.safetensors written)")
      ->required();
  commands.add(q, [o] { return run_quantize(*o); });
}

}  // namespace roformer
