// PyTorch checkpoint reader (see torch_bin.h): minizip over the mapped file for the zip format, a
// sequential walk for the legacy format, io::pickle for the pickles, then the tensor views.
#include "torch_bin.h"

#include <unzip.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <new>

#include "pickle.h"

namespace io {
namespace {

// minizip I/O over a byte range, so the archive minizip reads is exactly the mapped file. A read
// past the end reports an error: minizip's UNZ_EOF equals UNZ_OK, so without it a record cut short
// at the end of the file would be read as if its missing bytes were there.
struct MemStream {
  const uint8_t* data;
  uint64_t size, pos;
  bool short_read;
};
voidpf mem_open(voidpf opaque, const void*, int) { return opaque; }
uLong mem_read(voidpf, voidpf stream, void* buf, uLong n) {
  auto* s = static_cast<MemStream*>(stream);
  const uint64_t k = std::min<uint64_t>(n, s->size - s->pos);
  if (k) std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  s->short_read = k < n;
  return static_cast<uLong>(k);
}
uLong mem_write(voidpf, voidpf, const void*, uLong) { return 0; }
ZPOS64_T mem_tell(voidpf, voidpf stream) { return static_cast<MemStream*>(stream)->pos; }
long mem_seek(voidpf, voidpf stream, ZPOS64_T offset, int origin) {
  auto* s = static_cast<MemStream*>(stream);
  const uint64_t base = origin == ZLIB_FILEFUNC_SEEK_SET ? 0 : origin == ZLIB_FILEFUNC_SEEK_CUR ? s->pos : s->size;
  if (offset > s->size || base > s->size - offset) return -1;
  s->pos = base + offset;
  return 0;
}
int mem_close(voidpf, voidpf) { return 0; }
int mem_error(voidpf, voidpf stream) { return static_cast<MemStream*>(stream)->short_read ? 1 : 0; }

struct Member {
  uint64_t compressed, uncompressed, data_offset;
  uLong crc, method;
  unz64_file_pos pos;
};

struct ZipCloser {
  void operator()(void* z) const { unzClose(static_cast<unzFile>(z)); }
};

// The members of a torch.save archive by full name, and the archive folder every name is in
// ("<folder>/", taken from the first member).
struct ZipIndex {
  std::map<std::string, Member> members;
  std::string prefix;
};

// The error for a problem `what` in the checkpoint at `path`.
Error zip_error(const std::string& path, const std::string& what) { return Error(path + ": " + what); }

// Walks the central directory of the archive open in zf (over a file of file_size bytes): every member
// must be in one folder, unencrypted, stored or deflated, inside the file, and appear once.
ZipIndex read_central_directory(unzFile zf, uint64_t file_size, const std::string& path) {
  auto fail = [&](const std::string& what) { return zip_error(path, what); };
  ZipIndex index;
  std::map<std::string, Member>& members = index.members;
  int rc = unzGoToFirstFile(zf);
  while (rc == UNZ_OK) {
    unz_file_info64 info{};
    char name_buf[1024];
    if (unzGetCurrentFileInfo64(zf, &info, name_buf, sizeof name_buf, nullptr, 0, nullptr, 0) != UNZ_OK) {
      throw fail("corrupt zip central directory");
    }
    if (info.size_filename >= sizeof name_buf) throw fail("zip member name longer than 1023 bytes");
    const std::string name(name_buf, info.size_filename);
    if (members.empty()) {
      const size_t slash = name.find('/');
      if (slash == std::string::npos || slash == 0) throw fail("zip member '" + name + "' is not in an archive folder");
      index.prefix = name.substr(0, slash + 1);
    }
    if (info.flag & 1u) throw fail("zip member '" + name + "' is encrypted");
    if (info.compression_method != 0 && info.compression_method != Z_DEFLATED) {
      throw fail("zip member '" + name + "' uses compression method " + std::to_string(info.compression_method) +
                 " (only stored and deflate)");
    }
    Member m{info.compressed_size, info.uncompressed_size, 0, info.crc, info.compression_method, {}};
    if (unzGetFilePos64(zf, &m.pos) != UNZ_OK) throw fail("corrupt zip central directory");
    int method = 0, level = 0;
    if (unzOpenCurrentFile2(zf, &method, &level, 1) != UNZ_OK) {
      throw fail("zip member '" + name + "' has a bad local header");
    }
    m.data_offset = unzGetCurrentFileZStreamPos64(zf);
    unzCloseCurrentFile(zf);
    if (m.data_offset > file_size || m.compressed > file_size - m.data_offset) {
      throw fail("zip member '" + name + "' extends past the end of the file");
    }
    if (!members.emplace(name, m).second) throw fail("zip member '" + name + "' appears twice");
    rc = unzGoToNextFile(zf);
  }
  if (rc != UNZ_END_OF_LIST_OF_FILE) throw fail("corrupt zip central directory");
  if (members.empty()) throw fail("empty zip archive");
  return index;
}

// The bytes of stored member m (named `full`), in place in the mapped file once its CRC checks out.
std::pair<const uint8_t*, size_t> stored_member(const MappedFile& file, const Member& m, const std::string& full,
                                                const std::string& path) {
  if (m.compressed != m.uncompressed) throw zip_error(path, "zip member '" + full + "' is stored but its sizes differ");
  const uint8_t* p = file.data() + m.data_offset;
  if (crc32_z(0, p, m.uncompressed) != m.crc) {
    throw zip_error(path, "zip member '" + full + "' fails its CRC check (corrupt)");
  }
  file.release(p, m.uncompressed);  // checked: its pages come back when a tensor is read
  return {p, m.uncompressed};
}

// Inflates deflated member m (named `full`) of the archive open in zf into a new buffer at the back of
// *owned, checking its size and CRC; returns its bytes.
std::pair<const uint8_t*, size_t> inflate_member(unzFile zf, const Member& m, const std::string& full,
                                                 const std::string& path, std::vector<std::vector<uint8_t>>* owned) {
  auto fail = [&](const std::string& what) { return zip_error(path, what); };
  if (m.uncompressed > 1032 * m.compressed + 1024) {
    throw fail("zip member '" + full + "' claims more bytes than deflate can produce from it");
  }
  try {
    owned->emplace_back(m.uncompressed);
  } catch (const std::bad_alloc&) {
    throw fail("zip member '" + full + "': cannot allocate " + std::to_string(m.uncompressed) + " bytes");
  }
  std::vector<uint8_t>& buf = owned->back();
  if (unzGoToFilePos64(zf, &m.pos) != UNZ_OK || unzOpenCurrentFile(zf) != UNZ_OK) {
    throw fail("zip member '" + full + "' cannot be opened");
  }
  uint64_t got = 0;
  for (;;) {
    const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(buf.size() - got, 1u << 30));
    const int r = unzReadCurrentFile(zf, buf.data() + got, chunk);
    if (r < 0) {
      unzCloseCurrentFile(zf);
      throw fail("zip member '" + full + "' is corrupt (inflate error " + std::to_string(r) + ")");
    }
    if (r == 0) break;
    got += static_cast<unsigned>(r);
  }
  const int close_rc = unzCloseCurrentFile(zf);
  if (got != m.uncompressed) throw fail("zip member '" + full + "' inflates to fewer bytes than it declares");
  if (close_rc == UNZ_CRCERROR) throw fail("zip member '" + full + "' fails its CRC check (corrupt)");
  if (close_rc != UNZ_OK) throw fail("zip member '" + full + "' is corrupt");
  return {buf.data(), buf.size()};
}

// The archive's <prefix>version member (size bytes at data) must be a number in [1, 20].
void check_archive_version(const uint8_t* data, size_t size, const std::string& prefix, const std::string& path) {
  std::string v(reinterpret_cast<const char*>(data), std::min<size_t>(size, 16));
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r' || v.back() == ' ')) v.pop_back();
  if (v.empty() || v.size() > 2 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1 ||
      std::stoi(v) > 20) {
    throw zip_error(path, "unsupported archive version '" + v + "' in '" + prefix + "version'");
  }
}

// Every storage i must hold exactly its declared numel elements: storages[i] is (data, bytes).
void check_storage_sizes(const pickle::StateDict& sd, const std::vector<std::pair<const uint8_t*, size_t>>& storages,
                         const std::string& origin) {
  for (size_t i = 0; i < sd.storages.size(); ++i) {
    const pickle::Storage& s = sd.storages[i];
    const uint64_t want = static_cast<uint64_t>(s.numel) * dtype_size(s.dtype);
    if (storages[i].second != want) {
      throw Error(origin + s.key + ": storage declares " + std::to_string(s.numel) + " " + dtype_name(s.dtype) +
                  " elements (" + std::to_string(want) + " bytes) but holds " + std::to_string(storages[i].second) +
                  " bytes");
    }
  }
}

// Whether the view is row-major contiguous (dimensions of size 1 may have any stride).
bool is_contiguous(const pickle::TensorRef& ref) {
  bool contiguous = true;
  int64_t expect = 1;
  for (size_t k = ref.size.size(); k-- > 0;) {
    if (ref.size[k] != 1 && ref.stride[k] != expect) contiguous = false;
    expect *= ref.size[k];
  }
  return contiguous;
}

// Copies the strided view `ref` of the storage at base (elements of es bytes) row-major into out
// (count elements, count * es bytes): one memcpy per innermost row when it is contiguous, per element
// otherwise.
void gather_view(const pickle::TensorRef& ref, const uint8_t* base, size_t es, size_t count, uint8_t* out) {
  const size_t nd = ref.size.size();
  const int64_t inner = ref.size[nd - 1], inner_stride = ref.stride[nd - 1];
  std::vector<int64_t> idx(nd, 0);
  for (size_t row = 0; row < count / static_cast<size_t>(inner); ++row) {
    int64_t off = ref.offset;
    for (size_t k = 0; k + 1 < nd; ++k) off += idx[k] * ref.stride[k];
    if (inner_stride == 1) {
      std::memcpy(out, base + static_cast<size_t>(off) * es, static_cast<size_t>(inner) * es);
      out += static_cast<size_t>(inner) * es;
    } else {
      for (int64_t j = 0; j < inner; ++j, out += es) {
        std::memcpy(out, base + static_cast<size_t>(off + j * inner_stride) * es, es);
      }
    }
    for (size_t k = nd - 1; k-- > 0;) {
      if (++idx[k] < ref.size[k]) break;
      idx[k] = 0;
    }
  }
}

constexpr uint8_t kLegacyMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
constexpr uint8_t kLegacyProtocol[] = {0x80, 0x02, 0x4d, 0xe9, 0x03, 0x2e};  // 1001

}  // namespace

