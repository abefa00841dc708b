// roformer._rope: librope's C ABI for Python (nanobind). Arrays are rotated where they lie: no copy, any
// strides whose last (head_dim) stride is 1, dtypes float32, float16, bfloat16 and float64. PyTorch
// tensors are read through their own attributes (data_ptr, shape, stride, dtype); anything else
// (NumPy arrays, any DLPack producer) comes in as nb::ndarray. PyTorch CUDA tensors run on librope's
// CUDA backend, on the current stream of their device, with position arrays (int64 or int32) on the same
// device. A librope error status becomes a ValueError carrying librope's message. The GIL is released
// while librope runs. The Python API over this module is roformer/rope.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "rope/rope.hpp"

namespace nb = nanobind;

namespace {

using Array = nb::ndarray<nb::device::cpu>;
// Position arrays: int64 or int32, C-contiguous, on the CPU or (for CUDA tensors) on their GPU; ids are
// [batch, seq] or [axes, batch, seq], the others 1-D.
using Index = nb::ndarray<nb::c_contig>;

void check(rope_status s) {
  if (s != ROPE_OK) throw nb::value_error(rope_last_error());
}

// A compiled librope plan: the configuration, its frequencies and (for dynamic NTK) a length.
class Plan {
 public:
  Plan(std::optional<std::string> preset, int32_t head_dim, std::optional<int32_t> rot_dim, int32_t rot_offset,
       const std::string& layout, std::optional<double> base, const std::string& scaling, double attention_factor,
       int64_t seq_len, int64_t table_positions) {
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
    if (table_positions > 0) cfg.mode = ROPE_MODE_TABLE, cfg.table_positions = table_positions;
    rope_plan* p = nullptr;
    check(rope_plan_create(&cfg, &p));
    plan_ = std::shared_ptr<rope_plan>(p, rope_plan_destroy);
    if (seq_len > 0) check(rope_plan_set_seq_len(plan_.get(), seq_len));
    head_dim_ = cfg.head_dim;
    rot_dim_ = cfg.rot_dim;
    n_axes_ = cfg.n_axes;
    layout_ = cfg.layout == ROPE_LAYOUT_HALF ? "half" : "interleaved";  // a preset's, when not given
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
  const std::string& layout() const { return layout_; }

 private:
  std::shared_ptr<rope_plan> plan_;
  int32_t head_dim_ = 0, rot_dim_ = 0, n_axes_ = 1;
  std::string layout_;
};

// [batch, seq, heads, dim] or [seq, heads, dim] (batch 1), strides in elements, dim contiguous and equal
// to the plan's head_dim (rope_tensor has no dim: librope reads head_dim elements a head).
rope_tensor describe(const char* name, int32_t head_dim, void* data, rope_dtype dtype, size_t ndim,
                     const int64_t* shape, const int64_t* strides) {
  if (ndim != 3 && ndim != 4) {
    throw nb::value_error((std::string(name) + " must be [batch, seq, heads, dim] or [seq, heads, dim]").c_str());
  }
  const size_t o = ndim == 4 ? 1 : 0;
  const bool empty = shape[0] == 0 || shape[1] == 0 || shape[2] == 0 || (o && shape[3] == 0);
  if (shape[o + 2] != head_dim) {
    throw nb::value_error((std::string(name) + ": the last dimension is " + std::to_string(shape[o + 2]) +
                           ", the configuration's head_dim is " + std::to_string(head_dim)).c_str());
  }
  if (!empty && shape[o + 2] > 1 && strides[o + 2] != 1) {  // an empty array's strides mean nothing
    throw nb::value_error((std::string(name) + ": the last (head_dim) dimension must be contiguous").c_str());
  }
  rope_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.n_batch = o ? shape[0] : 1;
  t.n_tokens = shape[o];
  t.n_heads = shape[o + 1];
  t.token_stride = strides[o];
  t.head_stride = strides[o + 1];
  t.batch_stride = o ? strides[0] : t.n_tokens * t.token_stride;
  return t;
}

[[noreturn]] void bad_dtype(const char* name) {
  throw nb::type_error((std::string(name) + ": the array must be float32, float16, bfloat16 or float64").c_str());
}

// PyTorch's tensor type and dtypes, looked up once torch has been imported (this module never imports
// it). Kept for the life of the process: they must outlive every call, and torch is never unloaded.
struct Torch {
  nb::object tensor, strided, f32, f16, bf16, f64, current_stream;
};

const Torch* torch_if_imported() {
  static const Torch* torch = nullptr;
  if (torch == nullptr) {
    PyObject* module = PyImport_GetModule(nb::str("torch").ptr());  // new reference, or null: not imported
    if (module == nullptr) return nullptr;
    nb::object m = nb::steal(module);
    torch = new Torch{m.attr("Tensor"),  m.attr("strided"),  m.attr("float32"),
                      m.attr("float16"), m.attr("bfloat16"), m.attr("float64"),
                      m.attr("cuda").attr("current_stream")};
  }
  return torch;
}

rope_dtype torch_dtype(const Torch& torch, nb::handle d, const char* name) {
  if (d.is(torch.f32)) return ROPE_DTYPE_F32;
  if (d.is(torch.bf16)) return ROPE_DTYPE_BF16;
  if (d.is(torch.f16)) return ROPE_DTYPE_F16;
  if (d.is(torch.f64)) return ROPE_DTYPE_F64;
  bad_dtype(name);
}

// A torch tensor described from its attributes: about 0.45 µs, where DLPack export costs 0.9 µs.
// *device: -1 for a CPU tensor, the CUDA device index for a GPU one.
rope_tensor torch_tensor(const Torch& torch, nb::handle x, const char* name, int32_t head_dim, int* device) {
  const std::string n(name);
  *device = -1;
  if (nb::cast<bool>(x.attr("is_cuda"))) {
    *device = nb::cast<int>(x.attr("get_device")());
  } else if (!nb::cast<bool>(x.attr("is_cpu"))) {
    throw nb::value_error((n + " must be a CPU or CUDA tensor").c_str());
  }
  if (!x.attr("layout").is(torch.strided)) throw nb::value_error((n + " must be a dense (strided) tensor").c_str());
  if (nb::cast<bool>(x.attr("requires_grad"))) {
    throw nb::value_error((n + " requires grad: roformer.rope records no autograd (use roformer.rope_torch.rope, "
                                "or pass a detached tensor)").c_str());
  }
  const rope_dtype dtype = torch_dtype(torch, x.attr("dtype"), name);
  const nb::tuple shape = nb::borrow<nb::tuple>(x.attr("shape"));  // torch.Size is a tuple
  const nb::tuple stride = nb::borrow<nb::tuple>(x.attr("stride")());
  const size_t ndim = shape.size();
  std::array<int64_t, 4> sizes{}, strides{};
  if (ndim == 3 || ndim == 4) {
    for (size_t i = 0; i < ndim; ++i) sizes[i] = nb::cast<int64_t>(shape[i]), strides[i] = nb::cast<int64_t>(stride[i]);
  }
  void* data = reinterpret_cast<void*>(nb::cast<uintptr_t>(x.attr("data_ptr")()));
  return describe(name, head_dim, data, dtype, ndim, sizes.data(), strides.data());
}

rope_dtype dtype_of(const Array& a, const char* name) {
  const nb::dlpack::dtype d = a.dtype();
  if (d == nb::dtype<float>()) return ROPE_DTYPE_F32;
  if (d == nb::dtype<double>()) return ROPE_DTYPE_F64;
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 16) return ROPE_DTYPE_F16;
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) return ROPE_DTYPE_BF16;
  bad_dtype(name);
}

