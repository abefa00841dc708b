// Every op × shape × dtype in one table, in the manner of llama.cpp's test-backend-ops: a case runs
// its op's forward and backward on one set of inputs in the fp64 reference and in a variant under
// test (a backend and a dtype), and the outputs, forward results and every gradient concatenated, are
// compared by normalised MSE, Σ(x − ref)² / Σ ref². The inputs are drawn in fp64 and rounded to what
// the variant's dtype holds, so both runs see the same values and only the arithmetic differs.
// Gradient and output buffers start filled with random values, so a fast path that accumulates where
// the reference writes (or the reverse) fails too.
//
// Rows: the ops of src/ops (linear, norms, activations, embedding, cross-entropy, dropout, softmax
// attention with caches, cross-attention, masks and dropout, its fused inference forwards and
// training backwards (fp32, and bf16 products), linear attention and its recurrent step, position tables, the vector maths) and librope's
// rotation. Columns (all_params): the CPU backend on
// each SIMD target this machine supports and the build has (Highway's target selection), in fp32,
// fp16/bf16 for librope, bf16 for the linear layer's mixed-precision products where the CPU has
// native bf16, bf16 for the fused bf16-product attention kernels where the CPU has AVX512-BF16 (and
// their products on AMX tiles: the amx-emulated column wherever it runs, tiles emulated in scalar
// code, and the amx column where the CPU has AMX and ROFORMER_AMX_ATTENTION=1 routes them there), and
// bf16 for training's activations (output and slope kept in bf16) and norms (output
// also written in bf16). A new backend adds its columns there; a new op adds rows below.
// The last test checks that the fp32 results are the same bits whatever the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/flash_attention.h"
#include "ops/linear.h"
#include "ops/linear_attention.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/packed_linear.h"
#include "ops/position.h"
#include "ops/vmath.h"
#include "hwy/targets.h"
#include "ops/ops_testing.h"
#include "rope/convert.h"
#include "rope/rope.hpp"

namespace {

enum class Dtype { f64, f32, f16, bf16 };

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::f64: return "f64";
    case Dtype::f32: return "f32";
    case Dtype::f16: return "f16";
    case Dtype::bf16: return "bf16";
  }
  return "?";
}

// A column of the table: where and in what precision an op runs.
struct Variant {
  std::string backend;     // "cpu"; a device backend adds its name here and its dispatch in the ops (the
                           // fused bf16 attention's AMX tiles: "amx", "amx-emulated")
  int64_t simd_target = 0;  // cpu: the Highway target the ops and librope dispatch to (0: the best)
  Dtype dtype = Dtype::f64;
  std::string name() const {
    return backend + (simd_target ? std::string("_") + hwy::TargetName(simd_target) : "") + "_" + dtype_name(dtype);
  }
};
const Variant kReference{"cpu", 0, Dtype::f64};

// x rounded to the nearest value of dtype d.
double representable(double x, Dtype d) {
  switch (d) {
    case Dtype::f64: return x;
    case Dtype::f32: return static_cast<float>(x);
    case Dtype::f16: return rope::f16_to_f32(rope::f32_to_f16(static_cast<float>(x)));
    case Dtype::bf16: return rope::bf16_to_f32(rope::f32_to_bf16(static_cast<float>(x)));
  }
  return x;
}

// A case's inputs: a seeded stream of values that the variant's dtype holds exactly.
class Inputs {
 public:
  Inputs(uint64_t seed, Dtype holds) : rng_(seed), holds_(holds) {}
  // n values of N(shift, scale²).
  std::vector<double> normal(int64_t n, double scale = 1, double shift = 0) {
    std::normal_distribution<double> dist(shift, scale);
    std::vector<double> v(n);
    for (double& x : v) x = representable(dist(rng_), holds_);
    return v;
  }
  // n integers uniform in [lo, hi].
  std::vector<int64_t> integers(int64_t n, int64_t lo, int64_t hi) {
    std::uniform_int_distribution<int64_t> dist(lo, hi);
    std::vector<int64_t> v(n);
    for (int64_t& x : v) x = dist(rng_);
    return v;
  }

 private:
  std::mt19937_64 rng_;
  Dtype holds_;
};

// What a case produced, in order, widened to fp64.
struct Outputs {
  std::vector<double> values;
  template <class T>
  void add(const std::vector<T>& v) { values.insert(values.end(), v.begin(), v.end()); }
  void add(double x) { values.push_back(x); }
};

template <class T>
std::vector<T> cast(const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); }