TorchBin::TorchBin(const std::string& path, Names names) : WeightStore(path), file_(path) {
  const uint8_t* d = file_.data();
  const size_t n = file_.size();
  if (n >= 4 && std::memcmp(d, "PK\x03\x04", 4) == 0) {
    load_zip();
  } else if (n >= sizeof kLegacyMagic && std::memcmp(d, kLegacyMagic, sizeof kLegacyMagic) == 0) {
    legacy_ = true;
    load_legacy();
  } else if (n >= 262 && std::memcmp(d + 257, "ustar", 5) == 0) {
    throw Error(path + ": a tar-format PyTorch checkpoint (PyTorch < 0.4) is not supported; re-save it with a current PyTorch");
  } else {
    throw Error(path + ": not a PyTorch checkpoint (neither a zip archive nor the legacy pickle format)");
  }
  apply_names(names);
}

void TorchBin::load_zip() {
  auto fail = [&](const std::string& what) { return Error(path_ + ": " + what); };
  MemStream ms{file_.data(), file_.size(), 0, false};
  zlib_filefunc64_def funcs{mem_open, mem_read, mem_write, mem_tell, mem_seek, mem_close, mem_error, &ms};
  std::unique_ptr<void, ZipCloser> zip(unzOpen2_64(path_.c_str(), &funcs));
  unzFile zf = static_cast<unzFile>(zip.get());
  if (zf == nullptr) throw fail("not a readable zip archive (truncated or corrupt: no valid central directory)");
  const ZipIndex index = read_central_directory(zf, file_.size(), path_);
  const std::string& prefix = index.prefix;

  // The bytes of member `name` (prefixed): in place when stored, inflated into owned_ otherwise.
  auto bytes_of = [&](const std::string& name) -> std::pair<const uint8_t*, size_t> {
    const std::string full = prefix + name;
    auto it = index.members.find(full);
    if (it == index.members.end()) throw fail("no zip member '" + full + "'");
    const Member& m = it->second;
    if (m.method == 0) return stored_member(file_, m, full, path_);
    return inflate_member(zf, m, full, path_, &owned_);
  };

  const auto [version, version_size] = bytes_of("version");
  check_archive_version(version, version_size, prefix, path_);
  if (index.members.count(prefix + "byteorder")) {
    const auto [order, order_size] = bytes_of("byteorder");
    if (std::string(reinterpret_cast<const char*>(order), order_size) != "little") {
      throw fail("big-endian checkpoints (" + prefix + "byteorder) are not supported");
    }
  }
  const auto [pkl, pkl_size] = bytes_of("data.pkl");
  const std::string origin = path_ + ": " + prefix + "data.pkl";
  const pickle::StateDict sd = pickle::load_state_dict(pkl, pkl_size, origin);
  std::vector<std::pair<const uint8_t*, size_t>> storages;
  for (const pickle::Storage& s : sd.storages) storages.push_back(bytes_of("data/" + s.key));
  add_tensors(sd, storages, path_ + ": " + prefix + "data/");
}

