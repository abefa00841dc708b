// libFuzzer target: io::TorchBin (torch_bin.h: the zip format of torch.save through minizip, the
// legacy pre-1.6 format, and io::pickle's restricted unpickler) on arbitrary bytes. Contract: any
// input either loads or throws io::Error; a loaded store's tensors are readable to their last byte
// (ASan-checked through the pipe variant's heap copy), sizes agree with dtype and shape, the fp32 /
// int64 accessors convert or throw io::Error, and the mapped (memfd) and read (pipe) paths agree.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "fuzz_common.h"
#include "io/pickle.h"
#include "io/torch_bin.h"

namespace {

struct Summary {
  bool ok = false, legacy = false;
  std::map<std::string, std::tuple<io::DType, std::vector<int64_t>, size_t, uint64_t>> tensors;
};

bool floating(io::DType d) { return d == io::DType::F32 || d == io::DType::F16 || d == io::DType::BF16; }

Summary parse(const std::string& path, io::Names names) {
  Summary s;
  try {
    io::TorchBin tb(path, names);
    s.legacy = tb.legacy_format();
    for (const auto& [name, t] : tb.tensors()) {
      FUZZ_CHECK(t.numel() >= 0, name);
      FUZZ_CHECK(static_cast<uint64_t>(t.numel()) * io::dtype_size(t.dtype) == t.bytes, name);
      FUZZ_CHECK(t.bytes == 0 || t.data != nullptr, name);
      const uint64_t h = fuzz::fnv1a(t.data, t.bytes);  // touches every byte of the tensor
      s.tensors.emplace(name, std::make_tuple(t.dtype, t.shape, t.bytes, h));
      try {
        if (floating(t.dtype)) {
          FUZZ_CHECK(tb.f32(name, t.shape).size() == static_cast<size_t>(t.numel()), name);
        } else if (t.dtype == io::DType::I64) {
          FUZZ_CHECK(tb.i64(name, t.shape).size() == static_cast<size_t>(t.numel()), name);
        }
      } catch (const io::Error&) {
        fuzz::finding("accessor threw for a convertible tensor " + name);
      }
    }
    s.ok = true;
    fuzz::note(std::string("accepted (") + (s.legacy ? "legacy" : "zip") + "): " + std::to_string(s.tensors.size()) +
               " tensors");
  } catch (const io::Error& e) {
    fuzz::note(std::string("io::Error: ") + e.what());
  } catch (const std::exception& e) {
    fuzz::undocumented("io::TorchBin", e);
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
    FUZZ_CHECK(mapped.legacy == read.legacy && mapped.tensors == read.tensors, "mapped and read paths disagree on content");
  }
  if (mapped.ok) {
    const Summary renamed = parse(mem.path(), io::Names::kHfLegacyRenamed);
    if (renamed.ok) FUZZ_CHECK(renamed.tensors.size() == mapped.tensors.size(), "renames lost a tensor");
  }
  return 0;
}