// Σ(x − ref)² / Σ ref² (Σ x² when the reference is all zeros); +inf on a size mismatch or a NaN.
double nmse(const std::vector<double>& x, const std::vector<double>& ref) {
  if (x.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(x[i])) continue;
    err += (x[i] - ref[i]) * (x[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0 ? err / norm : err;
}

using Body = std::function<void(const Variant&, Inputs&, Outputs&)>;

// A row of the table.
struct OpCase {
  std::string op, shape;
  Body body;
  std::vector<std::pair<Dtype, double>> variants;  // the dtypes it runs in beside f64, each with its largest NMSE
  std::vector<std::string> bf16_backends = {};  // backends besides the CPU's dispatch that run its bf16 variant
};

// A body for the ops that are templates over float and double.
template <class F>
Body typed(F f) {
  return [f](const Variant& v, Inputs& in, Outputs& out) {
    if (v.dtype == Dtype::f64) f.template operator()<double>(in, out);
    else if (v.dtype == Dtype::f32) f.template operator()<float>(in, out);
    else throw std::invalid_argument(std::string("no ") + dtype_name(v.dtype) + " path");
  };
}

std::string fields(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s;
  for (const auto& [k, v] : kv) {
    if (!s.empty()) s += '_';
    s += k;
    s += std::to_string(v);
  }
  return s;
}

// fp32 against fp64: a few roundings per element. The worst case measured is 5e-14 (linear attention
// with FAVOR+ features, whose exponentials amplify the rounding of the logits); rounding alone is 1e-15.
constexpr double kF32 = 1e-12;
// bf16 operands that bf16 holds exactly, products accumulated in fp32 by the bf16 dot-product
// instructions (which flush subnormals and round each pair's sum): fp32 accumulation error, 2.5e-15 at worst measured.
constexpr double kBf16Products = 1e-12;
// Attention with bf16 products: the probabilities, output gradients and score gradients are rounded
// to bf16 on their way into the next product (relative 2^-9 each).
constexpr double kBf16Attention = 1e-5;  // 1.2e-6 at worst measured
// The fused bf16-product inference forward: its scaled queries, probabilities (before the division by
// their sum) rounded to bf16 on top of the inputs' (relative 2^-9 each).
constexpr double kBf16FusedAttention = 1e-5;  // 4.8e-6 at worst measured (D 80, padding)
// Decoding over a bf16 key/value cache: inputs that bf16 holds (relative 2^-9 each), then fp32 arithmetic.
constexpr double kBf16Cache = 1e-5;
// bf16 training's activations: the output and the slope each rounded to bf16 once (relative 2^-9).
constexpr double kBf16Activation = 1e-5;
// bf16 training's norms: the output's bf16 copy, rounded once (relative 2^-9); the rest fp32's.
constexpr double kBf16Norm = 1e-5;

std::vector<OpCase> linear_cases() {
  std::vector<OpCase> cases;
  struct Shape { int64_t N, IC, OC; bool bias; };
  for (const Shape s : {Shape{1, 1, 1, true}, Shape{3, 7, 5, true}, Shape{17, 64, 33, false},
                        Shape{64, 256, 96, true}, Shape{5, 1030, 3, true}}) {
    // bf16: the mixed-precision training products (fp32 tensors, bf16 operands, fp32 accumulation) on
    // inputs bf16 holds, so that only the accumulation differs from the reference.
    Body body = [s](const Variant& v, Inputs& in, Outputs& out) {
      auto run = [&]<class T>(auto&& forward, auto&& backward) {
        const auto x = cast<T>(in.normal(s.N * s.IC)), w = cast<T>(in.normal(s.OC * s.IC, 1 / std::sqrt(s.IC)));
        const auto b = cast<T>(in.normal(s.OC)), g = cast<T>(in.normal(s.N * s.OC));
        auto y = cast<T>(in.normal(s.N * s.OC)), dx = cast<T>(in.normal(s.N * s.IC));
        auto dw = cast<T>(in.normal(s.OC * s.IC)), db = cast<T>(in.normal(s.OC));
        forward(y.data(), x.data(), w, s.bias ? b.data() : nullptr);
        backward(dx.data(), dw.data(), s.bias ? db.data() : nullptr, g.data(), x.data(), w);
        out.add(y), out.add(dx), out.add(dw), out.add(db);
      };
      auto plain = [&]<class T>() {
        run.template operator()<T>(
            [&](T* y, const T* x, const std::vector<T>& w, const T* b) {
              ops::linear_forward(y, x, w.data(), b, s.N, s.IC, s.OC);
            },
            [&](T* dx, T* dw, T* db, const T* g, const T* x, const std::vector<T>& w) {
              ops::linear_backward(dx, dw, db, g, x, w.data(), s.N, s.IC, s.OC);
            });
      };
      if (v.dtype == Dtype::f64) return plain.template operator()<double>();
      if (v.dtype == Dtype::f32) return plain.template operator()<float>();
      auto w16 = [](const std::vector<float>& w) {
        std::vector<uint16_t> h(w.size());
        for (size_t i = 0; i < w.size(); ++i) h[i] = rope::f32_to_bf16(w[i]);
        return h;
      };
      run.template operator()<float>(
          [&](float* y, const float* x, const std::vector<float>& w, const float* b) {
            ops::linear_forward_bf16(y, x, w16(w).data(), b, s.N, s.IC, s.OC);
          },
          [&](float* dx, float* dw, float* db, const float* g, const float* x, const std::vector<float>& w) {
            ops::linear_backward_bf16(dx, dw, db, g, x, w16(w).data(), s.N, s.IC, s.OC);
          });
    };
    std::vector<std::pair<Dtype, double>> variants = {{Dtype::f32, kF32}};
    if (ops::bf16_is_native()) variants.push_back({Dtype::bf16, kBf16Products});
    cases.push_back({"linear", fields({{"N", s.N}, {"IC", s.IC}, {"OC", s.OC}, {"bias", s.bias}}), body, variants});
  }
  return cases;
}

std::vector<OpCase> norm_cases() {
  std::vector<OpCase> cases;
  struct Shape { int64_t N, C; bool affine; };  // affine: LayerNorm's bias, RMSNorm's weight
  for (const Shape s : {Shape{1, 1, true}, Shape{3, 7, true}, Shape{4, 768, true}, Shape{2, 1030, false},
                        Shape{33, 64, true}}) {
    // bf16 (training): the fp32 forward with its output also written in bf16 (out16), what the next
    // dense reads; that copy, widened, stands for the output (the statistics and gradients are fp32's).
    auto norm_body = [](auto run) -> Body {
      return [run](const Variant& v, Inputs& in, Outputs& out) {
        if (v.dtype == Dtype::f64) return run.template operator()<double>(in, out, false);
        if (v.dtype == Dtype::f32) return run.template operator()<float>(in, out, false);
        run.template operator()<float>(in, out, true);
      };
    };
    // The output: y, or with round16 the bf16 copy y16 widened.
    auto output = [](Outputs& out, const auto& y, const std::vector<uint16_t>& y16, bool round16) {
      if (!round16) return out.add(y);
      for (const uint16_t h : y16) out.add(rope::bf16_to_f32(h));
    };
    // Inputs off centre (mean 3), where a one-pass variance would lose digits.
    Body layernorm = norm_body([s, output]<class T>(Inputs& in, Outputs& out, bool round16) {
      const auto x = cast<T>(in.normal(s.N * s.C, 2, 3)), w = cast<T>(in.normal(s.C, 0.5, 1));
      const auto b = cast<T>(in.normal(s.C)), g = cast<T>(in.normal(s.N * s.C));
      auto y = cast<T>(in.normal(s.N * s.C)), mean = cast<T>(in.normal(s.N)), rstd = cast<T>(in.normal(s.N));
      auto dx = cast<T>(in.normal(s.N * s.C)), dw = cast<T>(in.normal(s.C)), db = cast<T>(in.normal(s.C));
      std::vector<uint16_t> y16(round16 ? s.N * s.C : 0);
      const T* bias = s.affine ? b.data() : nullptr;
      ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, s.N, s.C, 1e-12,
                             round16 ? y16.data() : nullptr);
      ops::layernorm_backward(dx.data(), dw.data(), s.affine ? db.data() : nullptr, g.data(), x.data(), w.data(),
                              mean.data(), rstd.data(), s.N, s.C);
      output(out, y, y16, round16);
      out.add(mean), out.add(rstd), out.add(dx), out.add(dw), out.add(db);
    });
    Body rmsnorm = norm_body([s, output]<class T>(Inputs& in, Outputs& out, bool round16) {
      const auto x = cast<T>(in.normal(s.N * s.C, 2, 1)), w = cast<T>(in.normal(s.C, 0.5, 1));
      const auto g = cast<T>(in.normal(s.N * s.C));
      auto y = cast<T>(in.normal(s.N * s.C)), rrms = cast<T>(in.normal(s.N));
      auto dx = cast<T>(in.normal(s.N * s.C)), dw = cast<T>(in.normal(s.C));
      std::vector<uint16_t> y16(round16 ? s.N * s.C : 0);
      const T* weight = s.affine ? w.data() : nullptr;
      ops::rmsnorm_forward(y.data(), rrms.data(), x.data(), weight, s.N, s.C, 1e-6, round16 ? y16.data() : nullptr);
      ops::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), weight, rrms.data(), s.N, s.C);
      output(out, y, y16, round16);
      out.add(rrms), out.add(dx), out.add(dw);
    });
    const std::string shape = fields({{"N", s.N}, {"C", s.C}, {"affine", s.affine}});
    const std::vector<std::pair<Dtype, double>> norm_variants = {{Dtype::f32, kF32}, {Dtype::bf16, kBf16Norm}};
    cases.push_back({"layernorm", shape, layernorm, norm_variants});
    cases.push_back({"rmsnorm", shape, rmsnorm, norm_variants});
  }
  return cases;
}

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cases;
  for (const int64_t n : {1, 7, 8, 15, 1000, 4099}) {
    Body gelu = typed([n]<class T>(Inputs& in, Outputs& out) {
      const auto x = cast<T>(in.normal(n, 3)), g = cast<T>(in.normal(n));
      auto y = cast<T>(in.normal(n)), dx = cast<T>(in.normal(n));
      ops::gelu_forward(y.data(), x.data(), n);
      ops::gelu_backward(dx.data(), x.data(), g.data(), n);
      out.add(y), out.add(dx);
    });
    Body relu = typed([n]<class T>(Inputs& in, Outputs& out) {
      const auto x = cast<T>(in.normal(n, 3)), g = cast<T>(in.normal(n));
      auto y = cast<T>(in.normal(n)), dx = cast<T>(in.normal(n));
      ops::relu_forward(y.data(), x.data(), n);
      ops::relu_backward(dx.data(), x.data(), g.data(), n);
      out.add(y), out.add(dx);
    });
    // Dropout's mask is a function of (seed, counter), so both dtypes drop the same elements.
    Body dropout = typed([n]<class T>(Inputs& in, Outputs& out) {
      const auto x = cast<T>(in.normal(n)), g = cast<T>(in.normal(n));
      auto y = cast<T>(in.normal(n)), dx = cast<T>(in.normal(n));
      ops::dropout_forward(y.data(), x.data(), n, 0.3, 77, 5 * n);
      ops::dropout_backward(dx.data(), g.data(), n, 0.3, 77, 5 * n);
      out.add(y), out.add(dx);
    });
    // The fp32 vector maths (no double version) against the C library in double.
    Body vmath = [n](const Variant& v, Inputs& in, Outputs& out) {
      const auto x = in.normal(n, 4);
      if (v.dtype == Dtype::f64) {
        for (double t : x) out.add(std::exp(t)), out.add(std::erf(t)), out.add(std::erfc(t));
        return;
      }
      const auto xf = cast<float>(x);
      std::vector<float> e(n), erf(n), erfc(n);
      ops::exp_f32(e.data(), xf.data(), n);
      ops::erf_f32(erf.data(), xf.data(), n);
      ops::erfc_f32(erfc.data(), xf.data(), n);
      for (int64_t i = 0; i < n; ++i) out.add(e[i]), out.add(erf[i]), out.add(erfc[i]);
    };
    // bf16 (training): the output and the slope kept in bf16 (*_forward_bf16); the backward is the
    // output gradient times the slope (as linear_backward_bf16_with_slope forms it), added to dx.
    auto with_bf16 = [n](Body fp, void (*forward_bf16)(uint16_t*, uint16_t*, const float*, int64_t)) -> Body {
      return [n, fp, forward_bf16](const Variant& v, Inputs& in, Outputs& out) {
        if (v.dtype != Dtype::bf16) return fp(v, in, out);
        const auto x = cast<float>(in.normal(n, 3)), g = cast<float>(in.normal(n));
        in.normal(n);  // y's initial values, which the forward overwrites
        const auto dx0 = in.normal(n);
        std::vector<uint16_t> y16(n), slope16(n);
        forward_bf16(y16.data(), slope16.data(), x.data(), n);
        std::vector<float> formed(n);
        ops::mul_bf16_f32(formed.data(), g.data(), slope16.data(), n);
        std::vector<double> y(n), dx(n);
        for (int64_t i = 0; i < n; ++i) y[i] = rope::bf16_to_f32(y16[i]), dx[i] = dx0[i] + formed[i];
        out.add(y), out.add(dx);
      };
    };
    const std::string shape = fields({{"n", n}});
    std::vector<std::pair<Dtype, double>> activation_variants = {{Dtype::f32, kF32}, {Dtype::bf16, kBf16Activation}};
    cases.push_back({"gelu", shape, with_bf16(gelu, ops::gelu_forward_bf16), activation_variants});
    cases.push_back({"relu", shape, with_bf16(relu, ops::relu_forward_bf16), activation_variants});
    cases.push_back({"dropout", shape, dropout, {{Dtype::f32, kF32}}});
    cases.push_back({"vmath", shape, vmath, {{Dtype::f32, kF32}}});
  }
  return cases;
}