// An argument's rope_tensor, and the imported ndarray (if any) that keeps its memory borrowed for the call.
struct Operand {
  rope_tensor t{};
  std::optional<Array> array;
  int device = -1;  // CUDA device of a torch CUDA tensor; -1 on the CPU
};

Operand operand_of(nb::handle x, const char* name, int32_t head_dim) {
  Operand r;
  // A type test (subclasses such as nn.Parameter included) rather than isinstance(): no __instancecheck__.
  const Torch* torch = torch_if_imported();
  if (torch != nullptr && PyObject_TypeCheck(x.ptr(), reinterpret_cast<PyTypeObject*>(torch->tensor.ptr()))) {
    r.t = torch_tensor(*torch, x, name, head_dim, &r.device);
    return r;
  }
  r.array.emplace();
  if (!nb::try_cast<Array>(x, *r.array)) {
    throw nb::type_error((std::string(name) + " must be a NumPy array, a PyTorch CPU tensor or a DLPack CPU array").c_str());
  }
  const Array& a = *r.array;
  std::array<int64_t, 4> sizes{}, strides{};
  if (a.ndim() == 3 || a.ndim() == 4) {
    for (size_t i = 0; i < a.ndim(); ++i) sizes[i] = static_cast<int64_t>(a.shape(i)), strides[i] = a.stride(i);
  }
  r.t = describe(name, head_dim, a.data(), dtype_of(a, name), a.ndim(), sizes.data(), strides.data());
  return r;
}

