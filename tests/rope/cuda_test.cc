// librope's CUDA backend (ROPE_BACKEND_CUDA). Without a GPU (or in a build without CUDA) the backend
// must say so with ROPE_ERR_UNSUPPORTED and leave the CPU untouched; those tests run everywhere. With
// a GPU: cos/sin bit-identical to the CPU's (rope_plan_cos_sin) at random positions up to 2^40 for
// every scaling; random calls (random_case.h: shapes, strides, dtypes, layouts, partial rotary, every
// position kind with int64 and int32 arrays, M-RoPE, xPos, table and on the fly, GQA, in and out of
// place, both directions) against the __float128 oracle, and table plans bit-identical to the CPU
// reference backend; poisoned outputs and padding; bad device-side positions reported by
// rope_cuda_check with NaN rows; host memory refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "oracle.h"
#include "rope/random_case.h"
#include "rope/rope.hpp"

#ifdef ROPE_TEST_CUDA
#include <cuda_runtime.h>
#endif

namespace rope_test {
namespace {

bool gpu_available() { return rope_cuda_available() == ROPE_OK; }

TEST(RopeCuda, UnavailableBackendIsReportedNotCrashed) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(rope_cuda_available(), ROPE_ERR_UNSUPPORTED);
  EXPECT_STRNE(rope_last_error(), "");
  rope::Plan plan(rope::default_config(64));
  std::vector<float> q(64, 1.0f);
  rope_tensor t{q.data(), ROPE_DTYPE_F32, 1, 1, 1, 64, 64, 64};
  rope_positions pos{};
  const rope_exec exec{0, ROPE_BACKEND_CUDA, nullptr};
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &exec), ROPE_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(rope_last_error()).find("CUDA"), std::string::npos) << rope_last_error();
  EXPECT_EQ(q, std::vector<float>(64, 1.0f));
  EXPECT_EQ(rope_cuda_check(plan.get(), nullptr), ROPE_ERR_UNSUPPORTED);
  // The CPU still works after the refusal.
  const rope_exec cpu{1, ROPE_BACKEND_AUTO, nullptr};
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &cpu), ROPE_OK);
}

TEST(RopeCuda, HostChecksComeBeforeTheDevice) {
  // Argument errors are found on the host whatever the GPU: an unknown index type, fp64 on the GPU.
  rope::Plan plan(rope::default_config(8));
  std::vector<float> q(8, 1.0f);
  rope_tensor t{q.data(), ROPE_DTYPE_F32, 1, 1, 1, 8, 8, 8};
  rope_positions pos{};
  pos.index_type = static_cast<rope_index_type>(7);
  const rope_exec exec{0, ROPE_BACKEND_CUDA, nullptr};
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &exec), ROPE_ERR_INVALID_ARGUMENT);
  pos.index_type = ROPE_INDEX_I64;
  std::vector<double> d(8, 1.0);
  rope_tensor td{d.data(), ROPE_DTYPE_F64, 1, 1, 1, 8, 8, 8};
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &td, nullptr, &exec), ROPE_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(rope_last_error()).find("fp64"), std::string::npos) << rope_last_error();
}

TEST(RopeCuda, Int32PositionArraysOnTheCpu) {
  // ROPE_INDEX_I32 is part of the ABI for every backend: the CPU reads int32 ids like int64 ones.
  std::mt19937_64 rng(5);
  rope::Plan plan(rope::default_config(16));
  TestTensor a = make_tensor(ROPE_DTYPE_F32, 2, 5, 3, 16, 0, rng, false), b = a;
  a.randomize(rng);
  b.buffer = a.buffer;
  std::vector<int64_t> ids64(10);
  for (auto& v : ids64) v = uniform(rng, 0, 1 << 30);
  std::vector<int32_t> ids32(ids64.begin(), ids64.end());
  rope_positions p64{}, p32{};
  p64.kind = p32.kind = ROPE_POSITIONS_IDS;
  p64.ids = ids64.data();
  p32.ids = reinterpret_cast<const int64_t*>(ids32.data());
  p32.index_type = ROPE_INDEX_I32;
  rope_tensor va = a.view(), vb = b.view();
  ASSERT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &p64, &va, nullptr, nullptr), ROPE_OK);
  ASSERT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &p32, &vb, nullptr, nullptr), ROPE_OK);
  EXPECT_EQ(a.buffer, b.buffer);
  // Out-of-range int32 ids are refused as int64 ones are.
  ids32[3] = -4;
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &p32, &vb, nullptr, nullptr), ROPE_ERR_BAD_POSITION);
}