std::vector<OpCase> table_cases() {
  std::vector<OpCase> cases;
  struct Shape { int64_t N, V, C; };
  for (const Shape s : {Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{64, 100, 96}}) {
    // Repeated ids: the table gradient sums several rows.
    Body embedding = typed([s]<class T>(Inputs& in, Outputs& out) {
      const auto ids = in.integers(s.N, 0, s.V - 1);
      const auto table = cast<T>(in.normal(s.V * s.C)), g = cast<T>(in.normal(s.N * s.C));
      auto y = cast<T>(in.normal(s.N * s.C)), dtable = cast<T>(in.normal(s.V * s.C));
      ops::embedding_forward(y.data(), ids.data(), table.data(), s.N, s.V, s.C);
      ops::embedding_backward(dtable.data(), g.data(), ids.data(), s.N, s.C);
      out.add(y), out.add(dtable);
    });
    cases.push_back({"embedding", fields({{"N", s.N}, {"V", s.V}, {"C", s.C}}), embedding, {{Dtype::f32, kF32}}});
  }
  struct Loss { int64_t N, V; double scale; };
  for (const Loss s : {Loss{1, 2, 1}, Loss{7, 13, 3}, Loss{33, 1000, 1}, Loss{5, 50, 20}}) {
    // About one target in five is the ignore index; scale 20 puts rows near one-hot.
    Body loss = typed([s]<class T>(Inputs& in, Outputs& out) {
      const auto logits = cast<T>(in.normal(s.N * s.V, s.scale));
      auto targets = in.integers(s.N, 0, s.V - 1);
      const auto ignore = in.integers(s.N, 0, 4);
      for (int64_t i = 1; i < s.N; ++i) targets[i] = ignore[i] == 0 ? -100 : targets[i];
      auto probs = cast<T>(in.normal(s.N * s.V)), dlogits = cast<T>(in.normal(s.N * s.V));
      int64_t counted = 0;
      const double l = ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), s.N, s.V, -100, &counted);
      ops::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), s.N, s.V, -100, counted, 1.7);
      out.add(l), out.add(static_cast<double>(counted)), out.add(probs), out.add(dlogits);
    });
    cases.push_back({"cross_entropy", fields({{"N", s.N}, {"V", s.V}, {"scale", int64_t(s.scale)}}), loss, {{Dtype::f32, kF32}}});
  }
  for (const int64_t C : {2, 64, 768}) {
    // fp32 only: the table is built from librope's exact cos/sin; the reference is the formula in double.
    Body sinusoidal = [C](const Variant& v, Inputs& in, Outputs& out) {
      const int64_t P = 300, B = 2;
      const auto x = in.normal(B * P * C);
      if (v.dtype == Dtype::f64) {
        for (int64_t b = 0; b < B; ++b)
          for (int64_t p = 0; p < P; ++p)
            for (int64_t c = 0; c < C; ++c) {
              const double theta = p * std::pow(10000.0, -static_cast<double>(c - c % 2) / C);
              out.add(x[(b * P + p) * C + c] + (c % 2 == 0 ? std::sin(theta) : std::cos(theta)));
            }
        return;
      }
      std::vector<float> table(P * C), xf = cast<float>(x);
      ops::sinusoidal_table(table.data(), P, C);
      ops::add_positions(xf.data(), table.data(), B, P, C);
      out.add(xf);
    };
    cases.push_back({"sinusoidal_positions", fields({{"C", C}}), sinusoidal, {{Dtype::f32, kF32}}});
  }
  return cases;
}