// The positions of a call: offset (start, optional per-batch starts), explicit ids, or packed sequences.
struct Positions {
  rope_positions p{};
  std::optional<Index> starts, cu_seqlens, seq_starts;
  std::optional<Index> ids;
};

// librope reads as many elements of a position array as the call needs (it has no size of its own):
// a shorter one would be read past its end.
template <class A>
void check_size(const std::optional<A>& a, const char* name, int64_t n) {
  if (a && static_cast<int64_t>(a->size()) != n) {
    throw nb::value_error((std::string(name) + " has " + std::to_string(a->size()) + " elements, the call needs " +
                           std::to_string(n)).c_str());
  }
}

// The element type of a call's position arrays (one for all of them), checked against the tensors' device
// (-1: CPU).
rope_index_type index_type_of(const std::optional<Index>* arrays[4], const char* const names[4], int device) {
  std::optional<rope_index_type> type;
  for (int i = 0; i < 4; ++i) {
    if (!*arrays[i]) continue;
    const Index& a = **arrays[i];
    const std::string n(names[i]);
    rope_index_type t;
    if (a.dtype() == nb::dtype<int64_t>()) t = ROPE_INDEX_I64;
    else if (a.dtype() == nb::dtype<int32_t>()) t = ROPE_INDEX_I32;
    else throw nb::type_error((n + " must hold int64 or int32 values").c_str());
    if (type && *type != t) throw nb::type_error("the position arrays of one call must share one dtype (int64 or int32)");
    type = t;
    const bool on_gpu = a.device_type() == nb::device::cuda::value;
    if (device < 0 && a.device_type() != nb::device::cpu::value) {
      throw nb::value_error((n + " must be on the CPU, as the tensors are").c_str());
    }
    if (device >= 0 && (!on_gpu || a.device_id() != device)) {
      throw nb::value_error((n + " must be on the tensors' GPU (cuda:" + std::to_string(device) + ")").c_str());
    }
  }
  return type.value_or(ROPE_INDEX_I64);
}

// x: the rotated tensor (q for apply_qk: k has the same batch and tokens, or librope rejects it); device:
// the tensors' CUDA device, -1 on the CPU.
Positions positions_of(const Plan& plan, const rope_tensor& x, int device, int64_t start, std::optional<Index> starts,
                       std::optional<Index> ids, std::optional<Index> cu_seqlens, std::optional<Index> seq_starts) {
  const std::optional<Index>* arrays[4] = {&starts, &ids, &cu_seqlens, &seq_starts};
  const char* const names[4] = {"positions", "positions", "cu_seqlens", "seq_starts"};
  const rope_index_type index_type = index_type_of(arrays, names, device);
  for (int i = 0; i < 4; ++i) {
    if (*arrays[i] && i != 1 && (*arrays[i])->ndim() != 1) throw nb::value_error((std::string(names[i]) + " must be 1-D").c_str());
  }
  check_size(starts, "positions (one start per batch row)", x.n_batch);
  check_size(ids, "positions", plan.n_axes() * x.n_batch * x.n_tokens);
  if (cu_seqlens) check_size(seq_starts, "seq_starts", static_cast<int64_t>(cu_seqlens->size()) - 1);
  Positions r;
  r.starts = starts, r.ids = ids, r.cu_seqlens = cu_seqlens, r.seq_starts = seq_starts;
  r.p.index_type = index_type;
  const auto data = [](const std::optional<Index>& a) { return a ? static_cast<const int64_t*>(a->data()) : nullptr; };
  if (ids) {
    r.p.kind = ROPE_POSITIONS_IDS;
    r.p.ids = data(ids);
  } else if (cu_seqlens) {
    r.p.kind = ROPE_POSITIONS_VARLEN;
    r.p.cu_seqlens = data(cu_seqlens);
    r.p.n_seqs = static_cast<int64_t>(cu_seqlens->shape(0)) - 1;
    r.p.seq_starts = data(seq_starts);
  } else {
    r.p.kind = ROPE_POSITIONS_OFFSET;
    r.p.start = start;
    r.p.starts = data(starts);
  }
  return r;
}

