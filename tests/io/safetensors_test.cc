// The safetensors reader: the fixtures load (memory-mapped, or read when the file is a pipe), F16/BF16
// widen to fp32, and every malformed file gets io::Error naming the file and the problem (and never a
// read outside the file; the debug preset runs this under ASan).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/roformer.h"

namespace {

std::string write_file(const std::string& name, const std::string& header, const std::string& data,
                       int64_t header_len = -1) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = header_len >= 0 ? static_cast<uint64_t>(header_len) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out << header << data;
  return path;
}

void expect_error(const std::string& path, const std::string& fragment) {
  try {
    io::SafeTensors st(path);
    ADD_FAILURE() << path << " loaded";
  } catch (const io::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
}

TEST(SafeTensors, LoadsTheFixtures) {
  const io::SafeTensors st(std::string(ROFORMER_FIXTURES) + "/case1_mlm_basic/io.safetensors");
  EXPECT_EQ(st.at("input_ids").shape, (std::vector<int64_t>{3, 12}));
  EXPECT_EQ(st.i64("attention_mask").size(), 36u);
  EXPECT_THROW(st.f32("input_ids"), io::Error);               // wrong dtype
  EXPECT_THROW(st.f32("logits", {3, 12, 128}), io::Error);    // wrong shape
  EXPECT_THROW(st.at("nope"), io::Error);
}

TEST(SafeTensors, WriterRoundTripsThroughTheReader) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<int64_t> step = {123456789012345};
  const std::string bytes = io::safetensors_bytes(
      {{"layer.weight", io::DType::F32, {2, 3}, w.data()}, {"step", io::DType::I64, {1}, step.data()}},
      {{"format", "pt"}});
  EXPECT_EQ(bytes.size() % 8, 0u);  // 8-byte length + padded header + 32 bytes of data
  const std::string path = ::testing::TempDir() + "written.safetensors";
  io::write_file_atomic(path, bytes);
  const io::SafeTensors st(path);
  EXPECT_EQ(st.f32("layer.weight", {2, 3}), w);
  EXPECT_EQ(st.i64("step", {1}), step);
  EXPECT_THROW(io::safetensors_bytes({{"a", io::DType::F32, {1}, w.data()}, {"a", io::DType::F32, {1}, w.data()}}),
               io::Error);
}