// Softmax attention: self-attention, padding, causal masks, UniLM prefix limits, a KV cache (keys
// strided by the capacity, queries at an offset), cross-attention (Tk ≠ T) and probability dropout;
// every case twice, keeping the probabilities and keeping row statistics (the backward recomputes).
struct AttentionCase {
  ops::AttentionShape s;
  bool padding = false, prefix_limits = false;
};

std::string attention_name(const AttentionCase& a) {
  const auto& s = a.s;
  return fields({{"B", s.B}, {"T", s.T}, {"H", s.H}, {"D", s.D}, {"Tk", s.keys()}, {"stride", s.key_stride()},
                 {"start", s.q_start}, {"causal", s.causal}, {"pad", a.padding}, {"prefix", a.prefix_limits},
                 {"drop", s.dropout_p > 0}, {"stats", s.saved == ops::AttentionSaved::row_stats}});
}

// The case's key mask (B, Tk) and, with prefix limits, its limits (B, T), which s.row_limit points to.
void attention_masks(const AttentionCase& a, ops::AttentionShape& s, std::vector<int64_t>& key_mask,
                     std::vector<int64_t>& limits) {
  const int64_t Tk = s.keys();
  key_mask.assign(s.B * Tk, 1);
  if (a.padding) {  // row b keeps its first Tk − 1 − b keys (at least one)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t j = std::max<int64_t>(1, Tk - 1 - b); j < Tk; ++j) key_mask[b * Tk + j] = 0;
  }
  if (a.prefix_limits) {  // UniLM: a segment of 3 keys, then causal
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.T; ++t) limits.push_back(std::max<int64_t>(3, s.q_start + t + 1));
    s.row_limit = limits.data();
  }
}

// bf16: fp32 tensors with every product in bf16 (AttentionShape::bf16_products), forward and backward
// (the backward given the forward's output, as the model gives it: with row statistics, no dropout and
// 16 rows or more, on AVX512-BF16, the fused kernels).
Body attention_body(const AttentionCase& a) {
  auto run = [a]<class T>(Inputs& in, Outputs& out, bool bf16) {
    ops::AttentionShape s = a.s;
    s.bf16_products = bf16;
    const int64_t C = s.H * s.D, kv = s.B * s.key_stride() * C;
    const auto q = cast<T>(in.normal(s.B * s.T * C)), k = cast<T>(in.normal(kv)), v = cast<T>(in.normal(kv));
    const auto g = cast<T>(in.normal(s.B * s.T * C));
    std::vector<int64_t> key_mask, limits;
    attention_masks(a, s, key_mask, limits);
    auto o = cast<T>(in.normal(s.B * s.T * C)), att = cast<T>(in.normal(ops::attention_saved_size(s)));
    auto dq = cast<T>(in.normal(s.B * s.T * C)), dk = cast<T>(in.normal(kv)), dv = cast<T>(in.normal(kv));
    ops::attention_forward(o.data(), att.data(), q.data(), k.data(), v.data(), key_mask.data(), s);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(),
                            key_mask.data(), s, o.data());
    out.add(o), out.add(att), out.add(dq), out.add(dk), out.add(dv);
  };
  return [run](const Variant& v, Inputs& in, Outputs& out) {
    if (v.dtype == Dtype::f64) return run.template operator()<double>(in, out, false);
    run.template operator()<float>(in, out, v.dtype == Dtype::bf16);
  };
}

std::vector<AttentionCase> attention_table() {
  std::vector<AttentionCase> table;
  auto shape = [](int64_t B, int64_t T, int64_t H, int64_t D, bool causal) { return ops::AttentionShape{B, T, H, D, causal}; };
  table.push_back({shape(1, 1, 1, 1, false)});
  table.push_back({shape(2, 5, 2, 3, false), true});
  table.push_back({shape(2, 9, 3, 8, true)});
  table.push_back({shape(2, 70, 2, 32, true), true});   // more rows than one row block, trailing padding
  table.push_back({shape(2, 6, 2, 8, false), false, true});
  AttentionCase cache{shape(1, 7, 2, 16, true)};        // 7 new tokens after 5 cached ones, capacity 16
  cache.s.Tk = 12, cache.s.kv_stride = 16, cache.s.q_start = 5;
  table.push_back(cache);
  AttentionCase decode{shape(2, 1, 4, 64, true)};       // one token after 32
  decode.s.Tk = 33, decode.s.kv_stride = 40, decode.s.q_start = 32;
  table.push_back(decode);
  AttentionCase cross{shape(2, 4, 2, 8, false), true};  // 4 queries over 11 memory rows
  cross.s.Tk = 11;
  table.push_back(cross);
  AttentionCase dropout{shape(2, 6, 2, 4, true)};
  dropout.s.dropout_p = 0.3, dropout.s.dropout_seed = 1234, dropout.s.dropout_row0 = 3;
  table.push_back(dropout);
  // Full blocks of 64 rows over 256 keys or more: with kept probabilities fp32 products on oneDNN's
  // sgemm (with row statistics the fused kernels), with trailing padding and keys strided by a
  // cache's capacity; partial last blocks and the causal one's early blocks on OpenBLAS.
  table.push_back({shape(2, 330, 1, 64, false), true});
  table.push_back({shape(1, 400, 1, 64, true)});
  AttentionCase long_cache{shape(1, 70, 2, 64, true)};  // 70 new tokens after 260 cached, capacity 340
  long_cache.s.Tk = 330, long_cache.s.kv_stride = 340, long_cache.s.q_start = 260;
  table.push_back(long_cache);
  // Random shapes: any of the options above together.
  std::mt19937_64 rng(2024);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  for (int i = 0; i < 6; ++i) {
    AttentionCase r{shape(pick(1, 3), pick(1, 40), pick(1, 4), pick(1, 40), rng() % 2 == 0), rng() % 2 == 0};
    if (rng() % 2 == 0) {
      r.s.q_start = pick(0, 20);
      r.s.Tk = r.s.q_start + r.s.T;
      r.s.kv_stride = r.s.Tk + pick(0, 5);
    }
    if (rng() % 3 == 0) r.s.dropout_p = 0.2, r.s.dropout_seed = rng();
    table.push_back(r);
  }
  return table;
}