#ifdef ROPE_TEST_CUDA

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

// A device copy of a host buffer, freed at scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, n == 0 ? 1 : n) != cudaSuccess) ptr = nullptr;
  }
  DeviceBuffer(const void* host, size_t n) : DeviceBuffer(n) {
    if (ptr != nullptr && n > 0) cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void to_host(void* host) const { cudaMemcpy(host, ptr, bytes, cudaMemcpyDeviceToHost); }
};

// A position array on the device as int64, or as int32 when `narrow` (values fit: the cases keep them
// below 2^31 except on-the-fly offsets, which stay int64).
struct DeviceIndex {
  std::unique_ptr<DeviceBuffer> buf;
  const int64_t* get() const { return buf ? static_cast<const int64_t*>(buf->ptr) : nullptr; }
  DeviceIndex(const std::vector<int64_t>& v, bool narrow) {
    if (v.empty()) return;
    if (narrow) {
      std::vector<int32_t> n(v.begin(), v.end());
      buf = std::make_unique<DeviceBuffer>(n.data(), n.size() * 4);
    } else {
      buf = std::make_unique<DeviceBuffer>(v.data(), v.size() * 8);
    }
  }
};

bool fits_int32(const std::vector<int64_t>& v) {
  for (int64_t x : v) if (x < INT32_MIN || x > INT32_MAX) return false;
  return true;
}

// The case's positions with the arrays on the device.
struct DevicePositions {
  rope_positions pos{};
  DeviceIndex starts, ids, cu, seq_starts;
  DevicePositions(const RandomCase& c, bool narrow)
      : starts(c.starts, narrow), ids(c.ids, narrow), cu(c.cu, narrow), seq_starts(c.seq_starts, narrow) {
    pos = c.pos;
    pos.index_type = narrow ? ROPE_INDEX_I32 : ROPE_INDEX_I64;
    if (c.pos.starts) pos.starts = starts.get();
    if (c.pos.ids) pos.ids = ids.get();
    if (c.pos.cu_seqlens) pos.cu_seqlens = cu.get();
    if (c.pos.seq_starts) pos.seq_starts = seq_starts.get();
  }
};

class RopeCudaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no GPU: " << rope_last_error();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  rope_exec exec() const { return rope_exec{0, ROPE_BACKEND_CUDA, stream_}; }
  cudaStream_t stream_ = nullptr;
};