void TorchBin::load_legacy() {
  const uint8_t* d = file_.data();
  const size_t n = file_.size();
  auto fail = [&](const std::string& what) { return Error(path_ + ": " + what); };
  size_t pos = sizeof kLegacyMagic, used = 0;
  if (n - pos < sizeof kLegacyProtocol || std::memcmp(d + pos, kLegacyProtocol, sizeof kLegacyProtocol) != 0) {
    throw fail("legacy checkpoint with an unsupported protocol version");
  }
  pos += sizeof kLegacyProtocol;
  const std::string origin = path_ + ": legacy pickle";
  if (!pickle::load_sys_info_little_endian(d + pos, n - pos, origin, &used)) {
    throw fail("big-endian legacy checkpoints are not supported");
  }
  pos += used;
  const pickle::StateDict sd = pickle::load_state_dict(d + pos, n - pos, origin, &used);
  pos += used;
  const std::vector<std::string> keys = pickle::load_string_list(d + pos, n - pos, origin, &used);
  pos += used;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < sd.storages.size(); ++i) index.emplace(sd.storages[i].key, i);
  std::vector<std::pair<const uint8_t*, size_t>> storages(sd.storages.size(), {nullptr, SIZE_MAX});
  for (const std::string& key : keys) {
    auto it = index.find(key);
    if (it == index.end()) throw fail("legacy storage '" + key + "' is not used by any tensor");
    if (storages[it->second].second != SIZE_MAX) throw fail("legacy storage '" + key + "' is stored twice");
    if (n - pos < 8) throw fail("truncated in legacy storage '" + key + "'");
    int64_t numel;
    std::memcpy(&numel, d + pos, 8);
    pos += 8;
    const pickle::Storage& s = sd.storages[it->second];
    if (numel != s.numel) {
      throw fail("legacy storage '" + key + "' holds " + std::to_string(numel) + " elements but the pickle declares " +
                 std::to_string(s.numel));
    }
    const size_t bytes = static_cast<size_t>(numel) * dtype_size(s.dtype);
    if (bytes > n - pos) throw fail("truncated in legacy storage '" + key + "'");
    storages[it->second] = {d + pos, bytes};
    pos += bytes;
  }
  for (size_t i = 0; i < storages.size(); ++i) {
    if (storages[i].second == SIZE_MAX) throw fail("legacy storage '" + sd.storages[i].key + "' is missing");
  }
  add_tensors(sd, storages, path_ + ": legacy storage ");
}