std::vector<OpCase> attention_cases() {
  std::vector<OpCase> cases;
  for (AttentionCase a : attention_table()) {
    for (const ops::AttentionSaved saved : {ops::AttentionSaved::probabilities, ops::AttentionSaved::row_stats}) {
      a.s.saved = saved;
      std::vector<std::pair<Dtype, double>> variants = {{Dtype::f32, kF32}};
      if (ops::bf16_is_native()) variants.push_back({Dtype::bf16, kBf16Attention});
      cases.push_back({"attention", attention_name(a), attention_body(a), variants});
    }
  }
  return cases;
}

// The fused kernels' rows: the attention rows' shapes (those with attention dropout only where
// `dropout`), then head dims that are not a multiple of any vector width and RoFormer-base's 64 over
// several key tiles.
std::vector<AttentionCase> fused_attention_table(bool dropout) {
  std::vector<AttentionCase> table;
  for (AttentionCase a : attention_table()) {
    if (dropout || a.s.dropout_p == 0) table.push_back(a);
  }
  AttentionCase odd{ops::AttentionShape{2, 70, 2, 24, true}, true, true};  // D 24, prefix limits, padding
  odd.s.Tk = 100, odd.s.kv_stride = 110, odd.s.q_start = 30;
  table.push_back(odd);
  table.push_back({ops::AttentionShape{3, 200, 2, 80, false}, true});  // D 80, batch 2 keeps one key
  table.push_back({ops::AttentionShape{2, 150, 1, 128, true}});
  return table;
}

// A fused kernel's row on shape s: its columns (f32, and bf16 where the bf16 kernels take s, with
// bf16_nmse) and the backends of its products on AMX tiles (emulated, and real where enabled).
OpCase fused_attention_case(const std::string& op, const AttentionCase& a, Body body, double bf16_nmse) {
  OpCase c{op, attention_name(a), std::move(body), {{Dtype::f32, kF32}}};
  ops::AttentionShape bf16 = a.s;
  bf16.bf16_products = true;
  if (ops::flash_attention_bf16_applies(bf16)) {
    c.variants.push_back({Dtype::bf16, bf16_nmse});
    c.bf16_backends.push_back("amx-emulated");
    if (ops::flash_attention_amx_enabled()) c.bf16_backends.push_back("amx");
  }
  return c;
}

// The tile products a fused kernel's row runs on in the column of `variant` ("amx" or "amx-emulated").
ops::Bf16Products tile_products(const Variant& variant) {
  return variant.backend == "amx" ? ops::Bf16Products::amx : ops::Bf16Products::amx_emulated;
}

// The fused inference forward (flash_attention.h): its fp32 result against attention_forward's in
// fp64 (the reference run), on the attention rows' shapes without dropout (inference has none) and at
// head dims that are not a multiple of any vector width, with RoFormer-base's 64 over several key tiles.
// bf16: the bf16-product kernel (flash_attention_forward_bf16) where the CPU has AVX512-BF16, on inputs
// bf16 holds (its own rounding: the scaled queries and the probabilities).
std::vector<OpCase> flash_attention_cases() {
  std::vector<OpCase> cases;
  for (AttentionCase a : fused_attention_table(false)) {
    a.s.saved = ops::AttentionSaved::none;
    Body body = [a](const Variant& variant, Inputs& in, Outputs& out) {
      ops::AttentionShape s = a.s;
      const int64_t C = s.H * s.D, kv = s.B * s.key_stride() * C;
      const auto q = in.normal(s.B * s.T * C), k = in.normal(kv), v = in.normal(kv);
      std::vector<int64_t> key_mask, limits;
      attention_masks(a, s, key_mask, limits);
      if (variant.dtype == Dtype::f64) {
        std::vector<double> o(s.B * s.T * C);
        ops::attention_forward<double>(o.data(), nullptr, q.data(), k.data(), v.data(), key_mask.data(), s);
        return out.add(o);
      }
      auto o = cast<float>(in.normal(s.B * s.T * C));  // written over: it starts random
      const auto qf = cast<float>(q), kf = cast<float>(k), vf = cast<float>(v);
      if (variant.dtype == Dtype::bf16) {
        s.bf16_products = true;
        if (variant.backend == "cpu") {  // what inference runs
          ops::flash_attention_forward_bf16(o.data(), qf.data(), kf.data(), vf.data(), key_mask.data(), s);
        } else {
          ops::flash_attention_forward_bf16_with(tile_products(variant), o.data(), qf.data(), kf.data(), vf.data(),
                                                 key_mask.data(), s);
        }
      } else {
        ops::flash_attention_forward(o.data(), qf.data(), kf.data(), vf.data(), key_mask.data(), s);
      }
      out.add(o);
    };
    cases.push_back(fused_attention_case("flash_attention", a, body, kBf16FusedAttention));
  }
  return cases;
}

// The fused training backward (flash_attention.h): dq, dk and dv added to random values, given the
// forward's output and row statistics, against attention_backward in fp64 (the probabilities kept),
// on the attention rows' shapes (attention dropout included: training has it) and the inference
// forward's extra head dims. fp32: flash_attention_forward and _backward; bf16 on the CPU's dispatch:
// flash_attention_forward_bf16 and _backward_bf16, as training runs them; on the tile backends the
// forward on the dot products and the backward's five products on the tiles.
std::vector<OpCase> flash_attention_backward_cases() {
  std::vector<OpCase> cases;
  for (AttentionCase a : fused_attention_table(true)) {
    a.s.saved = ops::AttentionSaved::row_stats;
    Body body = [a](const Variant& variant, Inputs& in, Outputs& out) {
      ops::AttentionShape s = a.s;
      const int64_t C = s.H * s.D, kv = s.B * s.key_stride() * C;
      const auto q = in.normal(s.B * s.T * C), k = in.normal(kv), v = in.normal(kv), g = in.normal(s.B * s.T * C);
      const auto dq0 = in.normal(s.B * s.T * C), dk0 = in.normal(kv), dv0 = in.normal(kv);
      std::vector<int64_t> key_mask, limits;
      attention_masks(a, s, key_mask, limits);
      if (variant.dtype == Dtype::f64) {
        s.saved = ops::AttentionSaved::probabilities;
        std::vector<double> o(s.B * s.T * C), att(ops::attention_saved_size(s)), dq = dq0, dk = dk0, dv = dv0;
        ops::attention_forward<double>(o.data(), att.data(), q.data(), k.data(), v.data(), key_mask.data(), s);
        ops::attention_backward<double>(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(),
                                        v.data(), key_mask.data(), s);
        out.add(dq), out.add(dk), out.add(dv);
        return;
      }
      const auto qf = cast<float>(q), kf = cast<float>(k), vf = cast<float>(v), gf = cast<float>(g);
      auto dq = cast<float>(dq0), dk = cast<float>(dk0), dv = cast<float>(dv0);
      std::vector<float> o(s.B * s.T * C), stats(ops::attention_saved_size(s));
      const int64_t* mask = key_mask.data();
      s.bf16_products = variant.dtype == Dtype::bf16;
      if (!s.bf16_products) {
        ops::flash_attention_forward(o.data(), qf.data(), kf.data(), vf.data(), mask, s, stats.data());
        ops::flash_attention_backward(dq.data(), dk.data(), dv.data(), gf.data(), o.data(), stats.data(), qf.data(),
                                      kf.data(), vf.data(), mask, s);
      } else if (variant.backend == "cpu") {  // what training runs
        ops::flash_attention_forward_bf16(o.data(), qf.data(), kf.data(), vf.data(), mask, s, stats.data());
        ops::flash_attention_backward_bf16(dq.data(), dk.data(), dv.data(), gf.data(), o.data(), stats.data(),
                                           qf.data(), kf.data(), vf.data(), mask, s);
      } else {
        ops::flash_attention_forward_bf16_with(ops::Bf16Products::dot, o.data(), qf.data(), kf.data(), vf.data(), mask,
                                               s, stats.data());
        ops::flash_attention_backward_bf16_with(tile_products(variant), dq.data(), dk.data(), dv.data(), gf.data(),
                                                o.data(), stats.data(), qf.data(), kf.data(), vf.data(), mask, s);
      }
      out.add(dq), out.add(dk), out.add(dv);
    };
    cases.push_back(fused_attention_case("flash_attention_backward", a, body, kBf16Attention));
  }
  return cases;
}