// Heads of (1, 0) pairs rotate into (cos, sin) exactly (1·c − 0·s, 0·c + 1·s), so the output of an
// f32 call is the device's cos/sin, to compare bit for bit with rope_plan_cos_sin.
void check_cos_sin_bits(rope_exec exec, rope_config cfg, const std::vector<int64_t>& positions, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " scaling " << cfg.scaling.type << " mode " << cfg.mode);
  rope::Plan plan(cfg);
  const int n_pairs = cfg.rot_dim / 2;
  const int64_t n = static_cast<int64_t>(positions.size());
  std::vector<float> x(n * cfg.head_dim, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int i = 0; i < n_pairs; ++i) x[t * cfg.head_dim + (cfg.layout == ROPE_LAYOUT_INTERLEAVED ? 2 * i : i)] = 1.0f;
  DeviceBuffer dx(x.data(), x.size() * 4);
  DeviceIndex ids(positions, false);
  rope_positions pos{};
  pos.kind = ROPE_POSITIONS_IDS;
  pos.ids = ids.get();
  rope_tensor t{dx.ptr, ROPE_DTYPE_F32, 1, n, 1, n * cfg.head_dim, cfg.head_dim, cfg.head_dim};
  ASSERT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &exec), ROPE_OK) << rope_last_error();
  ASSERT_EQ(rope_cuda_check(plan.get(), exec.stream), ROPE_OK) << rope_last_error();
  dx.to_host(x.data());
  std::vector<float> c(n_pairs), s(n_pairs);
  double attention = 1;  // YaRN's factor multiplies cos and sin, once, in fp32
  ASSERT_EQ(rope_plan_attention_factor(plan.get(), &attention), ROPE_OK);
  const float factor = static_cast<float>(attention);
  int64_t mismatches = 0;
  for (int64_t k = 0; k < n; ++k) {
    ASSERT_EQ(rope_plan_cos_sin(plan.get(), positions[k], c.data(), s.data()), ROPE_OK);
    for (int i = 0; i < n_pairs; ++i) {
      c[i] *= factor;
      s[i] *= factor;
      const int a = cfg.layout == ROPE_LAYOUT_INTERLEAVED ? 2 * i : i;
      const int p = a + (cfg.layout == ROPE_LAYOUT_INTERLEAVED ? 1 : n_pairs);
      const float dc = x[k * cfg.head_dim + a], ds = x[k * cfg.head_dim + p];
      if (std::memcmp(&dc, &c[i], 4) != 0 || std::memcmp(&ds, &s[i], 4) != 0) {
        if (mismatches++ < 3) {
          ADD_FAILURE() << "position " << positions[k] << " pair " << i << ": GPU (" << dc << ", " << ds
                        << ") CPU (" << c[i] << ", " << s[i] << ")";
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << n * n_pairs << " cos/sin pairs";
}

TEST_F(RopeCudaGpu, CosSinAreTheCpuBitsUpTo2To40) {
  std::mt19937_64 rng(17);
  const rope_scaling_type scalings[] = {ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_NTK,
                                        ROPE_SCALING_YARN, ROPE_SCALING_LLAMA3};
  for (rope_scaling_type st : scalings) {
    for (rope_layout layout : {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF}) {
      rope_config cfg = rope::default_config(128);
      cfg.layout = layout;
      cfg.base = pick(rng, {10000.0, 500000.0, 1e6});
      cfg.scaling.type = st;
      cfg.scaling.factor = 8;
      cfg.scaling.original_max_positions = 8192;
      std::vector<int64_t> positions(4096);
      for (size_t i = 0; i < positions.size(); ++i) {
        // Every magnitude from 1 to 2^40, and the first positions themselves.
        positions[i] = i < 64 ? static_cast<int64_t>(i) : uniform(rng, 0, int64_t{1} << uniform(rng, 1, 40));
      }
      check_cos_sin_bits(exec(), cfg, positions, static_cast<uint64_t>(st));
      // The same positions (below the table) through a TABLE plan: the CPU's table, copied.
      cfg.mode = ROPE_MODE_TABLE;
      cfg.table_positions = 1 << 16;
      for (auto& p : positions) p %= cfg.table_positions;
      check_cos_sin_bits(exec(), cfg, positions, static_cast<uint64_t>(st));
    }
  }
}

// One random call on the GPU against the oracle (and, for table plans, bit for bit against the CPU
// reference backend, whose formula and cos/sin bits are the GPU's).
// long_call: thousands of tokens and few heads, so that blocks take several rows per step.
void run_gpu_case(rope_exec exec, uint64_t seed, bool long_call = false) {
  std::mt19937_64 rng(seed);
  RandomCase c = random_case(rng, int64_t{1} << 40);
  c.b = long_call ? 1 : uniform(rng, 1, 3);
  c.s = long_call ? uniform(rng, 1000, 3000) : uniform(rng, 1, 33);
  c.hq = long_call ? uniform(rng, 1, 2) : uniform(rng, 1, 6);
  if (long_call && c.max_pos < 16384) {  // table and xPos cases: room for the longer sequences
    c.max_pos = 16384;
    if (c.cfg.mode == ROPE_MODE_TABLE) c.cfg.table_positions = c.max_pos;
  }
  c.hk = pick(rng, {int64_t{1}, c.hq, uniform(rng, 1, long_call ? 2 : 4)});
  // random_case drew the positions for its own sizes: draw them again for these (packed sequences of up
  // to 9 tokens or offsets, from a stream of their own; ids from the case's).
  if (c.pos.kind != ROPE_POSITIONS_IDS) {
    if (c.pos.kind == ROPE_POSITIONS_VARLEN) c.b = 1;
    std::mt19937_64 again(seed ^ 0x9e3779b97f4a7c15ull);
    random_positions(c, again, c.b == 1 && uniform(again, 0, 1) ? 2 : 0, 9);
  } else {
    random_positions(c, rng, 1);
  }
  const bool narrow = fits_int32(c.ids) && fits_int32(c.starts) && fits_int32(c.seq_starts) && uniform(rng, 0, 1);
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " head_dim " << c.cfg.head_dim << " rot " << c.cfg.rot_dim
                                    << "@" << c.cfg.rot_offset << " layout " << c.cfg.layout << " dtype " << c.dtype
                                    << " axes " << c.cfg.n_axes << " mode " << c.cfg.mode << " xpos "
                                    << c.cfg.xpos.enabled << " scaling " << c.cfg.scaling.type << " pos "
                                    << c.pos.kind << " int32 " << narrow);
  rope::Plan plan(c.cfg);
  if (c.pos.kind == ROPE_POSITIONS_VARLEN || uniform(rng, 0, 1)) plan.set_seq_len(uniform(rng, 1, 10000));
  const std::vector<double> theta = plan.inv_freq();
  double attention = 0;
  rope::check(rope_plan_attention_factor(plan.get(), &attention));

  const bool fused = uniform(rng, 0, 1) == 1, in_place = uniform(rng, 0, 1) == 1, backward = uniform(rng, 0, 1) == 1;
  const bool padded = uniform(rng, 0, 1) == 1;  // unpadded typical heads take the 16-byte vector path
  const int order = static_cast<int>(uniform(rng, 0, 2));
  TestTensor q = make_tensor(c.dtype, c.b, c.s, c.hq, c.cfg.head_dim, order, rng, padded);
  TestTensor k = make_tensor(c.dtype, c.b, c.s, c.hk, c.cfg.head_dim, static_cast<int>(uniform(rng, 0, 2)), rng, padded);
  q.randomize(rng);
  k.randomize(rng);
  TestTensor q_out = q, k_out = k;
  if (!in_place) {
    q_out = make_tensor(c.dtype, c.b, c.s, c.hq, c.cfg.head_dim, order, rng, padded);
    k_out = make_tensor(c.dtype, c.b, c.s, c.hk, c.cfg.head_dim, 0, rng, padded);
    q_out.poison();
    k_out.poison();
  }
  // The same call on the CPU reference backend, on host copies.
  TestTensor cq = q, ck = k, cq_out = q_out, ck_out = k_out;
  DeviceBuffer dq(q.buffer.data(), q.buffer.size()), dk(k.buffer.data(), k.buffer.size());
  DeviceBuffer dq_out(q_out.buffer.data(), q_out.buffer.size()), dk_out(k_out.buffer.data(), k_out.buffer.size());
  DevicePositions dp(c, narrow);
  const auto on = [](const TestTensor& t, void* p) {
    return rope_tensor{p, t.dtype, t.b, t.s, t.h, t.bs, t.ts, t.hs};
  };
  rope_tensor gq = on(q, dq.ptr), gk = on(k, dk.ptr), gq_out = on(q_out, dq_out.ptr), gk_out = on(k_out, dk_out.ptr);
  const rope_direction dir = backward ? ROPE_BACKWARD : ROPE_FORWARD;
  const rope_exec cpu{1, ROPE_BACKEND_REFERENCE, nullptr};
  rope_tensor hq = cq.view(), hk = ck.view(), hq_out = cq_out.view(), hk_out = ck_out.view();
  if (fused) {
    ASSERT_EQ(rope_apply_qk(plan.get(), dir, &dp.pos, &gq, in_place ? nullptr : &gq_out, &gk,
                            in_place ? nullptr : &gk_out, &exec), ROPE_OK) << rope_last_error();
    ASSERT_EQ(rope_apply_qk(plan.get(), dir, &c.pos, &hq, in_place ? nullptr : &hq_out, &hk,
                            in_place ? nullptr : &hk_out, &cpu), ROPE_OK) << rope_last_error();
  } else {
    ASSERT_EQ(rope_apply(plan.get(), dir, ROPE_ROLE_QUERY, &dp.pos, &gq, in_place ? nullptr : &gq_out, &exec), ROPE_OK)
        << rope_last_error();
    ASSERT_EQ(rope_apply(plan.get(), dir, ROPE_ROLE_QUERY, &c.pos, &hq, in_place ? nullptr : &hq_out, &cpu), ROPE_OK)
        << rope_last_error();
  }
  ASSERT_EQ(rope_cuda_check(plan.get(), exec.stream), ROPE_OK) << rope_last_error();
  TestTensor gpu_q = in_place ? q : q_out, gpu_k = in_place ? k : k_out;
  (in_place ? dq : dq_out).to_host(gpu_q.buffer.data());
  (in_place ? dk : dk_out).to_host(gpu_k.buffer.data());
  const TestTensor& cpu_q = in_place ? cq : cq_out;
  const TestTensor& cpu_k = in_place ? ck : ck_out;

  const double tol = c.dtype == ROPE_DTYPE_F32 ? 1e-6 : c.dtype == ROPE_DTYPE_F16 ? 1e-3 : 5e-3;
  EXPECT_LE(relative_error(gpu_q, oracle_apply(c.cfg, theta, attention, c.pos, backward, false, q)), tol);
  EXPECT_TRUE(gpu_q.padding_untouched());
  // Table plans: the CPU's cos/sin bits and formula, so the CPU's output bits (xPos aside: its scale
  // comes from exp(), whose last bit the GPU's libdevice and glibc may round apart).
  const bool bitwise = c.cfg.mode == ROPE_MODE_TABLE && !c.cfg.xpos.enabled;
  if (bitwise) {
    EXPECT_EQ(gpu_q.buffer, cpu_q.buffer) << "q differs from the CPU reference";
  }
  if (fused) {
    EXPECT_LE(relative_error(gpu_k, oracle_apply(c.cfg, theta, attention, c.pos, backward, true, k)), tol);
    EXPECT_TRUE(gpu_k.padding_untouched());
    if (bitwise) {
      EXPECT_EQ(gpu_k.buffer, cpu_k.buffer) << "k differs from the CPU reference";
    }
  }
}

TEST_F(RopeCudaGpu, RandomCasesMatchOracleAndCpu) {
  // ROPE_CUDA_CASES: how many (the sanitizer runs of scripts/cuda-check.sh take fewer).
  const char* env = std::getenv("ROPE_CUDA_CASES");
  const uint64_t n = env != nullptr ? std::strtoull(env, nullptr, 10) : 200;
  for (uint64_t seed = 1; seed <= n; ++seed) {
    run_gpu_case(exec(), seed);
    if (HasFailure()) break;
  }
}

TEST_F(RopeCudaGpu, LongCallsTakeSeveralRowsPerStep) {
  for (uint64_t seed = 1001; seed <= 1010; ++seed) {
    run_gpu_case(exec(), seed, true);
    if (HasFailure()) break;
  }
}

TEST_F(RopeCudaGpu, PrefillShapeIsBitIdenticalToCpuReferenceWithTable) {
  // The benchmark's shape (half layout, q 32 heads, k 8) at 512 tokens, every dtype, both directions.
  for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_F16, ROPE_DTYPE_BF16}) {
    rope_config cfg = rope::default_config(128);
    cfg.layout = ROPE_LAYOUT_HALF;
    cfg.mode = ROPE_MODE_TABLE;
    cfg.table_positions = 8192;
    rope::Plan plan(cfg);
    std::mt19937_64 rng(dtype);
    TestTensor q = make_tensor(dtype, 2, 512, 32, 128, 0, rng, false), k = make_tensor(dtype, 2, 512, 8, 128, 0, rng, false);
    q.randomize(rng);
    k.randomize(rng);
    DeviceBuffer dq(q.buffer.data(), q.buffer.size()), dk(k.buffer.data(), k.buffer.size());
    rope_positions pos{};
    pos.start = 3000;
    rope_tensor gq = q.view(), gk = k.view();
    gq.data = dq.ptr, gk.data = dk.ptr;
    const rope_exec e = exec();
    ASSERT_EQ(rope_apply_qk(plan.get(), ROPE_BACKWARD, &pos, &gq, nullptr, &gk, nullptr, &e), ROPE_OK) << rope_last_error();
    rope_tensor hq = q.view(), hk = k.view();
    const rope_exec cpu{2, ROPE_BACKEND_REFERENCE, nullptr};
    ASSERT_EQ(rope_apply_qk(plan.get(), ROPE_BACKWARD, &pos, &hq, nullptr, &hk, nullptr, &cpu), ROPE_OK);
    std::vector<uint8_t> gpu(q.buffer.size());
    dq.to_host(gpu.data());
    EXPECT_EQ(gpu, q.buffer) << "dtype " << dtype;
    gpu.resize(k.buffer.size());
    dk.to_host(gpu.data());
    EXPECT_EQ(gpu, k.buffer) << "dtype " << dtype;
  }
}