// The exec of a call: the CPU with `threads`, or the CUDA backend on the current stream of the tensors'
// device (every operand must be on that device).
rope_exec exec_of(std::initializer_list<const Operand*> operands, int32_t threads) {
  const int device = (*operands.begin())->device;
  for (const Operand* o : operands) {
    if (o != nullptr && o->device != device) {
      throw nb::value_error(device < 0 ? "all tensors of a call must be on the CPU, or all on one GPU"
                                       : ("all tensors of a call must be on cuda:" + std::to_string(device)).c_str());
    }
  }
  if (device < 0) return rope_exec{threads, ROPE_BACKEND_AUTO, nullptr};
  const nb::object stream = torch_if_imported()->current_stream(device);
  return rope_exec{0, ROPE_BACKEND_CUDA, reinterpret_cast<void*>(nb::cast<uintptr_t>(stream.attr("cuda_stream")))};
}

// librope rejects empty tensors; like PyTorch's own ops, the binding treats them as nothing to do.
bool is_empty(const rope_tensor& t) { return t.n_batch == 0 || t.n_tokens == 0 || t.n_heads == 0; }

// Runs a librope call with the GIL released and raises its error.
template <class Call>
void run(Call&& call) {
  rope_status s;
  {
    nb::gil_scoped_release release;
    s = call();
  }
  check(s);
}

void apply(const Plan& plan, nb::handle x, nb::handle out, bool backward, bool key, int64_t start,
           std::optional<Index> starts, std::optional<Index> ids, std::optional<Index> cu_seqlens,
           std::optional<Index> seq_starts, int32_t threads) {
  const Operand in = operand_of(x, "x", plan.head_dim());
  std::optional<Operand> dst;
  if (!out.is_none()) dst = operand_of(out, "out", plan.head_dim());
  if (is_empty(in.t)) return;
  const rope_exec exec = exec_of({&in, dst ? &*dst : nullptr}, threads);
  const Positions pos = positions_of(plan, in.t, in.device, start, starts, ids, cu_seqlens, seq_starts);
  run([&] {
    return rope_apply(plan.get(), backward ? ROPE_BACKWARD : ROPE_FORWARD, key ? ROPE_ROLE_KEY : ROPE_ROLE_QUERY,
                      &pos.p, &in.t, dst ? &dst->t : nullptr, &exec);
  });
}