// Decoding's attention: a query per row over keys of its own (rows at different positions, cache rows
// out of order, a row of one key), against attention_forward at T = 1 in the same run (its case's
// second output), so that both the decode kernel and its agreement with the general path are checked.
std::vector<OpCase> attention_decode_cases() {
  struct Case { int64_t H, D, stride; std::vector<int64_t> keys, rows; };
  std::vector<Case> table = {{1, 1, 1, {1}, {0}}, {4, 64, 80, {1, 33, 70}, {2, 0, 1}}, {2, 8, 9, {9, 5}, {1, 0}}};
  std::mt19937_64 rng(77);
  for (int i = 0; i < 4; ++i) {
    Case c{1 + static_cast<int64_t>(rng() % 4), 1 + static_cast<int64_t>(rng() % 40), 0, {}, {}};
    const int64_t B = 1 + static_cast<int64_t>(rng() % 5);
    for (int64_t b = 0; b < B; ++b) c.keys.push_back(1 + static_cast<int64_t>(rng() % 50)), c.rows.push_back(B - 1 - b);
    c.stride = *std::max_element(c.keys.begin(), c.keys.end()) + static_cast<int64_t>(rng() % 3);
    table.push_back(c);
  }
  std::vector<OpCase> cases;
  for (const Case& c : table) {
    const int64_t B = static_cast<int64_t>(c.keys.size()), C = c.H * c.D;
    // bf16: the cache's keys and values as bfloat16 bits, head-major as a bf16 KVCache keeps them,
    // read by the bf16 kernel.
    auto run = [c, B, C]<class T>(Inputs& in, Outputs& out, bool bf16) {
      const auto q = cast<T>(in.normal(B * C)), k = cast<T>(in.normal(B * c.stride * C));
      const auto v = cast<T>(in.normal(B * c.stride * C));
      auto o = cast<T>(in.normal(B * C)), general = o;
      ops::DecodeAttentionShape shape{B, c.H, c.D, c.keys.data(), c.rows.data(), c.stride};
      if constexpr (std::is_same_v<T, float>) {
        if (bf16) {
          std::vector<uint16_t> k16(k.size()), v16(v.size());
          for (int64_t r = 0; r < B; ++r) {
            for (int64_t t = 0; t < c.stride; ++t) {
              for (int64_t h = 0; h < c.H; ++h) {
                for (int64_t x = 0; x < c.D; ++x) {
                  const int64_t from = (r * c.stride + t) * C + h * c.D + x, to = ((r * c.H + h) * c.stride + t) * c.D + x;
                  k16[to] = rope::f32_to_bf16(k[from]), v16[to] = rope::f32_to_bf16(v[from]);
                }
              }
            }
          }
          shape.heads_major = true;
          ops::attention_decode_forward(o.data(), q.data(), k16.data(), v16.data(), shape);
        }
      }
      if (!bf16) ops::attention_decode_forward<T>(o.data(), q.data(), k.data(), v.data(), shape);
      for (int64_t b = 0; b < B; ++b) {
        ops::AttentionShape s{1, 1, c.H, c.D, true};
        s.Tk = c.keys[b], s.kv_stride = c.stride, s.q_start = c.keys[b] - 1, s.saved = ops::AttentionSaved::none;
        const int64_t row = c.rows[b] * c.stride * C;
        ops::attention_forward<T>(general.data() + b * C, nullptr, q.data() + b * C, k.data() + row, v.data() + row,
                                  nullptr, s);
      }
      out.add(o), out.add(general);
    };
    Body body = [run](const Variant& variant, Inputs& in, Outputs& out) {
      if (variant.dtype == Dtype::f64) return run.template operator()<double>(in, out, false);
      run.template operator()<float>(in, out, variant.dtype == Dtype::bf16);
    };
    std::string keys;
    for (int64_t n : c.keys) keys += (keys.empty() ? "" : "-") + std::to_string(n);
    cases.push_back({"attention_decode", fields({{"B", B}, {"H", c.H}, {"D", c.D}, {"stride", c.stride}}) + "_keys" + keys,
                     body, {{Dtype::f32, kF32}, {Dtype::bf16, kBf16Cache}}});
  }
  return cases;
}