void TorchBin::add_tensors(const pickle::StateDict& sd, const std::vector<std::pair<const uint8_t*, size_t>>& storages,
                           const std::string& origin) {
  check_storage_sizes(sd, storages, origin);
  for (const auto& [name, ref] : sd.tensors) {
    const pickle::Storage& s = sd.storages[ref.storage];
    const size_t es = dtype_size(s.dtype);
    const uint8_t* base = storages[ref.storage].first;
    unsigned __int128 numel = 1, last = static_cast<unsigned __int128>(ref.offset);
    for (size_t k = 0; k < ref.size.size(); ++k) {
      numel *= static_cast<uint64_t>(ref.size[k]);
      if (numel > (uint64_t{1} << 48)) numel = uint64_t{1} << 49;  // saturate; rejected below
      if (ref.size[k] > 0) last += static_cast<unsigned __int128>(ref.size[k] - 1) * static_cast<uint64_t>(ref.stride[k]);
    }
    Tensor t{s.dtype, ref.size, base, 0};
    if (numel > 0) {
      if (numel > (uint64_t{1} << 48) || last >= static_cast<uint64_t>(s.numel)) {
        std::string shape = shape_str(ref.size), stride = shape_str(ref.stride);
        throw Error(path_ + ": tensor '" + name + "' (size " + shape + ", stride " + stride + ", offset " +
                    std::to_string(ref.offset) + ") reaches past its storage '" + s.key + "' of " +
                    std::to_string(s.numel) + " elements");
      }
      const size_t count = static_cast<size_t>(numel);
      t.bytes = count * es;
      if (is_contiguous(ref)) {
        t.data = base + static_cast<size_t>(ref.offset) * es;
      } else {  // gather row by row into a row-major copy
        // A view may repeat storage elements (stride 0: what torch.save writes for expand()), so its copy
        // can be far larger than the file. Transposed or sliced weights copy at most their storage; allow
        // 4x that (or 64 MiB) and refuse the rest, so a small file cannot demand terabytes.
        const uint64_t storage_bytes = static_cast<uint64_t>(s.numel) * es;
        const uint64_t copy_limit = std::max<uint64_t>(uint64_t{64} << 20, 4 * storage_bytes);
        if (t.bytes > copy_limit) {
          throw Error(path_ + ": tensor '" + name + "' (size " + shape_str(ref.size) + ", stride " +
                      shape_str(ref.stride) + ") is a strided view whose copy needs " + std::to_string(t.bytes) +
                      " bytes from a storage of " + std::to_string(storage_bytes) +
                      " bytes; more than 4x (or 64 MiB) is refused");
        }
        try {
          owned_.emplace_back(t.bytes);
        } catch (const std::bad_alloc&) {
          throw Error(path_ + ": tensor '" + name + "': cannot allocate " + std::to_string(t.bytes) + " bytes");
        }
        t.data = owned_.back().data();
        gather_view(ref, base, es, count, owned_.back().data());
      }
    }
    tensors_.emplace(name, std::move(t));
  }
}

}  // namespace io
