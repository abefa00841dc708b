// Checkpoint formats behind io::WeightStore: PyTorch .bin files (made by tools/gen_torch_bin.py with
// PyTorch 1.13 into tests/testdata/torch_bin/) hold bit for bit what the fixtures' model.safetensors hold,
// including transposed, sliced, tied and renamed tensors and F16/BF16/F64/I64 dtypes; a sharded
// safetensors index equals the single file; io::open_weights picks files as transformers does; and
// every malicious or malformed file is an io::Error naming the file and the problem (the debug
// preset runs this under ASan/UBSan, including truncations and byte flips of real files).
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <tuple>

#include "io/atomic_file.h"
#include "io/pickle.h"
#include "io/safetensors.h"
#include "io/sharded.h"
#include "io/torch_bin.h"
#include "io/weights.h"
#include "rope/convert.h"

namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(ROFORMER_TEST_DATA) + "/torch_bin/";
const std::string kFixtures = std::string(ROFORMER_FIXTURES) + "/";
const char* kCases[] = {"case1_mlm_basic", "case2_embproj_rotary_value", "case3_seq_eq_max_positions"};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// For the thousands of small files of the corruption tests: memory-backed when the machine has it.
std::string scratch_dir() {
  std::error_code ec;
  return fs::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0 ? "/dev/shm/" : ::testing::TempDir();
}

void write_plain(const std::string& path, std::string_view bytes) {  // no fsync: for many small files
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Loads `path` as a TorchBin, accepting success or io::Error (anything else fails the test).
bool loads(const std::string& path) {
  try {
    io::TorchBin bin(path);
    for (const auto& name : bin.names()) {
      if (bin.at(name).dtype == io::DType::F32) bin.f32(name);
    }
    return true;
  } catch (const io::Error&) {
    return false;
  }
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "weights_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void expect_error(const std::function<void()>& f, const std::string& path, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << path << " loaded";
  } catch (const io::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << "wanted '" << fragment << "' in: " << what;
  }
}

void expect_same_tensor(const io::Tensor& a, const io::Tensor& b, const std::string& name) {
  EXPECT_EQ(a.dtype, b.dtype) << name;
  EXPECT_EQ(a.shape, b.shape) << name;
  ASSERT_EQ(a.bytes, b.bytes) << name;
  EXPECT_TRUE(a.bytes == 0 || std::memcmp(a.data, b.data, a.bytes) == 0) << name << " differs";
}

TEST(TorchBin, FixturesEqualTheirSafetensorsBitForBit) {
  for (const char* c : kCases) {
    SCOPED_TRACE(c);
    const io::SafeTensors st(kFixtures + c + "/model.safetensors");
    const io::TorchBin bin(kData + c + ".bin", io::Names::kHfLegacyRenamed);
    EXPECT_FALSE(bin.legacy_format());
    for (const auto& [name, t] : st.tensors()) {
      ASSERT_TRUE(bin.contains(name)) << name;
      expect_same_tensor(bin.at(name), t, name);
    }
    for (const auto& [name, t] : bin.tensors()) {  // HF's .bin also stores the tied decoder
      if (st.contains(name)) continue;
      if (name == "cls.predictions.decoder.weight") {
        expect_same_tensor(t, st.at("roformer.embeddings.word_embeddings.weight"), name);
      } else if (name == "cls.predictions.decoder.bias") {
        expect_same_tensor(t, st.at("cls.predictions.bias"), name);
      } else {
        ADD_FAILURE() << "unexpected tensor " << name;
      }
    }
  }
}

TEST(TorchBin, TiedTensorsShareBytesAndLegacyNamesAreRenamedOnRequest) {
  const io::TorchBin tied(kData + "case1_mlm_basic.bin");
  EXPECT_EQ(tied.at("cls.predictions.decoder.weight").data, tied.at("roformer.embeddings.word_embeddings.weight").data);
  const io::TorchBin stored(kData + "case3_seq_eq_max_positions.bin");
  EXPECT_TRUE(stored.contains("roformer.embeddings.LayerNorm.gamma"));
  EXPECT_FALSE(stored.contains("roformer.embeddings.LayerNorm.weight"));
  const io::TorchBin renamed(kData + "case3_seq_eq_max_positions.bin", io::Names::kHfLegacyRenamed);
  EXPECT_TRUE(renamed.contains("roformer.embeddings.LayerNorm.weight"));
  EXPECT_TRUE(renamed.contains("roformer.encoder.layer.2.output.LayerNorm.bias"));
  EXPECT_EQ(renamed.names().size(), stored.names().size());
}