void apply_qk(const Plan& plan, nb::handle q, nb::handle k, nb::handle q_out, nb::handle k_out, bool backward,
              int64_t start, std::optional<Index> starts, std::optional<Index> ids, std::optional<Index> cu_seqlens,
              std::optional<Index> seq_starts, int32_t threads) {
  const Operand tq = operand_of(q, "q", plan.head_dim()), tk = operand_of(k, "k", plan.head_dim());
  std::optional<Operand> oq, ok;
  if (!q_out.is_none()) oq = operand_of(q_out, "q_out", plan.head_dim());
  if (!k_out.is_none()) ok = operand_of(k_out, "k_out", plan.head_dim());
  const rope_exec exec = exec_of({&tq, &tk, oq ? &*oq : nullptr, ok ? &*ok : nullptr}, threads);
  const Positions pos = positions_of(plan, tq.t, tq.device, start, starts, ids, cu_seqlens, seq_starts);
  const rope_direction direction = backward ? ROPE_BACKWARD : ROPE_FORWARD;
  if (is_empty(tq.t) || is_empty(tk.t)) {  // one of them (zero heads) or neither has work: one pass each
    if (!is_empty(tq.t)) {
      run([&] { return rope_apply(plan.get(), direction, ROPE_ROLE_QUERY, &pos.p, &tq.t, oq ? &oq->t : nullptr, &exec); });
    }
    if (!is_empty(tk.t)) {
      run([&] { return rope_apply(plan.get(), direction, ROPE_ROLE_KEY, &pos.p, &tk.t, ok ? &ok->t : nullptr, &exec); });
    }
    return;
  }
  run([&] {
    return rope_apply_qk(plan.get(), direction, &pos.p, &tq.t, oq ? &oq->t : nullptr, &tk.t, ok ? &ok->t : nullptr,
                         &exec);
  });
}

}  // namespace

NB_MODULE(_rope, m) {
  m.doc() = "librope's C ABI (roformer.rope is the Python API over it)";
  // Plans are cached on rope.Config objects, and the configurations of roformer.rope_torch's custom op
  // stay referenced from PyTorch's op registry, which outlives nanobind's leak check at exit.
  nb::set_leak_warnings(false);
  nb::class_<Plan>(m, "Plan")
      .def(nb::init<std::optional<std::string>, int32_t, std::optional<int32_t>, int32_t, const std::string&,
                    std::optional<double>, const std::string&, double, int64_t, int64_t>(),
           nb::arg("preset").none(), nb::arg("head_dim"), nb::arg("rot_dim").none(), nb::arg("rot_offset"),
           nb::arg("layout"), nb::arg("base").none(), nb::arg("scaling"), nb::arg("attention_factor"),
           nb::arg("seq_len"), nb::arg("table_positions"))
      .def("inv_freq", &Plan::inv_freq)
      .def("attention_factor", &Plan::attention_factor)
      .def_prop_ro("head_dim", &Plan::head_dim)
      .def_prop_ro("rot_dim", &Plan::rot_dim)
      .def_prop_ro("n_axes", &Plan::n_axes)
      .def_prop_ro("layout", &Plan::layout);
  m.def("apply", &apply, nb::arg("plan"), nb::arg("x"), nb::arg("out").none(), nb::arg("backward"), nb::arg("key"),
        nb::arg("start"), nb::arg("starts").none(), nb::arg("ids").none(), nb::arg("cu_seqlens").none(),
        nb::arg("seq_starts").none(), nb::arg("threads"));
  m.def("apply_qk", &apply_qk, nb::arg("plan"), nb::arg("q"), nb::arg("k"), nb::arg("q_out").none(),
        nb::arg("k_out").none(), nb::arg("backward"), nb::arg("start"), nb::arg("starts").none(), nb::arg("ids").none(),
        nb::arg("cu_seqlens").none(), nb::arg("seq_starts").none(), nb::arg("threads"));
  m.def("version", &rope_version);
  // "" when librope's CUDA backend can run here, else the reason it cannot.
  m.def("cuda_unavailable_reason", [] { return std::string(rope_cuda_available() == ROPE_OK ? "" : rope_last_error()); });
  // Waits for the current stream of `device`, then raises ValueError if a CUDA call with this plan met a
  // bad position held in a device array since the last check (rope_cuda_check).
  m.def("cuda_check", [](const Plan& plan, int device) {
    const Torch* torch = torch_if_imported();
    if (torch == nullptr) throw nb::value_error("cuda_check needs torch");
    const nb::object stream = torch->current_stream(device);
    void* s = reinterpret_cast<void*>(nb::cast<uintptr_t>(stream.attr("cuda_stream")));
    run([&] { return rope_cuda_check(plan.get(), s); });
  }, nb::arg("plan"), nb::arg("device"));
  m.def("cpu_target", &rope_cpu_target);
}