TEST_F(RopeCudaGpu, DynamicNtkFollowsTheSequenceLength) {
  // rope_plan_set_seq_len recomputes θ: the GPU's copy must follow it.
  rope_config cfg = rope::default_config(64);
  cfg.scaling.type = ROPE_SCALING_DYNAMIC_NTK;
  cfg.scaling.factor = 2;
  cfg.scaling.original_max_positions = 2048;
  rope::Plan plan(cfg);
  const rope_exec e = exec();
  for (int64_t len : {100, 20000, 100000}) {
    plan.set_seq_len(len);
    std::vector<float> x(64 * 4), ref;
    std::mt19937_64 rng(len);
    std::normal_distribution<float> normal;
    for (auto& v : x) v = normal(rng);
    ref = x;
    DeviceBuffer dx(x.data(), x.size() * 4);
    rope_positions pos{};
    pos.start = len - 4;
    rope_tensor t{dx.ptr, ROPE_DTYPE_F32, 1, 4, 1, 256, 64, 64};
    ASSERT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &e), ROPE_OK) << rope_last_error();
    dx.to_host(x.data());
    rope_tensor h{ref.data(), ROPE_DTYPE_F32, 1, 4, 1, 256, 64, 64};
    ASSERT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &h, nullptr, nullptr), ROPE_OK);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], ref[i], 1e-6f * (1 + std::fabs(ref[i]))) << "length " << len;
  }
}

