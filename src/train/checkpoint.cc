// Checkpoint writing and loading (see checkpoint.h).
#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "rope/rope.h"

namespace train {
namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%06lld", static_cast<long long>(step));
  return buf;
}

// Makes the directory entries of `dir` durable (new files and renames inside it).
void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw io::Error(dir + ": cannot open directory to sync");
  ::fsync(fd);
  ::close(fd);
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw io::Error(dir + ": cannot create directory: " + ec.message());
}

}  // namespace

AdamW make_adamw(model::Trainable<float>& m, const AdamWConfig& cfg, int64_t begin, int64_t end) {
  m.allocate_grads();
  if (end < 0) end = static_cast<int64_t>(m.params.size());
  std::vector<ParamRef> refs;
  for (const auto& info : m.layout()) {
    const int64_t lo = std::max(begin, info.offset), hi = std::min(end, info.offset + info.size);
    if (lo < hi) refs.push_back({m.params.data() + lo, m.grads.data() + lo, hi - lo, info.decay});
  }
  return AdamW(std::move(refs), cfg);
}


void save_model(const std::string& dir, const model::RoFormer<float>& m, const text::Tokenizer& tok) {
  make_dirs(dir);
  const auto& cfg = m.config();
  std::vector<io::TensorView> tensors;
  for (const auto& info : m.layout()) {
    tensors.push_back({info.name, io::DType::F32, info.shape, m.params.data() + info.offset});
  }
  // HF RoFormer keeps its rotary table as a (frozen) parameter; store it as HF computes it.
  std::vector<float> table;
  if (cfg.position_encoding == model::PositionEncoding::rope) {
    const int64_t D = cfg.head_dim();
    table.resize(cfg.max_position_embeddings * D);
    if (rope_hf_roformer_table(cfg.max_position_embeddings, static_cast<int32_t>(D), table.data()) != ROPE_OK) {
      throw io::Error(std::string("rotary table: ") + rope_last_error());
    }
    tensors.push_back({"roformer.encoder.embed_positions.weight", io::DType::F32, {cfg.max_position_embeddings, D},
                       table.data()});
  }
  io::write_file_atomic(dir + "/model.safetensors", io::safetensors_bytes(tensors, {{"format", "pt"}}));
  io::write_file_atomic(dir + "/config.json", cfg.to_json());
  tok.save(dir);
}

std::string save_checkpoint(const std::string& out_dir, const model::RoFormer<float>& m, const AdamW& opt,
                            const text::Tokenizer& tok, const TrainerState& state, int keep) {
  const model::Trainable<float>& trained = m;  // the general overload (the same call with m would recurse)
  return save_checkpoint(
      out_dir, trained, opt, [&](const std::string& dir) { save_model(dir, m, tok); }, state, keep);
}

std::string save_checkpoint(const std::string& out_dir, const model::Trainable<float>& m, const AdamW& opt,
                            const std::function<void(const std::string& dir)>& write_model, const TrainerState& state,
                            int keep) {
  const std::string name = step_name(state.step), dir = out_dir + "/" + name;
  make_dirs(dir);
  write_model(dir);
  std::vector<io::TensorView> tensors;
  const auto& layout = m.layout();
  for (size_t i = 0; i < layout.size(); ++i) {
    tensors.push_back({"exp_avg." + layout[i].name, io::DType::F32, layout[i].shape, opt.first_moments()[i].data()});
    tensors.push_back({"exp_avg_sq." + layout[i].name, io::DType::F32, layout[i].shape, opt.second_moments()[i].data()});
  }
  // Everything that determines the rest of the run goes in optimizer.safetensors, so that resumed and
  // uninterrupted runs write identical files; the wall time goes in its own file.
  nlohmann::json meta = {{"step", state.step}, {"optimizer_steps", opt.steps()}, {"tokens_seen", state.tokens_seen}};
  if (!state.task_json.empty()) meta["task"] = nlohmann::json::parse(state.task_json);
  io::write_file_atomic(dir + "/optimizer.safetensors",
                        io::safetensors_bytes(tensors, {{"trainer_state", meta.dump()}, {"options", state.options_json}}));
  io::write_file_atomic(dir + "/elapsed.json", nlohmann::json{{"elapsed_s", state.elapsed_s}}.dump() + "\n");
  sync_dir(dir);
  io::write_file_atomic(out_dir + "/latest", name + "\n");
  // Older checkpoints go only after `latest` points at the new one.
  std::vector<std::string> steps;
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step-", 0) == 0 && n != name) steps.push_back(n);
  }
  std::sort(steps.begin(), steps.end());
  for (int64_t i = 0; i + keep - 1 < static_cast<int64_t>(steps.size()); ++i) {
    if (steps[i] < name) fs::remove_all(out_dir + "/" + steps[i]);
  }
  return dir;
}

