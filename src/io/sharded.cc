// Sharded checkpoints over an index JSON (see sharded.h).
#include "sharded.h"

#include "mapped_file.h"
#include "safetensors.h"
#include "strict_json.h"
#include "torch_bin.h"

namespace io {
namespace {

// A shard must be a plain file name beside the index: no directories, no "..", no NUL.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

}  // namespace

ShardedWeights::~ShardedWeights() = default;

ShardedWeights::ShardedWeights(const std::string& index_path, Names names) : WeightStore(index_path) {
  auto fail = [&](const std::string& what) { return Error(index_path + ": " + what); };
  const std::string text = read_config_file(index_path);
  const nlohmann::json index = detail::parse_json_strict(text.begin(), text.end(), index_path, "the index");
  if (!index.is_object()) throw fail("the index is not a JSON object");
  if (index.contains("metadata")) {
    if (!index["metadata"].is_object()) throw fail("\"metadata\" is not an object");
    metadata_json_ = index["metadata"].dump();
  } else {
    metadata_json_ = "{}";
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) throw fail("no \"weight_map\" object");
  const auto& weight_map = index["weight_map"];
  if (weight_map.empty()) throw fail("\"weight_map\" is empty");

  const bool torch_shards = index_path.ends_with(".bin.index.json");
  const size_t slash = index_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : index_path.substr(0, slash + 1);
  std::map<std::string, size_t> shard_of_file;        // shard file → index into shards_
  std::map<std::string, std::string> expected;        // tensor name → shard file
  for (const auto& [name, file_json] : weight_map.items()) {
    if (!file_json.is_string()) throw fail("weight_map entry '" + name + "' is not a file name");
    const std::string file = file_json.get<std::string>();
    if (!plain_file_name(file)) {
      throw fail("weight_map entry '" + name + "' names shard '" + file + "', which is not a plain file name beside the index");
    }
    expected.emplace(name, file);
    if (shard_of_file.count(file)) continue;
    shard_of_file.emplace(file, shards_.size());
    shard_files_.push_back(file);
    const std::string shard_path = dir + file;
    try {
      if (torch_shards) {
        shards_.push_back(std::make_unique<TorchBin>(shard_path));
      } else {
        shards_.push_back(std::make_unique<SafeTensors>(shard_path));
      }
    } catch (const Error& e) {
      throw fail(std::string("shard '") + file + "': " + e.what());
    }
  }
  for (const auto& [name, file] : expected) {
    const WeightStore& shard = *shards_[shard_of_file.at(file)];
    if (!shard.contains(name)) throw fail("weight_map maps '" + name + "' to shard '" + file + "', which does not hold it");
    tensors_.emplace(name, shard.at(name));
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    for (const auto& [name, t] : shards_[i]->tensors()) {
      auto it = expected.find(name);
      if (it == expected.end()) {
        throw fail("shard '" + shard_files_[i] + "' holds '" + name + "', which the weight_map does not list");
      }
      if (it->second != shard_files_[i]) {
        throw fail("shard '" + shard_files_[i] + "' holds '" + name + "', which the weight_map puts in '" + it->second + "'");
      }
    }
  }
  apply_names(names);
}

}  // namespace io