TEST_F(RopeCudaGpu, BadDevicePositionsGiveNanAndAReport) {
  rope::Plan plan(rope::default_config(8));
  const rope_exec e = exec();
  std::vector<float> x(8 * 3, 0.5f);
  DeviceBuffer dx(x.data(), x.size() * 4);
  rope_tensor t{dx.ptr, ROPE_DTYPE_F32, 1, 3, 1, 24, 8, 8};
  struct Bad {
    rope_position_kind kind;
    std::vector<int64_t> array;
    const char* says;
    bool nan;  // some token's position cannot be found: its row is NaN
  };
  // cu_seqlens {0, 2, 1, 3} still gives every token an interval [cu[s], cu[s+1]) that holds it, so the
  // rows are rotated; the malformed array is reported.
  const Bad cases[] = {{ROPE_POSITIONS_IDS, {0, -5, 2}, "ids[1] = -5", true},
                       {ROPE_POSITIONS_IDS, {0, 1, int64_t{1} << 50}, "ids[2]", true},
                       {ROPE_POSITIONS_VARLEN, {0, 2, 1, 3}, "cu_seqlens", false},
                       {ROPE_POSITIONS_VARLEN, {0, 1, 2}, "cu_seqlens", true},
                       {ROPE_POSITIONS_OFFSET, {-1}, "starts[0] = -1", true}};
  for (const Bad& bad : cases) {
    for (bool narrow : {false, true}) {
      if (narrow && !fits_int32(bad.array)) continue;
      SCOPED_TRACE(bad.says);
      DeviceIndex arr(bad.array, narrow);
      rope_positions pos{};
      pos.kind = bad.kind;
      pos.index_type = narrow ? ROPE_INDEX_I32 : ROPE_INDEX_I64;
      if (bad.kind == ROPE_POSITIONS_IDS) pos.ids = arr.get();
      if (bad.kind == ROPE_POSITIONS_OFFSET) pos.starts = arr.get();
      if (bad.kind == ROPE_POSITIONS_VARLEN) {
        pos.cu_seqlens = arr.get();
        pos.n_seqs = static_cast<int64_t>(bad.array.size()) - 1;
      }
      ASSERT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &e), ROPE_OK) << rope_last_error();
      EXPECT_EQ(rope_cuda_check(plan.get(), e.stream), ROPE_ERR_BAD_POSITION);
      EXPECT_NE(std::string(rope_last_error()).find(bad.says), std::string::npos) << rope_last_error();
      dx.to_host(x.data());
      bool any_nan = false;
      for (float v : x) any_nan = any_nan || std::isnan(v);
      EXPECT_EQ(any_nan, bad.nan) << "a bad row must not look like a result";
      EXPECT_EQ(rope_cuda_check(plan.get(), e.stream), ROPE_OK) << "the record is cleared by the check";
      cudaMemcpy(dx.ptr, std::vector<float>(24, 0.5f).data(), 96, cudaMemcpyHostToDevice);
    }
  }
}