// Linear attention (eq. 19): both feature maps, causal or not (in one chunk, several, or token by
// token), each RoPE layout, a scaling method, an offset start; its backward; and the recurrent step.
std::vector<OpCase> linear_attention_cases() {
  struct Case {
    int64_t B, T, H, Dk, Dv;
    bool causal;
    ops::FeatureMap map;
    rope_layout layout;
    const char* scaling;
    int64_t start;
    int64_t chunk = 64;
  };
  const ops::FeatureMap elu = ops::FeatureMap::elu_plus_one, favor = ops::FeatureMap::favor;
  std::vector<OpCase> cases;
  for (const Case& c : {Case{1, 1, 1, 2, 1, false, elu, ROPE_LAYOUT_INTERLEAVED, "none", 0},
                       Case{2, 9, 2, 8, 5, false, elu, ROPE_LAYOUT_INTERLEAVED, "none", 0},
                       Case{2, 9, 2, 8, 5, true, elu, ROPE_LAYOUT_HALF, "none", 3},
                       Case{2, 9, 2, 8, 5, true, elu, ROPE_LAYOUT_HALF, "none", 3, 4},
                       Case{2, 9, 2, 8, 5, true, elu, ROPE_LAYOUT_HALF, "none", 3, 1},
                       Case{1, 33, 3, 16, 16, true, favor, ROPE_LAYOUT_INTERLEAVED, "yarn:4:8", 0},
                       Case{1, 33, 3, 16, 16, true, favor, ROPE_LAYOUT_INTERLEAVED, "yarn:4:8", 0, 8},
                       Case{2, 12, 2, 6, 7, false, favor, ROPE_LAYOUT_HALF, "linear:2", 10}}) {
    ops::LinearAttentionShape s{c.B, c.T, c.H, c.Dk, c.Dv, c.causal, c.map};
    s.favor_features = c.map == favor ? 12 : 0;
    s.rope_cfg.layout = c.layout;
    rope::apply_scaling_spec(c.scaling, &s.rope_cfg);
    s.start = c.start;
    s.chunk = c.chunk;
    const std::string name = fields({{"B", c.B}, {"T", c.T}, {"H", c.H}, {"Dk", c.Dk}, {"Dv", c.Dv}, {"causal", c.causal},
                                     {"favor", c.map == favor}, {"half", c.layout == ROPE_LAYOUT_HALF}, {"start", c.start}}) +
                             "_" + std::string(c.scaling).substr(0, std::string(c.scaling).find(':')) +
                             (c.causal && c.chunk != 64 ? "_chunk" + std::to_string(c.chunk) : "");
    Body forward_backward = typed([s]<class T>(Inputs& in, Outputs& out) {
      const int64_t nq = s.B * s.T * s.H * s.Dk, nv = s.B * s.T * s.H * s.Dv;
      std::vector<T> W(s.favor_features * s.Dk);
      if (s.favor_features > 0) W = cast<T>(in.normal(s.favor_features * s.Dk));
      const auto q = cast<T>(in.normal(nq, 0.5)), k = cast<T>(in.normal(nq, 0.5)), v = cast<T>(in.normal(nv));
      const auto g = cast<T>(in.normal(nv));
      auto o = cast<T>(in.normal(nv)), saved = cast<T>(in.normal(ops::linear_attention_saved_size(s)));
      auto dq = cast<T>(in.normal(nq)), dk = cast<T>(in.normal(nq)), dv = cast<T>(in.normal(nv));
      ops::linear_attention_forward(o.data(), saved.data(), q.data(), k.data(), v.data(), W.data(), s);
      ops::linear_attention_backward(dq.data(), dk.data(), dv.data(), g.data(), saved.data(), q.data(), k.data(),
                                     v.data(), W.data(), s);
      out.add(o), out.add(dq), out.add(dk), out.add(dv);
    });
    cases.push_back({"linear_attention", name, forward_backward, {{Dtype::f32, kF32}}});
    if (!c.causal || c.chunk != 64) continue;  // the step is the same for every chunk size
    Body step = typed([s]<class T>(Inputs& in, Outputs& out) {
      ops::LinearAttentionShape one = s;
      one.rope_seq_len = s.start + s.T;
      const int64_t nq = s.B * s.H * s.Dk, nv = s.B * s.H * s.Dv;
      std::vector<T> W(s.favor_features * s.Dk);
      if (s.favor_features > 0) W = cast<T>(in.normal(s.favor_features * s.Dk));
      auto state = ops::linear_attention_state<T>(one);
      for (int64_t t = 0; t < s.T; ++t) {
        const auto q = cast<T>(in.normal(nq, 0.5)), k = cast<T>(in.normal(nq, 0.5)), v = cast<T>(in.normal(nv));
        auto o = cast<T>(in.normal(nv));
        ops::linear_attention_step(o.data(), q.data(), k.data(), v.data(), W.data(), one, state);
        out.add(o);
      }
    });
    cases.push_back({"linear_attention_step", name, step, {{Dtype::f32, kF32}}});
  }
  return cases;
}

// librope's rotation in every dtype, strided views, in place and out of place, both directions.
std::vector<OpCase> rope_cases() {
  struct Case { int64_t B, S, H, D, rot, pad; rope_layout layout; const char* scaling; bool out_of_place; rope_direction dir; };
  std::vector<OpCase> cases;
  for (const Case& c : {Case{1, 1, 1, 2, 2, 0, ROPE_LAYOUT_INTERLEAVED, "none", false, ROPE_FORWARD},
                       Case{2, 17, 3, 64, 64, 0, ROPE_LAYOUT_INTERLEAVED, "none", true, ROPE_FORWARD},
                       Case{2, 17, 3, 64, 32, 8, ROPE_LAYOUT_HALF, "ntk:4", false, ROPE_BACKWARD},
                       Case{1, 100, 2, 128, 128, 3, ROPE_LAYOUT_HALF, "yarn:8:64", true, ROPE_FORWARD},
                       Case{3, 7, 5, 10, 10, 1, ROPE_LAYOUT_INTERLEAVED, "llama3:8:4", false, ROPE_FORWARD}}) {
    Body body = [c](const Variant& v, Inputs& in, Outputs& out) {
      rope_config cfg = rope::default_config(static_cast<int32_t>(c.D));
      cfg.rot_dim = static_cast<int32_t>(c.rot);
      cfg.layout = c.layout;
      rope::apply_scaling_spec(c.scaling, &cfg);
      const rope::Plan plan(cfg);
      // Tokens strided by H·D + pad elements; the pad is never touched.
      const int64_t token_stride = c.H * c.D + c.pad, n = c.B * c.S * token_stride;
      const auto x = in.normal(n);
      const rope_positions pos = rope::offset_positions(11);
      auto view = [&](void* data, rope_dtype dt) {
        return rope_tensor{data, dt, c.B, c.S, c.H, c.S * token_stride, token_stride, c.D};
      };
      auto run = [&]<class T>(rope_dtype dt, auto to, auto from) {
        std::vector<T> in_buf(n), out_buf(n);
        for (int64_t i = 0; i < n; ++i) in_buf[i] = to(x[i]), out_buf[i] = to(-1.0);
        const rope_tensor src = view(in_buf.data(), dt), dst = view(out_buf.data(), dt);
        plan.apply(c.dir, ROPE_ROLE_QUERY, pos, src, c.out_of_place ? &dst : nullptr);
        for (int64_t i = 0; i < n; ++i) out.add(static_cast<double>(from((c.out_of_place ? out_buf : in_buf)[i])));
      };
      auto identity = [](auto y) { return y; };
      switch (v.dtype) {
        case Dtype::f64: run.template operator()<double>(ROPE_DTYPE_F64, identity, identity); break;
        case Dtype::f32: run.template operator()<float>(ROPE_DTYPE_F32, [](double y) { return float(y); }, identity); break;
        case Dtype::f16:
          run.template operator()<uint16_t>(ROPE_DTYPE_F16, [](double y) { return rope::f32_to_f16(float(y)); },
                                            rope::f16_to_f32);
          break;
        case Dtype::bf16:
          run.template operator()<uint16_t>(ROPE_DTYPE_BF16, [](double y) { return rope::f32_to_bf16(float(y)); },
                                            rope::bf16_to_f32);
          break;
      }
    };
    const std::string name = fields({{"B", c.B}, {"S", c.S}, {"H", c.H}, {"D", c.D}, {"rot", c.rot}, {"pad", c.pad},
                                     {"half", c.layout == ROPE_LAYOUT_HALF}, {"out", c.out_of_place},
                                     {"backward", c.dir == ROPE_BACKWARD}}) +
                             "_" + std::string(c.scaling).substr(0, std::string(c.scaling).find(':'));
    // One rounding of the result: NMSE ≈ u²/3 with u the unit roundoff (2⁻²⁴, 2⁻¹¹, 2⁻⁸), with margin.
    cases.push_back({"rope", name, body, {{Dtype::f32, 1e-13}, {Dtype::f16, 1e-6}, {Dtype::bf16, 6e-5}}});
  }
  return cases;
}

