// libFuzzer target: io::SafeTensors (safetensors.h) on arbitrary bytes. Contract: any input either
// loads or throws io::Error; a loaded store's tensors lie inside the file (every byte is read, under
// ASan, through the heap copy of the pipe variant), their sizes agree with dtype and shape, and the
// fp32 / int64 accessors either convert or throw io::Error. The memory-mapped (memfd) and the
// read-into-memory (pipe) paths must agree, and the Hugging Face legacy renames must not crash.
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "fuzz_common.h"
#include "io/safetensors.h"

namespace {

struct Summary {
  bool ok = false;
  std::map<std::string, std::tuple<io::DType, std::vector<int64_t>, size_t, uint64_t>> tensors;
  std::map<std::string, std::string> metadata;
};

Summary parse(const std::string& path, io::Names names) {
  Summary s;
  try {
    io::SafeTensors st(path, names);
    for (const auto& [name, t] : st.tensors()) {
      FUZZ_CHECK(t.numel() >= 0, name);
      FUZZ_CHECK(static_cast<uint64_t>(t.numel()) * io::dtype_size(t.dtype) == t.bytes, name);
      FUZZ_CHECK(t.bytes == 0 || t.data != nullptr, name);
      FUZZ_CHECK(st.contains(name) && &st.at(name) == &t, name);
      const uint64_t h = fuzz::fnv1a(t.data, t.bytes);  // touches every byte of the tensor
      s.tensors.emplace(name, std::make_tuple(t.dtype, t.shape, t.bytes, h));
      try {
        if (t.dtype == io::DType::F32 || t.dtype == io::DType::F16 || t.dtype == io::DType::BF16) {
          FUZZ_CHECK(st.f32(name, t.shape).size() == static_cast<size_t>(t.numel()), name);
        } else if (t.dtype == io::DType::I64) {
          FUZZ_CHECK(st.i64(name, t.shape).size() == static_cast<size_t>(t.numel()), name);
        } else {
          (void)st.f32(name);  // other dtypes: io::Error
          fuzz::finding("f32() of a " + std::string(io::dtype_name(t.dtype)) + " tensor did not throw");
        }
      } catch (const io::Error&) {
        FUZZ_CHECK(!(t.dtype == io::DType::F32 || t.dtype == io::DType::F16 || t.dtype == io::DType::BF16 ||
                     t.dtype == io::DType::I64),
                   "accessor threw for a convertible tensor " + name);
      }
    }
    const std::vector<std::string> names_sorted = st.names();
    FUZZ_CHECK(names_sorted.size() == st.tensors().size(), "names()");
    s.metadata = st.metadata();
    s.ok = true;
    fuzz::note("accepted: " + std::to_string(s.tensors.size()) + " tensors");
  } catch (const io::Error& e) {
    fuzz::note(std::string("io::Error: ") + e.what());
  } catch (const std::exception& e) {
    fuzz::undocumented("io::SafeTensors", e);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile mem;
  const Summary mapped = parse(mem.write(data, size), io::Names::kAsStored);
  fuzz::PipeFile pipe;
  if (pipe.open(data, size)) {
    const Summary read = parse(pipe.path(), io::Names::kAsStored);
    FUZZ_CHECK(mapped.ok == read.ok, "mapped and read paths disagree on validity");
    FUZZ_CHECK(mapped.tensors == read.tensors && mapped.metadata == read.metadata,
               "mapped and read paths disagree on content");
  }
  const Summary renamed = parse(mem.path(), io::Names::kHfLegacyRenamed);
  if (renamed.ok) FUZZ_CHECK(mapped.ok && renamed.tensors.size() == mapped.tensors.size(), "renames lost a tensor");
  return 0;
}
