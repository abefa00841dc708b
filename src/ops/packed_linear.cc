// PackedLinear on oneDNN's matmul primitive. oneDNN chooses the weight layout for the machine
// (format_tag::any; brgemm's blocked layout on AVX-512, which does not depend on the batch size), the
// weights are reordered into it once, and one primitive per product shape and batch size N is made on
// first use and kept per thread, shared by the layers of that shape (oneDNN's runtime-dimension
// matmul falls back to its reference kernel, so shapes stay fixed).
// Also the oneDNN pieces the other ops share (onednn.h): the engine, onednn_matmul and onednn_sgemm.
#include "packed_linear.h"

#include "base/random.h"
#include "base/threads.h"
#include "onednn.h"
#include "vmath.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <list>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace ops {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine = [] {
    // Every primitive the ops make is kept where it is used (PackedLinear per batch size, onednn_matmul
    // per thread): oneDNN's own process-wide cache of up to 1,024 would hold a second copy of each,
    // JIT code included (about 60 MiB more in a fine-tuning run with dynamic padding).
    dnnl::set_primitive_cache_capacity(0);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

namespace {

// The cache key of a plain matmul: each descriptor's dims, strides and type, then the flags; two
// dimensions each, so a fixed array (no allocation on the per-call path).
using MatmulKey = std::array<int64_t, 3 * 6 + 2>;

void put_desc(MatmulKey& key, size_t& at, const dnnl::memory::desc& d) {
  const dnnl_memory_desc_t& c = d.data;
  if (c.ndims != 2) throw std::logic_error("onednn_matmul: matrices only");
  key[at++] = static_cast<int64_t>(c.data_type);
  for (int i = 0; i < 2; ++i) key[at++] = c.dims[i], key[at++] = c.format_desc.blocking.strides[i];
}

// A primitive with its argument memories, which each call points at its operands (set_data_handle:
// cheaper than making memory objects per call, which the attention's small products felt).
struct CachedMatmul {
  MatmulKey key;
  dnnl::matmul primitive;
  std::unordered_map<int, dnnl::memory> args;
};

// One thread's primitives, the least recently used dropped past `capacity`: a list in order of use
// and a hash index into it. Callers may cycle through hundreds of shapes (a causal attention's bf16
// products take one per block of query rows: five kinds × T/64 key extents in the backward), and a
// cycle longer than an LRU's capacity misses on every call, re-making each primitive.
template <typename Entry, size_t K>
class RecentPrimitives {
 public:
  using Key = std::array<int64_t, K>;
  explicit RecentPrimitives(size_t capacity) : capacity_(capacity) {}

  // The entry whose key is `key`, now the most recent; when none has it, make()'s.
  template <typename Make>
  Entry& get(const Key& key, Make&& make) {
    const auto found = index_.find(key);
    if (found != index_.end()) {
      order_.splice(order_.begin(), order_, found->second);
      return order_.front();
    }
    if (order_.size() >= capacity_) {
      index_.erase(order_.back().key);
      order_.pop_back();
    }
    order_.push_front(make());
    index_.emplace(key, order_.begin());
    return order_.front();
  }

 private:
  struct Hash {
    size_t operator()(const Key& key) const {
      uint64_t h = 0;
      for (const int64_t x : key) h = base::mix64(h ^ static_cast<uint64_t>(x));
      return static_cast<size_t>(h);
    }
  };
  size_t capacity_;
  std::list<Entry> order_;  // the most recently used first
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> index_;
};

}  // namespace