struct Param {
  const OpCase* op;
  Variant variant;
  double max_nmse;
  uint64_t seed;
};

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> all;
    for (auto make : {linear_cases, norm_cases, elementwise_cases, table_cases, attention_cases,
                      flash_attention_cases, flash_attention_backward_cases, attention_decode_cases, linear_attention_cases, rope_cases}) {
      for (OpCase& c : make()) all.push_back(std::move(c));
    }
    return all;
  }();
  return cases;
}

void PrintTo(const Param& p, std::ostream* os) { *os << p.op->op << " " << p.op->shape << " on " << p.variant.name(); }

std::vector<Param> all_params() {
  std::vector<Param> params;
  uint64_t seed = 1;
  for (const OpCase& c : all_cases()) {
    ++seed;
    for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
      for (const auto& [dtype, max_nmse] : c.variants) params.push_back({&c, Variant{"cpu", target, dtype}, max_nmse, seed});
    }
    for (const std::string& backend : c.bf16_backends) {  // their own kernels: no Highway target to vary
      for (const auto& [dtype, max_nmse] : c.variants) {
        if (dtype == Dtype::bf16) params.push_back({&c, Variant{backend, 0, dtype}, max_nmse, seed});
      }
    }
  }
  return params;
}

class BackendOps : public testing::TestWithParam<Param> {};

TEST_P(BackendOps, MatchesTheFp64Reference) {
  const Param& p = GetParam();
  Inputs reference_inputs(p.seed, p.variant.dtype), variant_inputs(p.seed, p.variant.dtype);
  Outputs reference, result;
  p.op->body(kReference, reference_inputs, reference);
  hwy::SetSupportedTargetsForTest(p.variant.simd_target);
  p.op->body(p.variant, variant_inputs, result);
  hwy::SetSupportedTargetsForTest(0);
  ASSERT_FALSE(reference.values.empty());
  for (double x : reference.values) ASSERT_TRUE(std::isfinite(x)) << "the fp64 reference is not finite";
  const double e = nmse(result.values, reference.values);
  std::printf("  %-22s %-60s %-9s nmse %.3g (max %.3g)\n", p.op->op.c_str(), p.op->shape.c_str(),
              p.variant.name().c_str(), e, p.max_nmse);
  EXPECT_LE(e, p.max_nmse) << p.op->op << " " << p.op->shape << " on " << p.variant.name();
}

INSTANTIATE_TEST_SUITE_P(EveryOp, BackendOps, testing::ValuesIn(all_params()), [](const auto& info) {
  std::string name = info.param.op->op + "_" + info.param.op->shape + "_" + info.param.variant.name();
  for (char& ch : name) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
});

// The metric itself: one element off by 1e-2 of the data's scale, among 10⁴, is far above the fp32
// threshold; a rounding to fp32 of every element is far below it; NaN never passes.
TEST(BackendOpsMetric, SeparatesABugFromRounding) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> ref(10000);
  for (double& x : ref) x = normal(rng);
  std::vector<double> rounded(ref.begin(), ref.end()), wrong = ref, nan = ref;
  for (double& x : rounded) x = static_cast<float>(x);
  wrong[1234] += 1e-2;
  nan[7] = std::nan("");
  EXPECT_LT(nmse(rounded, ref), kF32 / 100);
  EXPECT_GT(nmse(wrong, ref), kF32 * 100);
  EXPECT_EQ(nmse(nan, ref), std::numeric_limits<double>::infinity());
  EXPECT_EQ(nmse(std::vector<double>(9999), ref), std::numeric_limits<double>::infinity());
}

// The training loop's resume test needs bit-identical steps; element-wise ops, row-wise
// reductions and attention must also give the same bits whatever the thread count.
TEST(BackendOpsThreads, Fp32ResultsDoNotDependOnTheThreadCount) {
  using ops_testing::random_vec, ops_testing::to_f32;
  std::mt19937_64 rng(25);
  const int64_t N = 256, C = 384, V = 97;
  const auto x = to_f32(random_vec(rng, N * C)), dy = to_f32(random_vec(rng, N * C)),
             w = to_f32(random_vec(rng, C, 0.3, 1.0)), logits = to_f32(random_vec(rng, N * V, 2.0));
  std::vector<int64_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 5 == 0 ? -100 : (i * 7) % V;
  // The second attention's later blocks (64 rows over 256 keys or more) run on oneDNN's sgemm.
  const ops::AttentionShape shapes[] = {{2, 64, 3, 16, true}, {1, 320, 2, 64, true}};
  std::vector<std::vector<float>> attention_inputs;  // q, k, v, da of each shape
  for (const ops::AttentionShape& shape : shapes) {
    for (int i = 0; i < 4; ++i) attention_inputs.push_back(to_f32(random_vec(rng, shape.B * shape.T * shape.H * shape.D)));
  }
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<std::vector<float>> r;
    std::vector<float> y(N * C), dx(N * C, 0.0f), mean(N), rstd(N), dw(C, 0.0f), db(C, 0.0f);
    ops::gelu_forward(y.data(), x.data(), N * C);
    ops::gelu_backward(dx.data(), x.data(), dy.data(), N * C);
    r.push_back(y);
    r.push_back(dx);
    ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), N, C, 1e-5);
    ops::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                            N, C);
    r.insert(r.end(), {y, dx, dw, db});
    std::vector<float> dwl(C * C, 0.0f), dbl(C, 0.0f);
    ops::linear_backward<float>(nullptr, dwl.data(), dbl.data(), dy.data(), x.data(), nullptr, N, C, C);
    r.push_back(dbl);
    std::vector<float> probs(N * V);
    int64_t counted = 0;
    const double ce = ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V, -100, &counted);
    std::vector<float> ce_bits(2);
    std::memcpy(ce_bits.data(), &ce, sizeof ce);  // compared bit for bit
    r.push_back(ce_bits);
    r.push_back(probs);
    for (size_t a = 0; a < std::size(shapes); ++a) {
      const ops::AttentionShape& shape = shapes[a];
      const std::vector<float>* in = &attention_inputs[4 * a];  // q, k, v, da
      const int64_t na = shape.B * shape.T * shape.H * shape.D;
      std::vector<float> out(na), att(shape.B * shape.H * shape.T * shape.T), dq(na, 0.0f), dk(na, 0.0f), dv(na, 0.0f);
      ops::attention_forward(out.data(), att.data(), in[0].data(), in[1].data(), in[2].data(), nullptr, shape);
      ops::attention_backward(dq.data(), dk.data(), dv.data(), in[3].data(), att.data(), in[0].data(), in[1].data(),
                              in[2].data(), nullptr, shape);
      r.insert(r.end(), {out, att, dq, dk, dv});
    }
    omp_set_num_threads(saved);
    return r;
  };
  const auto one = run(1), several = run(3);
  ASSERT_EQ(one.size(), several.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], several[i]) << "result " << i;
}

}  // namespace