TEST(SafeTensors, RejectsMalformedFiles) {
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(io::SafeTensors(write_file("ok.st", good, std::string(8, '\0'))));
  {
    const std::string path = ::testing::TempDir() + "short.st";
    std::ofstream(path, std::ios::binary) << "abc";
    expect_error(path, "truncated");
  }
  expect_error(write_file("len.st", good, std::string(8, '\0'), 1 << 30), "exceeds the file");
  expect_error(write_file("json.st", "{not json", ""), "not valid JSON");
  expect_error(write_file("dtype.st", R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
               "unknown dtype");
  expect_error(write_file("range.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')),
               "outside the data section");
  expect_error(write_file("size.st", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
               "needs 12 bytes");
  expect_error(write_file("overlap.st",
                          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0')),
               "overlap");
  expect_error(write_file("neg.st", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')),
               "non-negative");
  expect_error(write_file("missing.st", R"({"a":{"dtype":"F32","shape":[2]}})", ""), "needs dtype, shape and data_offsets");
  expect_error(::testing::TempDir() + "does_not_exist.st", "cannot open");
  expect_error(write_file("dup.st",
                          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          std::string(8, '\0')),
               "duplicate key 'a' in header");
  {
    const std::string path = ::testing::TempDir() + "empty.st";
    std::ofstream(path, std::ios::binary).flush();
    expect_error(path, "truncated: 0 bytes");
  }
  expect_error(::testing::TempDir(), "is a directory");
}

TEST(SafeTensors, WidensHalfAndBfloat16AndReadsPipes) {
  const uint16_t half[3] = {0x3c00, 0xc100, 0x0001}, bf16[2] = {0x3f80, 0xc020};  // 1, -2.5, 2^-24 | 1, -2.5
  const float f[1] = {7.0f};
  const std::string bytes = io::safetensors_bytes(
      {{"h", io::DType::F16, {3}, half}, {"b", io::DType::BF16, {2}, bf16}, {"f", io::DType::F32, {1}, f}});
  const std::string path = ::testing::TempDir() + "half.safetensors";
  io::write_file_atomic(path, bytes);
  const io::SafeTensors st(path);
  EXPECT_EQ(st.f32("h", {3}), (std::vector<float>{1.0f, -2.5f, 0x1p-24f}));
  EXPECT_EQ(st.f32("b"), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_THROW(st.i64("h"), io::Error);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);  // not mappable: read instead
  ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fds[1]);
  const std::string pipe_path = "/proc/self/fd/" + std::to_string(fds[0]);
  const io::SafeTensors piped(pipe_path);
  close(fds[0]);
  EXPECT_EQ(piped.f32("f"), std::vector<float>{7.0f});
  EXPECT_EQ(piped.names(), st.names());
}

// Resident pages of this process (VmRSS), in KiB.
long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long kib = -1;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> kib;
      break;
    }
    status.ignore(1 << 20, '\n');
  }
  return kib;
}

// release() drops a mapped tensor's pages from the resident set and keeps its bytes readable; on a
// store that was read into memory (a pipe) it changes nothing.
// MappedFile's bounds: a stream or file longer than max_bytes is an error before it is read whole,
// and regular_only refuses a device or FIFO before opening it.
// A device is written in place, never replaced by a regular file (found with the command-line fuzzer's
// output paths: as root, `roformer decay --csv /dev/full` renamed its temporary over /dev/full); a failing
// device write is an io::Error naming the path.
TEST(AtomicFile, WritesDevicesInPlace) {
  io::write_file_atomic("/dev/null", "discarded");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  try {
    io::write_file_atomic("/dev/full", "x");
    FAIL() << "writing /dev/full succeeded";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full: write failed"), std::string::npos) << e.what();
  }
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(MappedFile, MaxBytesAndRegularOnlyBoundWhatIsRead) {
  EXPECT_EQ(io::read_file("/dev/null", 16).size(), 0u);
  try {
    io::read_file("/dev/zero", size_t{1} << 20);
    ADD_FAILURE() << "/dev/zero was read";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/zero: more than 1048576 bytes"), std::string::npos) << e.what();
  }
  try {
    io::read_config_file("/dev/zero");
    ADD_FAILURE() << "/dev/zero was read as a configuration file";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/zero: not a regular file (a device)"), std::string::npos) << e.what();
  }
  const std::string path = ::testing::TempDir() + "/bounded.txt";
  io::write_file_atomic(path, "0123456789");
  EXPECT_EQ(io::read_file(path, 10), "0123456789");
  EXPECT_THROW(io::read_file(path, 9), io::Error);
}

TEST(SafeTensors, ReleaseDropsMappedPagesAndKeepsTheBytes) {
  std::vector<float> big(8 << 20);  // 32 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) - 500.0f;
  const float small[3] = {1.0f, 2.0f, 3.0f};
  const std::string bytes = io::safetensors_bytes(
      {{"big", io::DType::F32, {static_cast<int64_t>(big.size())}, big.data()}, {"small", io::DType::F32, {3}, small}});
  const std::string path = ::testing::TempDir() + "release.safetensors";
  io::write_file_atomic(path, bytes);
  const io::SafeTensors st(path);
  EXPECT_EQ(st.f32("big"), big);  // faults every page in
  const long before = rss_kib();
  st.release(st.at("big"));
  const long after = rss_kib();
  EXPECT_GT(before - after, 16 * 1024) << "VmRSS " << before << " -> " << after << " KiB";
  EXPECT_EQ(st.f32("big"), big);  // the bytes come back from the file
  st.release(st.at("small"));
  EXPECT_EQ(st.f32("small"), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string small_bytes = io::safetensors_bytes({{"small", io::DType::F32, {3}, small}});
  ASSERT_EQ(write(fds[1], small_bytes.data(), small_bytes.size()), static_cast<ssize_t>(small_bytes.size()));
  close(fds[1]);
  const io::SafeTensors piped("/proc/self/fd/" + std::to_string(fds[0]));
  close(fds[0]);
  piped.release(piped.at("small"));  // heap memory: must not be discarded
  EXPECT_EQ(piped.f32("small"), (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

TEST(RoFormerConfig, ReadsHfFieldsAndRejectsBadValues) {
  const auto c = model::RoFormerConfig::from_json_file(std::string(ROFORMER_FIXTURES) + "/case2_embproj_rotary_value/config.json");
  EXPECT_EQ(c.embedding_size, 32);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_TRUE(c.rotary_value);
  auto write = [](const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + name;
    std::ofstream(path) << text;
    return path;
  };
  const auto d = model::RoFormerConfig::from_json_file(write("null_emb.json", R"({"hidden_size": 48, "embedding_size": null, "num_attention_heads": 3})"));
  EXPECT_EQ(d.embedding_size, 48) << "embedding_size null means hidden_size";
  EXPECT_THROW(model::RoFormerConfig::from_json_file(write("act.json", R"({"hidden_act": "swish"})")), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_file(write("neg.json", R"({"hidden_size": -4})")), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_file(write("eps.json", R"({"layer_norm_eps": "small"})")), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_file(write("heads.json", R"({"hidden_size": 64, "num_attention_heads": 5})")), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_file(write("bad.json", "{")), io::Error);
}

}  // namespace
