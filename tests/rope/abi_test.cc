// librope's ABI policy (docs/rope.md, "ABI"): a caller built against an earlier header passes the
// structs as that header laid them out, and the library reads no byte past them. Generation 1 is
// librope 0.1.0 as first released; its structs are declared here as that header declared them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rope/rope.h"

namespace {

// rope.h's structs in generation 1 (librope 0.1.0 before index_type and stream).
struct positions_v1 {
  rope_position_kind kind;
  int64_t start;
  const int64_t* starts;
  const int64_t* ids;
  const int64_t* cu_seqlens;
  int64_t n_seqs;
  const int64_t* seq_starts;
};
struct exec_v1 {
  int32_t n_threads;
  rope_backend backend;
};

// A generation-1 struct followed by bytes that a generation-2 reader would take for index_type and
// stream: garbage that must never be read (a positions.index_type of 0xABABABAB is refused).
template <class T>
struct Guarded {
  T value{};
  unsigned char after[32];
  Guarded() { std::memset(after, 0xAB, sizeof after); }
};

// A generation-1 struct at the very end of its heap block: under AddressSanitizer (the debug preset)
// a read of one byte past it is an error, whatever those bytes would have meant.
template <class T>
struct AtBlockEnd {
  T* value = static_cast<T*>(std::malloc(sizeof(T)));
  AtBlockEnd() { std::memset(static_cast<void*>(value), 0, sizeof(T)); }
  ~AtBlockEnd() { std::free(value); }
  AtBlockEnd(const AtBlockEnd&) = delete;
  AtBlockEnd& operator=(const AtBlockEnd&) = delete;
};

constexpr int64_t kBatch = 2, kTokens = 5, kHeads = 3, kDim = 8;

std::vector<float> input() {
  std::vector<float> x(kBatch * kTokens * kHeads * kDim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 17) - 1.0f;
  return x;
}

rope_tensor tensor(std::vector<float>& x) {
  return rope_tensor{x.data(), ROPE_DTYPE_F32, kBatch, kTokens, kHeads, kTokens * kHeads * kDim, kHeads * kDim, kDim};
}

struct Plan {
  rope_plan* plan = nullptr;
  Plan() {
    rope_config cfg;
    rope_config_init(&cfg, kDim);
    EXPECT_EQ(rope_plan_create(&cfg, &plan), ROPE_OK) << rope_last_error();
  }
  ~Plan() { rope_plan_destroy(plan); }
};

TEST(RopeAbi, VersionIsTheHeaders) {
  const std::string expected = std::to_string(ROPE_VERSION_MAJOR) + "." + std::to_string(ROPE_VERSION_MINOR) + "." +
                               std::to_string(ROPE_VERSION_PATCH);
  EXPECT_EQ(rope_version(), expected);
}

// Generation-1 positions (per-sequence starts, int64) and exec rotate exactly as generation 2 does,
// with the bytes after them never read (they would say index_type 0xABABABAB and a garbage stream).
TEST(RopeAbi, GenerationOneStructsAreReadAsTheyWereLaidOut) {
  Plan p;
  const int64_t starts[kBatch] = {3, 40};
  std::vector<float> want = input(), want_k = input(), got = input(), got_qk_q = input(), got_qk_k = input();

  rope_positions pos{};
  pos.kind = ROPE_POSITIONS_OFFSET;
  pos.start = 7;
  pos.starts = starts;
  rope_exec ex{};
  ex.n_threads = 1;
  ex.backend = ROPE_BACKEND_REFERENCE;
  rope_tensor tw = tensor(want), twk = tensor(want_k);
  ASSERT_EQ(rope_apply(p.plan, ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &tw, nullptr, &ex), ROPE_OK) << rope_last_error();
  ASSERT_EQ(rope_apply(p.plan, ROPE_FORWARD, ROPE_ROLE_KEY, &pos, &twk, nullptr, &ex), ROPE_OK) << rope_last_error();

  Guarded<positions_v1> pos1;
  pos1.value.kind = ROPE_POSITIONS_OFFSET;
  pos1.value.start = 7;
  pos1.value.starts = starts;
  Guarded<exec_v1> ex1;
  ex1.value.n_threads = 1;
  ex1.value.backend = ROPE_BACKEND_REFERENCE;
  rope_tensor tg = tensor(got);
  ASSERT_EQ(rope_apply_abi(p.plan, ROPE_FORWARD, ROPE_ROLE_QUERY, reinterpret_cast<const rope_positions*>(&pos1.value),
                           &tg, nullptr, reinterpret_cast<const rope_exec*>(&ex1.value), 1),
            ROPE_OK)
      << rope_last_error();
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);

  // The same structs at the end of their heap blocks, through rope_apply_qk_abi.
  AtBlockEnd<positions_v1> pos_end;
  *pos_end.value = pos1.value;
  AtBlockEnd<exec_v1> ex_end;
  *ex_end.value = ex1.value;
  rope_tensor tq = tensor(got_qk_q), tk = tensor(got_qk_k);
  ASSERT_EQ(rope_apply_qk_abi(p.plan, ROPE_FORWARD, reinterpret_cast<const rope_positions*>(pos_end.value), &tq,
                              nullptr, &tk, nullptr, reinterpret_cast<const rope_exec*>(ex_end.value), 1),
            ROPE_OK)
      << rope_last_error();
  EXPECT_EQ(std::memcmp(want.data(), got_qk_q.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(want_k.data(), got_qk_k.data(), want.size() * sizeof(float)), 0);
}

// The config entry points write no byte past the caller's struct.
TEST(RopeAbi, ConfigInitWritesOnlyTheCallersStruct) {
  Guarded<rope_config> cfg;
  rope_config_init_abi(&cfg.value, kDim, 1);
  EXPECT_EQ(cfg.value.head_dim, kDim);
  EXPECT_EQ(rope_config_preset_abi(&cfg.value, ROPE_PRESET_LLAMA, kDim, 1), ROPE_OK) << rope_last_error();
  for (unsigned char c : cfg.after) EXPECT_EQ(c, 0xAB);
  rope_plan* plan = nullptr;
  ASSERT_EQ(rope_plan_create_abi(&cfg.value, &plan, 1), ROPE_OK) << rope_last_error();
  rope_plan_destroy(plan);
}

// A caller built against a newer header than this library (or passing no generation) is refused with
// a message that names both generations, before anything is read.
TEST(RopeAbi, UnknownGenerationsAreRefusedByName) {
  Plan p;
  std::vector<float> x = input();
  const std::vector<float> before = x;
  rope_tensor t = tensor(x);
  rope_positions pos{};
  for (int32_t abi : {0, -1, ROPE_ABI_VERSION + 1}) {
    EXPECT_EQ(rope_apply_abi(p.plan, ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, nullptr, abi),
              ROPE_ERR_UNSUPPORTED);
    const std::string message = rope_last_error();
    EXPECT_NE(message.find("generation " + std::to_string(abi)), std::string::npos) << message;
    EXPECT_NE(message.find("generations 1 to " + std::to_string(ROPE_ABI_VERSION)), std::string::npos) << message;
    rope_config cfg;
    rope_config_init(&cfg, kDim);
    rope_plan* plan = nullptr;
    EXPECT_EQ(rope_plan_create_abi(&cfg, &plan, abi), ROPE_ERR_UNSUPPORTED);
    EXPECT_EQ(plan, nullptr);
  }
  EXPECT_EQ(std::memcmp(before.data(), x.data(), x.size() * sizeof(float)), 0);
}

}  // namespace