void onednn_matmul(const dnnl::memory::desc& src, const void* src_data, const dnnl::memory::desc& weights,
                   const void* weights_data, const float* bias, dnnl::memory::desc dst, float* dst_data,
                   bool accumulate) {
  using dnnl::memory;
  MatmulKey key{};
  size_t at = 0;
  put_desc(key, at, src);
  put_desc(key, at, weights);
  put_desc(key, at, dst);
  key[at++] = bias != nullptr;
  key[at++] = accumulate;
  // Per thread. A step's products fit: the per-block bf16 attention, which training runs up to 768
  // keys (beyond, and in inference, the fused kernels take attention), makes at most 5 kinds × 12 key
  // extents, the linear layers about 14 more. Each entry holds its JIT code and scratch, up to about
  // 180 KB: at 512 a fine-tuning run whose batches come at many lengths peaked 130 MiB higher, no faster.
  constexpr size_t kCached = 128;
  thread_local RecentPrimitives<CachedMatmul, std::tuple_size_v<MatmulKey>> recent(kCached);
  CachedMatmul& m = recent.get(key, [&] {
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const int64_t N = dst.dims()[1];
    const memory::desc bias_desc({1, N}, memory::data_type::f32, memory::format_tag::ab);
    const auto desc = bias ? dnnl::matmul::desc(src, weights, bias_desc, dst) : dnnl::matmul::desc(src, weights, dst);
    const dnnl::engine& engine = onednn_engine();
    CachedMatmul made{key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine)),
                      {{DNNL_ARG_SRC, memory(src, engine, nullptr)},
                       {DNNL_ARG_WEIGHTS, memory(weights, engine, nullptr)},
                       {DNNL_ARG_DST, memory(dst, engine, nullptr)}}};
    if (bias) made.args.emplace(DNNL_ARG_BIAS, memory(bias_desc, engine, nullptr));
    return made;
  });
  m.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(src_data));
  m.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(weights_data));
  m.args.at(DNNL_ARG_DST).set_data_handle(dst_data);
  if (bias) m.args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<float*>(bias));
  thread_local dnnl::stream stream(onednn_engine());
  m.primitive.execute(stream, m.args);
  stream.wait();
}

bool onednn_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success;
}

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// The activations of one int8 call: one scale and zero point for the whole (N, IC) tensor, so that
// x ≈ scale · (q − zero_point) with q in [0, 255] and 0 exactly representable (padding stays 0).
struct ActivationQuantization {
  float scale = 1;
  int32_t zero_point = 0;
};

ActivationQuantization activation_quantization(float lo, float hi) {
  lo = std::min(lo, 0.0f), hi = std::max(hi, 0.0f);  // the range always includes 0
  ActivationQuantization q;
  if (hi > lo) {
    q.scale = (hi - lo) / 255.0f;
    q.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / q.scale), 0.0f, 255.0f));
  }
  return q;
}

// x (n) → q (n) u8 in one parallel region: each thread scans its part for the range, every thread
// derives the same scale and zero point from the team's partial ranges, then each quantises its
// part. A serial scan before a parallel reorder left a gap between regions in every int8 layer, long
// enough for idle workers to fall asleep and be woken again (docs/perf.md, "Fewer sleeping workers").
ActivationQuantization quantize_activations(const float* x, int64_t n, uint8_t* q) {
  const int threads = n >= base::kParallelMinElements ? omp_get_max_threads() : 1;
  std::vector<float> lo(threads), hi(threads);
  std::vector<char> finite(threads, 1);
  ActivationQuantization result;
  bool all_finite = true;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t begin = n * t / team, end = n * (t + 1) / team;
    finite[t] = finite_range_f32(x + begin, end - begin, &lo[t], &hi[t]);
#pragma omp barrier
    float l = lo[0], h = hi[0];
    bool ok = finite[0] != 0;
    for (int i = 1; i < team; ++i) l = std::min(l, lo[i]), h = std::max(h, hi[i]), ok = ok && finite[i] != 0;
    const ActivationQuantization aq = activation_quantization(l, h);
    if (ok) quantize_u8_f32(x + begin, end - begin, 1.0f / aq.scale, static_cast<float>(aq.zero_point), q + begin);
    if (t == 0) result = aq, all_finite = ok;
  }
  if (!all_finite) throw std::domain_error("int8 linear: the input holds a NaN or infinite value");
  return result;
}

}  // namespace

bool quantize_rows(const float* w, int64_t rows, int64_t cols, int levels, int8_t* q, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float max_abs = 0;
    for (int64_t c = 0; c < cols; ++c) max_abs = std::max(max_abs, std::fabs(row[c]));
    if (!std::isfinite(max_abs)) return false;
    scale[r] = max_abs > 0 ? max_abs / static_cast<float>(levels) : 1.0f;
    for (int64_t c = 0; c < cols; ++c) q[r * cols + c] = static_cast<int8_t>(std::nearbyint(row[c] / scale[r]));
  }
  return true;
}

