// roformer._rope: librope's C ABI for Python (nanobind). Arrays come in as nb::ndarray (NumPy arrays,
// PyTorch CPU tensors, anything with DLPack) and are rotated where they lie: no copy, any strides
// whose last (head_dim) stride is 1, dtypes float32, float16, bfloat16 and float64. A librope error
// status becomes a ValueError carrying librope's message. The GIL is released while librope runs.
// The Python API over this module is roformer/rope.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "rope/rope.hpp"

namespace nb = nanobind;

namespace {

using Array = nb::ndarray<nb::device::cpu>;
using Index = nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu, nb::c_contig>;
using IndexN = nb::ndarray<const int64_t, nb::device::cpu, nb::c_contig>;  // ids: [batch, seq] or [axes, batch, seq]

void check(rope_status s) {
  if (s != ROPE_OK) throw nb::value_error(rope_last_error());
}

// A compiled librope plan: the configuration, its frequencies and (for dynamic NTK) a length.
class Plan {
 public:
  Plan(std::optional<std::string> preset, int32_t head_dim, std::optional<int32_t> rot_dim, int32_t rot_offset,
       const std::string& layout, std::optional<double> base, const std::string& scaling, double attention_factor,
       int64_t seq_len) {
    rope_config cfg = rope::default_config(head_dim);
    if (preset) {
      static const std::pair<const char*, rope_preset> presets[] = {
          {"roformer", ROPE_PRESET_ROFORMER}, {"gptj", ROPE_PRESET_GPTJ},   {"neox", ROPE_PRESET_NEOX},
          {"llama", ROPE_PRESET_LLAMA},       {"llama3", ROPE_PRESET_LLAMA3}, {"qwen2", ROPE_PRESET_QWEN2},
          {"qwen2_vl", ROPE_PRESET_QWEN2_VL}};
      bool found = false;
      for (const auto& [name, value] : presets) {
        if (*preset == name) check(rope_config_preset(&cfg, value, head_dim)), found = true;
      }
      if (!found) throw nb::value_error(("unknown preset '" + *preset + "'").c_str());
    }
    if (rot_dim) cfg.rot_dim = *rot_dim;
    cfg.rot_offset = rot_offset;
    if (layout == "half") cfg.layout = ROPE_LAYOUT_HALF;
    else if (layout == "interleaved") cfg.layout = ROPE_LAYOUT_INTERLEAVED;
    else if (layout != "preset") throw nb::value_error(("layout must be 'interleaved' or 'half', got '" + layout + "'").c_str());
    if (base) cfg.base = *base;
    if (scaling != "preset") {
      try {
        rope::apply_scaling_spec(scaling, &cfg);
      } catch (const std::invalid_argument& e) {
        throw nb::value_error(e.what());
      }
    }
    if (attention_factor > 0) cfg.scaling.attention_factor = attention_factor;
    rope_plan* p = nullptr;
    check(rope_plan_create(&cfg, &p));
    plan_ = std::shared_ptr<rope_plan>(p, rope_plan_destroy);
    if (seq_len > 0) check(rope_plan_set_seq_len(plan_.get(), seq_len));
    head_dim_ = cfg.head_dim;
    rot_dim_ = cfg.rot_dim;
    n_axes_ = cfg.n_axes;
  }

  std::vector<double> inv_freq() const {
    std::vector<double> f(static_cast<size_t>(rot_dim_ / 2));
    check(rope_plan_inv_freq(plan_.get(), f.data()));
    return f;
  }
  double attention_factor() const {
    double a = 0;
    check(rope_plan_attention_factor(plan_.get(), &a));
    return a;
  }
  const rope_plan* get() const { return plan_.get(); }
  int32_t head_dim() const { return head_dim_; }
  int32_t rot_dim() const { return rot_dim_; }
  int32_t n_axes() const { return n_axes_; }

 private:
  std::shared_ptr<rope_plan> plan_;
  int32_t head_dim_ = 0, rot_dim_ = 0, n_axes_ = 1;
};

rope_dtype dtype_of(const Array& a) {
  const nb::dlpack::dtype d = a.dtype();
  if (d == nb::dtype<float>()) return ROPE_DTYPE_F32;
  if (d == nb::dtype<double>()) return ROPE_DTYPE_F64;
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 16) return ROPE_DTYPE_F16;
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) return ROPE_DTYPE_BF16;
  throw nb::type_error("rope: the array must be float32, float16, bfloat16 or float64");
}

// [batch, seq, heads, dim] or [seq, heads, dim] (batch 1), strides in elements, dim contiguous.
rope_tensor tensor_of(const Array& a, const char* name) {
  if (a.ndim() != 3 && a.ndim() != 4) {
    throw nb::value_error((std::string(name) + " must be [batch, seq, heads, dim] or [seq, heads, dim]").c_str());
  }
  const size_t o = a.ndim() == 4 ? 1 : 0;
  if (a.shape(o + 2) > 1 && a.stride(o + 2) != 1) {
    throw nb::value_error((std::string(name) + ": the last (head_dim) dimension must be contiguous").c_str());
  }
  rope_tensor t{};
  t.data = a.data();
  t.dtype = dtype_of(a);
  t.n_batch = o ? static_cast<int64_t>(a.shape(0)) : 1;
  t.n_tokens = static_cast<int64_t>(a.shape(o));
  t.n_heads = static_cast<int64_t>(a.shape(o + 1));
  t.token_stride = a.stride(o);
  t.head_stride = a.stride(o + 1);
  t.batch_stride = o ? a.stride(0) : t.n_tokens * t.token_stride;
  return t;
}