TEST_F(RopeCudaGpu, HostMemoryAndMixedArgumentsAreRefused) {
  rope::Plan plan(rope::default_config(8));
  const rope_exec e = exec();
  std::vector<float> host(8, 1.0f);
  rope_tensor t{host.data(), ROPE_DTYPE_F32, 1, 1, 1, 8, 8, 8};
  rope_positions pos{};
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &e), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rope_last_error()).find("host memory"), std::string::npos) << rope_last_error();
  DeviceBuffer dx(host.data(), 32);
  rope_tensor g{dx.ptr, ROPE_DTYPE_F32, 1, 1, 1, 8, 8, 8};
  std::vector<int64_t> ids{0};
  pos.kind = ROPE_POSITIONS_IDS;
  pos.ids = ids.data();  // host array with a device tensor
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &g, nullptr, &e), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(rope_last_error()).find("positions.ids"), std::string::npos) << rope_last_error();
  // q f32 with k bf16 is refused on the GPU.
  DeviceBuffer dk(16);
  rope_tensor k{dk.ptr, ROPE_DTYPE_BF16, 1, 1, 1, 8, 8, 8};
  pos = rope_positions{};
  EXPECT_EQ(rope_apply_qk(plan.get(), ROPE_FORWARD, &pos, &g, nullptr, &k, nullptr, &e), ROPE_ERR_UNSUPPORTED);
  // Overlap is found on the host, as for the CPU.
  rope_tensor g_out{static_cast<float*>(dx.ptr) + 2, ROPE_DTYPE_F32, 1, 1, 1, 8, 8, 8};
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &g, &g_out, &e), ROPE_ERR_OVERLAP);
}

#endif  // ROPE_TEST_CUDA

}  // namespace
}  // namespace rope_test