// u8 × s8 products are summed in pairs into 16 bits, saturating, by CPUs without VNNI dot products
// (vpmaddubsw: 2 · 255 · 127 > 32767). There the weights take 7 bits, [−63, 63], as ONNX Runtime's
// reduce_range does; with AVX-512 VNNI or AVX-VNNI they take the full [−127, 127].
int int8_weight_levels() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx2_vnni:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx:
      return 127;
    default:
      return 63;
  }
}

bool bf16_is_native() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

std::string cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

namespace {

dnnl::algorithm eltwise_of(Epilogue e) {
  return e == Epilogue::gelu ? dnnl::algorithm::eltwise_gelu_erf : dnnl::algorithm::eltwise_relu;
}

}  // namespace

const char* precision_name(Precision p) {
  return p == Precision::int8 ? "int8" : p == Precision::bf16 ? "bf16" : "f32";
}

Precision parse_precision(const std::string& name) {
  if (name == "f32") return Precision::f32;
  if (name == "bf16") return Precision::bf16;
  if (name == "int8") return Precision::int8;
  throw std::invalid_argument("unknown precision '" + name + "' (f32, bf16 or int8)");
}

namespace {

// The data type of the GEMM's source and weights for a precision (accumulation and output are f32 or,
// for int8, s32 then f32).
dt operand_type(Precision p, bool weights) {
  if (p == Precision::int8) return weights ? dt::s8 : dt::u8;
  return p == Precision::bf16 ? dt::bf16 : dt::f32;
}

}  // namespace

// The primitives of one product shape and batch size N: what PackedLinear::forward runs. They do not
// depend on a layer's weights, scales or bias (call arguments), so every layer of the same shape
// shares them.
struct PackedShape {
  dnnl::matmul matmul;
  dnnl::reorder convert;  // bf16 from an fp32 input: (N, IC) f32 → bf16 (nearest even)
  std::string implementation;
};
using ShapeKey = std::array<int64_t, 7>;  // IC, OC, precision, epilogue, bias, N, bf16 output
struct CachedShape {
  ShapeKey key;
  PackedShape shape;
};

struct PackedLinear::Impl {
  int64_t OC = 0, IC = 0;
  Precision precision = Precision::f32;
  Epilogue epilogue = Epilogue::none;
  bool has_bias = false;
  memory weights;                   // oneDNN's layout for this machine
  memory bias;                      // (1, OC) f32
  std::vector<float> weight_scale;  // int8: (OC), w ≈ weight_scale[o] · q
  memory scales;                    // int8: weight_scale as the (1, OC) operand of the first post-op

  dnnl::primitive_attr matmul_attr() const {
    dnnl::primitive_attr attr;
    dnnl::post_ops ops;
    if (precision == Precision::int8) {
      // int32 product · s_w[o] · s_x, each a binary post-op on a runtime operand (the layer's
      // per-channel scales, this call's activation scale), so that the primitive is the same for
      // every layer of the shape; oneDNN 2.6 leaves its brgemm kernels for a slower GEMM when the
      // output scales themselves are runtime. The same products in the same order as fixed output
      // scales s_w[o] followed by · s_x.
      attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      ops.append_binary(dnnl::algorithm::binary_mul, memory::desc({1, OC}, dt::f32, tag::ab));
      ops.append_binary(dnnl::algorithm::binary_mul, memory::desc({1, 1}, dt::f32, tag::ab));
      // oneDNN 2.x adds an int8 matmul's bias before the output scales; added after them instead.
      if (has_bias) ops.append_binary(dnnl::algorithm::binary_add, bias.get_desc());
    }
    if (epilogue != Epilogue::none) ops.append_eltwise(1.0f, eltwise_of(epilogue), 0.0f, 0.0f);
    attr.set_post_ops(ops);
    return attr;
  }

  // out (N, OC) = epilogue(inp·Wᵀ + b), each operand fp32 or (bf16 layers) bf16.
  void run(void* out, bool out_bf16, const void* inp, bool inp_bf16, int64_t N) const;

