// Sharded checkpoints: an index JSON ({"metadata": {...}, "weight_map": {name: shard file}}) beside
// its shards, as transformers writes model.safetensors.index.json (shards: safetensors) and
// pytorch_model.bin.index.json (shards: pytorch_model.bin files). The index is checked against the
// shards: every shard is a plain file name in the index's folder (no path, no traversal), every
// name is held by the shard it maps to, and every tensor a shard holds is in the index for that shard
// (so no name is held twice). The result is one io::WeightStore over all shards.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/weights.h"

namespace io {

class ShardedWeights : public WeightStore {
 public:
  // Opens `index_path` and every shard it names; throws io::Error naming the index (and the shard).
  // Shards are safetensors unless the index is named *.bin.index.json.
  explicit ShardedWeights(const std::string& index_path, Names names = Names::kAsStored);
  ~ShardedWeights() override;

  // The index's "metadata" object as JSON text ("{}" when absent).
  const std::string& metadata_json() const { return metadata_json_; }
  // The shard file names, in first-use order.
  const std::vector<std::string>& shard_files() const { return shard_files_; }
  void release(const Tensor& t) const override {
    for (const auto& shard : shards_) shard->release(t);  // each ignores what is not in its file
  }

 private:
  std::vector<std::string> shard_files_;
  std::vector<std::unique_ptr<WeightStore>> shards_;
  std::string metadata_json_;
};

}  // namespace io