std::string latest_checkpoint(const std::string& out_dir) {
  const std::string pointer = out_dir + "/latest";
  if (!fs::exists(pointer)) return "";
  std::string name = io::read_file(pointer);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.rfind("step-", 0) != 0 || name.find('/') != std::string::npos) {
    throw io::Error(pointer + ": does not name a checkpoint: '" + name + "'");
  }
  return out_dir + "/" + name;
}

int64_t checkpoint_step(const std::string& dir) {
  const std::string path = dir + "/optimizer.safetensors";
  const io::SafeTensors st(path);
  try {
    return nlohmann::json::parse(st.metadata().at("trainer_state")).at("step").get<int64_t>();
  } catch (const std::exception& e) {
    throw io::Error(path + ": no trainer state with a step in the metadata (" + e.what() + ")");
  }
}

ResumePoint resume_point(const std::string& out_dir, const std::string& what) {
  const std::string dir = latest_checkpoint(out_dir);
  if (dir.empty()) throw io::Error(out_dir + ": no checkpoint to resume from (no 'latest')");
  const io::SafeTensors st(dir + "/optimizer.safetensors");
  if (!st.metadata().count("options")) throw io::Error(dir + ": no " + what + " options in the checkpoint");
  ResumePoint at{dir, st.metadata().at("options"), 0, ""};
  if (const auto it = st.metadata().find("trainer_state"); it != st.metadata().end()) {
    try {
      const auto j = nlohmann::json::parse(it->second);
      at.step = j.value("step", int64_t{0});
      if (j.contains("task")) at.task_json = j["task"].dump();
    } catch (const nlohmann::json::exception& e) {
      throw io::Error(dir + "/optimizer.safetensors: bad trainer state: " + e.what());
    }
  }
  return at;
}

TrainerState load_optimizer(const std::string& dir, const model::Trainable<float>& m, AdamW& opt) {
  const std::string path = dir + "/optimizer.safetensors";
  const io::SafeTensors st(path);
  const auto& layout = m.layout();
  for (size_t i = 0; i < layout.size(); ++i) {
    opt.first_moments()[i] = st.f32("exp_avg." + layout[i].name, layout[i].shape);
    opt.second_moments()[i] = st.f32("exp_avg_sq." + layout[i].name, layout[i].shape);
  }
  const auto& md = st.metadata();
  if (!md.count("trainer_state") || !md.count("options")) throw io::Error(path + ": no trainer state in the metadata");
  TrainerState s;
  try {
    const auto j = nlohmann::json::parse(md.at("trainer_state"));
    s.step = j.at("step");
    s.tokens_seen = j.at("tokens_seen");
    opt.set_steps(j.at("optimizer_steps"));
    if (j.contains("task")) s.task_json = j["task"].dump();
    if (std::ifstream e(dir + "/elapsed.json"); e) s.elapsed_s = nlohmann::json::parse(e).value("elapsed_s", 0.0);
  } catch (const nlohmann::json::exception& e) {
    throw io::Error(path + ": bad trainer state: " + e.what());
  }
  s.options_json = md.at("options");
  return s;
}

}  // namespace train