  dnnl::matmul::primitive_desc matmul_desc(int64_t N, const memory::desc& weights_desc, bool out_bf16 = false) const {
    const memory::desc src({N, IC}, operand_type(precision, false), tag::ab);
    const memory::desc dst({N, OC}, out_bf16 ? dt::bf16 : dt::f32, tag::ab);
    const bool bias_arg = has_bias && precision != Precision::int8;
    const auto desc = bias_arg ? dnnl::matmul::desc(src, weights_desc, bias.get_desc(), dst)
                               : dnnl::matmul::desc(src, weights_desc, dst);
    return dnnl::matmul::primitive_desc(desc, matmul_attr(), onednn_engine());
  }

  // This thread's primitives for N rows, made on first use. Kept per thread (no lock, and no primitive
  // runs on two threads at once) and shared by the layers of the same shape: a RoFormer-base forward
  // at a new length makes 4 matmuls, not 48 (creating one takes up to 1.3 ms: a server whose
  // requests vary in length spent as long making them as running them). The reference is valid until
  // this thread's next call.
  const PackedShape& shape(int64_t N, bool out_bf16 = false) const {
    constexpr size_t kShapes = 256;  // per thread: 64 MiB of JIT code at most
    thread_local RecentPrimitives<CachedShape, std::tuple_size_v<ShapeKey>> recent(kShapes);
    const ShapeKey key{IC, OC, static_cast<int64_t>(precision), static_cast<int64_t>(epilogue), has_bias, N, out_bf16};
    return recent.get(key, [&] {
      CachedShape made{key, {}};
      const auto pd = matmul_desc(N, weights.get_desc(), out_bf16);
      made.shape.matmul = dnnl::matmul(pd);
      made.shape.implementation = pd.impl_info_str();
      if (precision == Precision::bf16) {
        const memory::desc from({N, IC}, dt::f32, tag::ab), to({N, IC}, dt::bf16, tag::ab);
        made.shape.convert = dnnl::reorder(dnnl::reorder::primitive_desc(onednn_engine(), from, onednn_engine(), to));
      }
      return made;
    }).shape;
  }
};

PackedLinear::PackedLinear(const float* weight, const float* bias, int64_t OC, int64_t IC, Precision precision,
                           Epilogue epilogue)
    : impl_(std::make_unique<Impl>()) {
  if (OC <= 0 || IC <= 0) throw std::invalid_argument("PackedLinear: empty weight");
  if (precision == Precision::bf16 && !bf16_is_native()) {
    throw std::invalid_argument("bf16 linear layers need a CPU with AVX512-BF16 or AMX; oneDNN finds " + cpu_isa_name());
  }
  Impl& m = *impl_;
  m.OC = OC, m.IC = IC, m.precision = precision, m.epilogue = epilogue, m.has_bias = bias != nullptr;
  const dnnl::engine& engine = onednn_engine();
  dnnl::stream stream(engine);
  m.bias = memory({{1, OC}, dt::f32, tag::ab}, engine);
  if (bias) std::copy(bias, bias + OC, static_cast<float*>(m.bias.get_data_handle()));
  // The weight as oneDNN's (K, N) = (IC, OC) matrix: PyTorch's (OC, IC) row-major is its "ba".
  // bf16 weights are rounded from the f32 ones by the reorder into the packed layout.
  const dt weight_type = operand_type(precision, true);
  const memory::desc plain({IC, OC}, weight_type, tag::ba), any({IC, OC}, weight_type, tag::any);
  memory source;
  std::vector<int8_t> quantized;
  if (precision == Precision::int8) {
    m.weight_scale.resize(OC);
    quantized.resize(OC * IC);
    if (!quantize_rows(weight, OC, IC, int8_weight_levels(), quantized.data(), m.weight_scale.data())) {
      throw std::domain_error("PackedLinear: the weight holds a NaN or infinite value");
    }
    source = memory(plain, engine, quantized.data());
    m.scales = memory({{1, OC}, dt::f32, tag::ab}, engine, m.weight_scale.data());
  } else {
    source = memory({{IC, OC}, dt::f32, tag::ba}, engine, const_cast<float*>(weight));
  }
  const auto pd = m.matmul_desc(128, any);  // the packed layout does not depend on N
  m.weights = memory(pd.weights_desc(), engine);
  dnnl::reorder(source, m.weights).execute(stream, source, m.weights);
  stream.wait();
}