TEST(TorchBin, DtypesStridesAndTheLegacyFormat) {
  const io::SafeTensors expected(kData + "dtypes.safetensors");
  for (const char* file : {"dtypes.bin", "dtypes_legacy.bin"}) {
    SCOPED_TRACE(file);
    const io::TorchBin bin(kData + file);
    EXPECT_EQ(bin.legacy_format(), std::string(file) == "dtypes_legacy.bin");
    size_t compared = 0;
    for (const auto& [name, t] : expected.tensors()) {
      if (name.ends_with(".as_f32")) {
        const auto widened = bin.f32(name.substr(0, name.size() - 7));
        ASSERT_EQ(widened.size() * 4, t.bytes);
        EXPECT_EQ(std::memcmp(widened.data(), t.data, t.bytes), 0) << name;  // bitwise: NaN, -0, subnormals
        continue;
      }
      ASSERT_TRUE(bin.contains(name)) << name;
      expect_same_tensor(bin.at(name), t, name);
      ++compared;
    }
    EXPECT_EQ(compared, bin.tensors().size());
    EXPECT_EQ(bin.at("f16").dtype, io::DType::F16);
    EXPECT_EQ(bin.at("bf16_matrix_t").shape, (std::vector<int64_t>{8, 4}));
    EXPECT_EQ(bin.at("scalar").shape, std::vector<int64_t>{});
    EXPECT_EQ(bin.f32("scalar"), std::vector<float>{3.5f});
    EXPECT_EQ(bin.f32("expanded", {4, 3}), (std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
    EXPECT_EQ(bin.at("empty").bytes, 0u);
    EXPECT_TRUE(bin.f32("empty", {0, 5}).empty());
    EXPECT_EQ(bin.i64("i64")[3], -(int64_t{1} << 62));
    expect_error([&] { bin.f32("f64"); }, kData + file, "has dtype F64, expected F32, F16 or BF16");
    expect_error([&] { bin.f32("f32", {4, 3}); }, kData + file, "has shape [3, 4], expected [4, 3]");
    expect_error([&] { bin.i64("f32"); }, kData + file, "expected I64");
    expect_error([&] { bin.at("nope"); }, kData + file, "no tensor 'nope'");
  }
}

TEST(TorchBin, HalfConversionIsExact) {
  EXPECT_EQ(io::f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(io::f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(io::f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(io::f16_to_f32(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(io::f16_to_f32(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(io::f16_to_f32(0x8000)));
  EXPECT_EQ(io::f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(io::f16_to_f32(0x7e00)));
  EXPECT_EQ(io::bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(io::bf16_to_f32(0xc020), -2.5f);
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every finite half round-trips through float
    const float f = io::f16_to_f32(static_cast<uint16_t>(h));
    if (std::isfinite(f)) {
      EXPECT_EQ(std::bit_cast<uint16_t>(static_cast<rope::half_storage>(f)), h) << h;  // the compiler's own rounding
    }
  }
}

TEST(TorchBin, RejectsMaliciousAndMalformedFiles) {
  const std::pair<const char*, const char*> cases[] = {
      {"bad_global_posix_system.bin", "forbidden global 'posix.system'"},
      {"bad_global_builtins_eval.bin", "forbidden global 'builtins.eval'"},
      {"bad_unknown_opcode.bin", "unsupported pickle opcode 0xff"},
      {"bad_protocol0.bin", "unsupported pickle opcode 0x64 'd'"},
      {"bad_truncated_pickle.bin", "pickle truncated"},
      {"bad_lying_storage_size.bin", "storage declares 1000 F32 elements (4000 bytes) but holds 16 bytes"},
      {"bad_view_out_of_bounds.bin", "reaches past its storage '0' of 4 elements"},
      {"bad_missing_storage.bin", "no zip member 'archive/data/0'"},
      {"bad_not_a_tensor.bin", "state dict entry 'w' is a int, not a tensor"},
      {"bad_big_endian.bin", "big-endian"},
      {"bad_no_data_pkl.bin", "no zip member 'archive/data.pkl'"},
      {"bad_truncated_zip.bin", "not a readable zip archive"},
      {"bad_crc.bin", "fails its CRC check"},
      {"bad_garbage.bin", "not a PyTorch checkpoint"},
      {"bad_truncated_legacy.bin", "truncated"},
      // torch.ones(1).expand(2**20, 2**20): stride 0 over a 1-element storage (fuzz finding F1).
      {"bad_expand_4TiB.bin", "is a strided view whose copy needs 4398046511104 bytes from a storage of 4 bytes"},
      {"bad_expand_2GiB.bin", "more than 4x (or 64 MiB) is refused"},
  };
  for (const auto& [name, fragment] : cases) {
    SCOPED_TRACE(name);
    const std::string path = kData + name;  // lambdas do not capture structured bindings before clang 16
    expect_error([&] { io::TorchBin bin(path); }, path, fragment);
  }
  expect_error([&] { io::TorchBin bin(kData + "missing.bin"); }, kData + "missing.bin", "cannot open");
}

// Prefixes of a real checkpoint (every one near both ends, every 13th between), and every single-byte
// corruption of its pickle, either loads or
// is an io::Error; never a crash or a read outside the file (ASan in the debug preset).
TEST(TorchBin, TruncationsAndCorruptionsNeverCrash) {
  for (const char* file : {"dtypes.bin", "dtypes_legacy.bin"}) {
    const std::string bytes = read_all(kData + file);
    const std::string path = scratch_dir() + "weights_test_cut_" + std::to_string(getpid()) + ".bin";
    // torch.save's zip ends with a zip64 end record and locator, then the classic 22-byte end record,
    // which minizip does not need once it has the zip64 one: cutting into that record alone may load
    // (every member is still CRC-checked).
    const size_t must_fail = std::string(file) == "dtypes.bin" ? bytes.size() - 22 : bytes.size();
    for (size_t n = 0; n < bytes.size(); n += (n < 64 || n + 64 > bytes.size() ? 1 : 13)) {
      write_plain(path, std::string_view(bytes).substr(0, n));
      if (n < must_fail) {
        EXPECT_THROW(io::TorchBin bin(path), io::Error) << file << " cut at " << n;
      } else {
        loads(path);
      }
    }
    fs::remove(path);
  }
  // Single-byte corruptions anywhere in a stored archive, and sampled ones in a deflated one
  // (central directory, local headers, deflate streams).
  for (const auto& [file, step, tail_step] : {std::tuple<const char*, size_t, size_t>{"dtypes.bin", 1, 1},
                                              {"dtypes_legacy.bin", 1, 1},
                                              {"case3_seq_eq_max_positions.bin", 499, 7}}) {
    std::string bytes = read_all(kData + file);
    const std::string path = scratch_dir() + "weights_test_flip_" + std::to_string(getpid()) + ".bin";
    size_t loaded = 0, tried = 0;
    for (size_t at = 0; at < bytes.size(); at += (bytes.size() - at < 4096 ? tail_step : step)) {
      bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
      write_plain(path, bytes);
      loaded += loads(path);
      ++tried;
      bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
    }
    EXPECT_LT(loaded, tried / 2) << file;  // mostly caught (CRCs, structure); never a crash
    fs::remove(path);
  }
  const std::string zip = read_all(kData + "dtypes.bin");
  ASSERT_EQ(zip.compare(0, 4, "PK\x03\x04"), 0);
  auto u16 = [&](size_t at) { return static_cast<size_t>(static_cast<uint8_t>(zip[at]) | static_cast<uint8_t>(zip[at + 1]) << 8); };
  // The first member is data.pkl, stored, followed by a data descriptor (torch.save sets flag bit 3).
  ASSERT_EQ(zip.substr(30, u16(26)), "dtypes/data.pkl");
  const size_t begin = 30 + u16(26) + u16(28), end = zip.find("PK\x07\x08", begin);
  ASSERT_NE(end, std::string::npos);
  const std::string pkl = zip.substr(begin, end - begin);
  size_t consumed = 0;
  EXPECT_EQ(io::pickle::load_state_dict(reinterpret_cast<const uint8_t*>(pkl.data()), pkl.size(), "pkl", &consumed)
                .tensors.size(),
            13u);
  EXPECT_EQ(consumed, pkl.size());
  size_t rejected = 0;
  for (size_t at = 0; at < pkl.size(); ++at) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      std::string bad = pkl;
      bad[at] = static_cast<char>(bad[at] ^ flip);
      try {
        io::pickle::load_state_dict(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), "pkl");
      } catch (const io::Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, pkl.size());  // most corruptions are caught; none crash
}

// Shards written with our safetensors writer, indexed like transformers' save_pretrained.
struct Shards {
  std::string dir;
  std::map<std::string, std::string> weight_map;
};

Shards write_shards(const std::string& name, const io::SafeTensors& st, int count) {
  Shards s{fresh_dir(name), {}};
  std::vector<std::vector<io::TensorView>> parts(count);
  int i = 0;
  for (const auto& [tname, t] : st.tensors()) {
    const int part = i++ % count;
    parts[part].push_back({tname, t.dtype, t.shape, t.data});
    s.weight_map[tname] = "model-0000" + std::to_string(part + 1) + "-of-0000" + std::to_string(count) + ".safetensors";
  }
  for (int p = 0; p < count; ++p) {
    const std::string file = "model-0000" + std::to_string(p + 1) + "-of-0000" + std::to_string(count) + ".safetensors";
    io::write_file_atomic(s.dir + "/" + file, io::safetensors_bytes(parts[p], {{"format", "pt"}}));
  }
  return s;
}

std::string index_json(const std::map<std::string, std::string>& weight_map, const std::string& extra = "") {
  std::string text = "{\"metadata\": {\"total_size\": 1234}, \"weight_map\": {";
  bool first = true;
  for (const auto& [name, file] : weight_map) {
    text += (first ? "\"" : ", \"") + name + "\": \"" + file + "\"";
    first = false;
  }
  return text + extra + "}}";
}

TEST(ShardedWeights, EqualsTheSingleFile) {
  const io::SafeTensors st(kFixtures + "case2_embproj_rotary_value/model.safetensors");
  const Shards s = write_shards("sharded", st, 3);
  const std::string index = s.dir + "/model.safetensors.index.json";
  io::write_file_atomic(index, index_json(s.weight_map));
  const io::ShardedWeights sharded(index);
  EXPECT_EQ(sharded.shard_files().size(), 3u);
  EXPECT_EQ(sharded.metadata_json(), R"({"total_size":1234})");
  EXPECT_EQ(sharded.names(), st.names());
  for (const auto& [name, t] : st.tensors()) expect_same_tensor(sharded.at(name), t, name);
  // open_weights takes the index when there is no model.safetensors.
  const auto opened = io::open_weights(s.dir);
  EXPECT_EQ(opened->path(), index);
  EXPECT_EQ(opened->f32("roformer.embeddings_project.weight", {64, 32}), st.f32("roformer.embeddings_project.weight"));
}

TEST(ShardedWeights, RejectsBadIndexes) {
  const io::SafeTensors st(kFixtures + "case1_mlm_basic/model.safetensors");
  const Shards s = write_shards("sharded_bad", st, 2);
  const std::string index = s.dir + "/model.safetensors.index.json";
  auto expect_index_error = [&](const std::string& text, const std::string& fragment) {
    io::write_file_atomic(index, text);
    expect_error([&] { io::ShardedWeights w(index); }, index, fragment);
  };
  auto with = [&](const std::string& name, const std::string& file) {
    auto m = s.weight_map;
    m[name] = file;
    return m;
  };
  const std::string some = "cls.predictions.bias";
  expect_index_error(index_json(with(some, "../model-00001-of-00002.safetensors")), "not a plain file name");
  expect_index_error(index_json(with(some, "/etc/passwd")), "not a plain file name");
  expect_index_error(index_json(with(some, "..")), "not a plain file name");
  expect_index_error(index_json(with(some, "absent.safetensors")), "shard 'absent.safetensors'");
  expect_index_error(index_json(with("no.such.tensor", "model-00001-of-00002.safetensors")),
                     "maps 'no.such.tensor' to shard 'model-00001-of-00002.safetensors', which does not hold it");
  const std::string other = s.weight_map.at(some) == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                                                        : "model-00001-of-00002.safetensors";
  expect_index_error(index_json(with(some, other)), "does not hold it");
  auto fewer = s.weight_map;
  fewer.erase(some);
  expect_index_error(index_json(fewer), "holds 'cls.predictions.bias', which the weight_map does not list");
  expect_index_error(index_json(s.weight_map, ", \"cls.predictions.bias\": \"" + s.weight_map.at(some) + "\""),
                     "duplicate key 'cls.predictions.bias'");
  expect_index_error(R"({"metadata": {}})", "no \"weight_map\" object");
  expect_index_error(R"({"weight_map": {"a": 3}})", "is not a file name");
  expect_index_error(R"({"weight_map": {}})", "is empty");
  expect_index_error("{", "not valid JSON");
  // A shard that is itself malformed: the error names the index and the shard's own problem.
  io::write_file_atomic(s.dir + "/broken.safetensors", "abc");
  expect_index_error(R"({"weight_map": {"a": "broken.safetensors"}})", "truncated");
}

TEST(OpenWeights, PicksFilesInTransformersOrder) {
  const std::string dir = fresh_dir("open");
  expect_error([&] { io::open_weights(dir); }, dir, "no weights: none of model.safetensors");
  expect_error([&] { io::open_weights(dir + "/nope"); }, dir + "/nope", "not a model directory");
  fs::copy_file(kData + "case3_seq_eq_max_positions.bin", dir + "/pytorch_model.bin");
  const auto bin = io::open_weights(dir);
  EXPECT_NE(dynamic_cast<const io::TorchBin*>(bin.get()), nullptr);
  EXPECT_TRUE(bin->contains("roformer.embeddings.LayerNorm.weight")) << "legacy names renamed by default";
  const io::SafeTensors st(kFixtures + "case3_seq_eq_max_positions/model.safetensors");
  for (const auto& [name, t] : st.tensors()) expect_same_tensor(bin->at(name), t, name);
  fs::copy_file(kFixtures + "case3_seq_eq_max_positions/model.safetensors", dir + "/model.safetensors");
  EXPECT_NE(dynamic_cast<const io::SafeTensors*>(io::open_weights(dir).get()), nullptr);

  // A sharded pytorch_model.bin (pytorch_model.bin.index.json) over torch.save shards.
  const std::string bins = fresh_dir("open_bin_index");
  fs::copy_file(kData + "case1_mlm_basic.bin", bins + "/pytorch_model-00001-of-00001.bin");
  std::map<std::string, std::string> weight_map;
  for (const auto& name : io::TorchBin(kData + "case1_mlm_basic.bin").names()) weight_map[name] = "pytorch_model-00001-of-00001.bin";
  io::write_file_atomic(bins + "/pytorch_model.bin.index.json", index_json(weight_map));
  const auto sharded = io::open_weights(bins);
  EXPECT_EQ(sharded->names().size(), weight_map.size());
}

TEST(WeightStore, LegacyRenamesFollowTransformersAndRejectCollisions) {
  const float v[2] = {1, 2};
  const std::string path = ::testing::TempDir() + "weights_test_names.safetensors";
  io::write_file_atomic(path, io::safetensors_bytes({{"a.gamma", io::DType::F32, {2}, v},
                                                     {"b.beta", io::DType::F32, {2}, v},
                                                     {"c.gamma_beta", io::DType::F32, {2}, v}}));
  const io::SafeTensors renamed(path, io::Names::kHfLegacyRenamed);
  EXPECT_EQ(renamed.names(), (std::vector<std::string>{"a.weight", "b.bias", "c.gamma_bias"}));
  io::write_file_atomic(path, io::safetensors_bytes({{"a.gamma", io::DType::F32, {2}, v}, {"a.weight", io::DType::F32, {2}, v}}));
  EXPECT_NO_THROW(io::SafeTensors st(path));
  expect_error([&] { io::SafeTensors st(path, io::Names::kHfLegacyRenamed); }, path, "both become 'a.weight'");
}

}  // namespace

// Int8 tensors with row scales (what `roformer quantize` writes): f32() dequantises them, the scales
// are not tensors of the store, and a scale that does not fit its matrix, or an I8 tensor without
// scales read as floats, is an error naming the tensor.
TEST(WeightStore, Int8TensorsWithRowScalesDequantise) {
  const std::string dir = std::filesystem::temp_directory_path() / ("int8_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<int8_t> q = {1, -2, 127, -127, 0, 5};  // (2, 3)
  const std::vector<float> scale = {0.5f, 0.25f}, bad_scale = {1.0f, 2.0f, 3.0f};
  const std::vector<int8_t> raw = {3, 4};
  auto write = [&](const std::string& name, const std::vector<float>& s) {
    const std::string path = dir + "/" + name;
    io::write_file_atomic(path, io::safetensors_bytes({{"w", io::DType::I8, {2, 3}, q.data()},
                                                       {"w_row_scale", io::DType::F32, {int64_t(s.size())}, s.data()},
                                                       {"raw", io::DType::I8, {2}, raw.data()}}));
    return path;
  };
  const io::SafeTensors st(write("good.safetensors", scale));
  EXPECT_TRUE(st.has_int8_tensors());
  EXPECT_EQ(st.names(), (std::vector<std::string>{"raw", "w"}));
  EXPECT_EQ(st.f32("w", {2, 3}), (std::vector<float>{0.5f, -1.0f, 63.5f, -31.75f, 0.0f, 1.25f}));
  try {
    st.f32("raw");
    ADD_FAILURE() << "an I8 tensor without scales read as floats";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'raw' has dtype I8"), std::string::npos) << e.what();
  }
  try {
    io::SafeTensors bad(write("bad.safetensors", bad_scale));
    ADD_FAILURE() << "a (3) scale of a (2, 3) matrix was accepted";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w_row_scale' must be F32 [2]"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}