// The positions of a call: offset (start, optional per-batch starts), explicit ids, or packed sequences.
struct Positions {
  rope_positions p{};
  std::optional<Index> starts, cu_seqlens, seq_starts;
  std::optional<IndexN> ids;
};

Positions positions_of(int64_t start, std::optional<Index> starts, std::optional<IndexN> ids,
                       std::optional<Index> cu_seqlens, std::optional<Index> seq_starts) {
  Positions r;
  r.starts = starts, r.ids = ids, r.cu_seqlens = cu_seqlens, r.seq_starts = seq_starts;
  if (ids) {
    r.p.kind = ROPE_POSITIONS_IDS;
    r.p.ids = ids->data();
  } else if (cu_seqlens) {
    r.p.kind = ROPE_POSITIONS_VARLEN;
    r.p.cu_seqlens = cu_seqlens->data();
    r.p.n_seqs = static_cast<int64_t>(cu_seqlens->shape(0)) - 1;
    r.p.seq_starts = seq_starts ? seq_starts->data() : nullptr;
  } else {
    r.p.kind = ROPE_POSITIONS_OFFSET;
    r.p.start = start;
    r.p.starts = starts ? starts->data() : nullptr;
  }
  return r;
}

void apply(const Plan& plan, Array x, std::optional<Array> out, bool backward, bool key, int64_t start,
           std::optional<Index> starts, std::optional<IndexN> ids, std::optional<Index> cu_seqlens,
           std::optional<Index> seq_starts, int32_t threads) {
  const rope_tensor in = tensor_of(x, "x");
  std::optional<rope_tensor> dst;
  if (out) dst = tensor_of(*out, "out");
  const Positions pos = positions_of(start, starts, ids, cu_seqlens, seq_starts);
  rope_exec exec{threads, ROPE_BACKEND_AUTO};
  rope_status s;
  {
    nb::gil_scoped_release release;
    s = rope_apply(plan.get(), backward ? ROPE_BACKWARD : ROPE_FORWARD, key ? ROPE_ROLE_KEY : ROPE_ROLE_QUERY, &pos.p,
                   &in, dst ? &*dst : nullptr, &exec);
  }
  check(s);
}

void apply_qk(const Plan& plan, Array q, Array k, std::optional<Array> q_out, std::optional<Array> k_out, bool backward,
              int64_t start, std::optional<Index> starts, std::optional<IndexN> ids, std::optional<Index> cu_seqlens,
              std::optional<Index> seq_starts, int32_t threads) {
  const rope_tensor tq = tensor_of(q, "q"), tk = tensor_of(k, "k");
  std::optional<rope_tensor> oq, ok;
  if (q_out) oq = tensor_of(*q_out, "q_out");
  if (k_out) ok = tensor_of(*k_out, "k_out");
  const Positions pos = positions_of(start, starts, ids, cu_seqlens, seq_starts);
  rope_exec exec{threads, ROPE_BACKEND_AUTO};
  rope_status s;
  {
    nb::gil_scoped_release release;
    s = rope_apply_qk(plan.get(), backward ? ROPE_BACKWARD : ROPE_FORWARD, &pos.p, &tq, oq ? &*oq : nullptr, &tk,
                      ok ? &*ok : nullptr, &exec);
  }
  check(s);
}

}  // namespace

NB_MODULE(_rope, m) {
  m.doc() = "librope's C ABI (roformer.rope is the Python API over it)";
  nb::class_<Plan>(m, "Plan")
      .def(nb::init<std::optional<std::string>, int32_t, std::optional<int32_t>, int32_t, const std::string&,
                    std::optional<double>, const std::string&, double, int64_t>(),
           nb::arg("preset").none(), nb::arg("head_dim"), nb::arg("rot_dim").none(), nb::arg("rot_offset"),
           nb::arg("layout"), nb::arg("base").none(), nb::arg("scaling"), nb::arg("attention_factor"),
           nb::arg("seq_len"))
      .def("inv_freq", &Plan::inv_freq)
      .def("attention_factor", &Plan::attention_factor)
      .def_prop_ro("head_dim", &Plan::head_dim)
      .def_prop_ro("rot_dim", &Plan::rot_dim)
      .def_prop_ro("n_axes", &Plan::n_axes);
  m.def("apply", &apply, nb::arg("plan"), nb::arg("x"), nb::arg("out").none(), nb::arg("backward"), nb::arg("key"),
        nb::arg("start"), nb::arg("starts").none(), nb::arg("ids").none(), nb::arg("cu_seqlens").none(),
        nb::arg("seq_starts").none(), nb::arg("threads"));
  m.def("apply_qk", &apply_qk, nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("q_out").none(),
        nb::arg("k_out").none(), nb::arg("backward"), nb::arg("start"), nb::arg("starts").none(), nb::arg("ids").none(),
        nb::arg("cu_seqlens").none(), nb::arg("seq_starts").none(), nb::arg("threads"));
  m.def("version", &rope_version);
  m.def("cpu_target", &rope_cpu_target);
}