PackedLinear::~PackedLinear() = default;
PackedLinear::PackedLinear(PackedLinear&&) noexcept = default;
PackedLinear& PackedLinear::operator=(PackedLinear&&) noexcept = default;

void PackedLinear::forward(float* out, const float* inp, int64_t N) const { impl_->run(out, false, inp, false, N); }

void PackedLinear::forward(float* out, const uint16_t* inp16, int64_t N) const {
  impl_->run(out, false, inp16, true, N);
}

void PackedLinear::forward(uint16_t* out16, const float* inp, int64_t N) const {
  impl_->run(out16, true, inp, false, N);
}

void PackedLinear::forward(uint16_t* out16, const uint16_t* inp16, int64_t N) const {
  impl_->run(out16, true, inp16, true, N);
}

void PackedLinear::Impl::run(void* out, bool out_bf16, const void* inp, bool inp_bf16, int64_t N) const {
  if ((out_bf16 || inp_bf16) && precision != Precision::bf16) {
    throw std::logic_error(std::string("PackedLinear: bf16 operands given to a ") + precision_name(precision) +
                           " layer");
  }
  if (N <= 0) return;
  const PackedShape& shape = this->shape(N, out_bf16);
  const dnnl::engine& engine = onednn_engine();
  dnnl::stream stream(engine);
  memory dst({{N, OC}, out_bf16 ? dt::bf16 : dt::f32, tag::ab}, engine, out);
  if (precision != Precision::int8) {  // f32, or bf16 from a bf16 input or after converting an fp32 one
    memory src({{N, IC}, inp_bf16 ? dt::bf16 : dt::f32, tag::ab}, engine, const_cast<void*>(inp));
    if (precision == Precision::bf16 && !inp_bf16) {
      thread_local std::vector<uint16_t> converted;
      converted.resize(N * IC);
      memory src_bf16({{N, IC}, dt::bf16, tag::ab}, engine, converted.data());
      shape.convert.execute(stream, src, src_bf16);
      src = src_bf16;
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    if (has_bias) args.emplace(DNNL_ARG_BIAS, bias);
    shape.matmul.execute(stream, args);
    stream.wait();
    return;
  }
  // int8: quantise the activations, then scale the int32 product by s_w[o] and s_x.
  thread_local std::vector<uint8_t> quantized;
  quantized.resize(N * IC);
  const ActivationQuantization q = quantize_activations(static_cast<const float*>(inp), N * IC, quantized.data());
  float scale = q.scale;
  int32_t zero_point = q.zero_point;
  memory src_u8({{N, IC}, dt::u8, tag::ab}, engine, quantized.data());
  memory scale_mem({{1, 1}, dt::f32, tag::ab}, engine, &scale);
  memory zero_point_mem({{1}, dt::s32, tag::a}, engine, &zero_point);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_u8},
                                       {DNNL_ARG_WEIGHTS, weights},
                                       {DNNL_ARG_DST, dst},
                                       {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zero_point_mem},
                                       {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scales},
                                       {DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, scale_mem}};
  if (has_bias) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(2) | DNNL_ARG_SRC_1, bias);
  shape.matmul.execute(stream, args);
  stream.wait();
}

int64_t PackedLinear::in_features() const { return impl_->IC; }
int64_t PackedLinear::out_features() const { return impl_->OC; }
Precision PackedLinear::precision() const { return impl_->precision; }
Epilogue PackedLinear::epilogue() const { return impl_->epilogue; }

size_t PackedLinear::packed_bytes() const {
  return impl_->weights.get_desc().get_size() + impl_->bias.get_desc().get_size() +
         impl_->weight_scale.size() * sizeof(float);
}

std::string PackedLinear::implementation(int64_t N) const { return impl_->shape(N).implementation; }

bool packed_f32_is_native() {
  static const bool native = [] {
    const std::vector<float> w(64 * 64, 0.0f);
    return PackedLinear(w.data(), nullptr, 64, 64, Precision::f32).implementation(128).rfind("brg", 0) == 0;
  }();
  return native;
}

}  // namespace ops
