// libFuzzer target: the tokenizers on arbitrary bytes. The first input byte picks the mode, the
// second the options; the rest is the payload:
//   0  HF RoFormerTokenizer (jieba + BERT) with the fixture vocabulary (fuzz/data/roformer-tokenizer,
//      a copy of ../shared/fixtures/roformer-hf/tokenizer): encode / encode_pair of the payload
//      (a 0x1F byte splits a pair) with special tokens, truncation and padding from the option byte;
//   1  the same in BERT mode (tokenizer_class BertTokenizer: no jieba);
//   2  text::CharTokenizer::load of the payload as our tokenizer.json; a tokenizer that loads must save
//      and load back equal, encode any bytes into ids inside its vocabulary, agree with its streaming
//      encode_some over any chunking, decode its ids, and (byte level) decode back the same bytes;
//   3  the payload as tokenizer_config.json beside the fixture vocab.txt (RoFormerTokenizer::load,
//      BERT mode), then encode the payload and a fixed sample.
// Contract: load errors are io::Error; encode throws only std::invalid_argument for options the
// configuration cannot serve (no [CLS]/[SEP]/[PAD]); anything else, or a broken invariant
// (fuzz/encoding_checks.h), is a finding.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "encoding_checks.h"
#include "fuzz_common.h"
#include "io/weights.h"
#include "text/char_tokenizer.h"
#include "text/jieba.h"
#include "text/roformer_tokenizer.h"

#ifndef FUZZ_DATA_DIR
#error "FUZZ_DATA_DIR must name fuzz/data"
#endif

namespace {

namespace fs = std::filesystem;

const char kSample[] = "[CLS] Hello, WORLD! naïve café 今天天气很好，我们去公园。 [MASK] x[SEP]y ÅNGSTRÖM 3.14";

const std::string& fixture_dir() {
  static const std::string dir = std::string(FUZZ_DATA_DIR) + "/roformer-tokenizer";
  return dir;
}

const text::RoFormerTokenizer& fixture(bool jieba) {
  static const text::RoFormerTokenizer with = text::RoFormerTokenizer::load(fixture_dir(), {"", true});
  static const text::RoFormerTokenizer without = text::RoFormerTokenizer::load(fixture_dir(), {"", false});
  return jieba ? with : without;
}

// A private folder (in $TMPDIR, else /dev/shm, else /tmp) holding the fixture vocab.txt and the
// tokenizer_config.json under test; removed at exit (scripts/fuzz.sh also points TMPDIR at its
// scratch folder, which catches what a crashed run leaves).
struct Scratch {
  std::string dir;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = tmp && *tmp ? tmp : fs::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/fuzz-tok-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) fuzz::finding("mkdtemp failed in " + base);
    dir = tmpl;
    fs::copy_file(fixture_dir() + "/vocab.txt", dir + "/vocab.txt");
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const std::string& scratch_dir() {
  static const Scratch s;
  return s.dir;
}

text::EncodeOptions options(uint8_t b) {
  text::EncodeOptions o;
  o.add_special_tokens = (b & 1) == 0;
  static const text::Truncation truncations[] = {text::Truncation::None, text::Truncation::LongestFirst,
                                                 text::Truncation::OnlyFirst, text::Truncation::OnlySecond};
  o.truncation = truncations[(b >> 1) & 3];
  static const text::Padding paddings[] = {text::Padding::None, text::Padding::Longest, text::Padding::MaxLength,
                                           text::Padding::None};
  o.padding = paddings[(b >> 3) & 3];
  static const int64_t lengths[] = {-1, 0, 1, 2, 3, 5, 8, 64};
  o.max_length = lengths[(b >> 5) & 7];
  if (o.padding == text::Padding::MaxLength && o.max_length < 0) o.max_length = 8;  // not the 1e30 default
  return o;
}

void encode_checked(const text::RoFormerTokenizer& tok, std::string_view payload, uint8_t opt) {
  const text::EncodeOptions o = options(opt);
  const size_t split = payload.find('\x1f');
  text::Encoding e;
  try {
    e = split == std::string_view::npos ? tok.encode(payload, o)
                                        : tok.encode_pair(payload.substr(0, split), payload.substr(split + 1), o);
  } catch (const std::invalid_argument& e) {
    fuzz::note(std::string("std::invalid_argument: ") + e.what());
    return;  // documented: options the tokenizer cannot serve
  } catch (const io::Error& e) {
    fuzz::note(std::string("io::Error: ") + e.what());
    return;  // documented: the jieba dictionary (checked present at start-up)
  }
  fuzz::note("encoded: " + e.to_json());
  fuzz::check_encoding(tok, e);
  const int64_t specials = o.add_special_tokens ? (split == std::string_view::npos ? 2 : 3) : 0;
  // HF leaves a single sequence untouched (logging an error) when it is shorter than what must go;
  // that cannot happen once max_length exceeds the special tokens (a pair: reaches them).
  const bool pair = split != std::string_view::npos;
  if (o.truncation == text::Truncation::LongestFirst && o.max_length > 0 &&
      (pair ? o.max_length >= specials : o.max_length > specials)) {
    FUZZ_CHECK(static_cast<int64_t>(e.size()) <= o.max_length,
               "longest_first truncation left " + std::to_string(e.size()) + " tokens");
  }
  if (o.padding == text::Padding::MaxLength && o.max_length > 0 && e.size() > 0) {
    FUZZ_CHECK(static_cast<int64_t>(e.size()) >= o.max_length, "max_length padding too short");
  }
}

void char_tokenizer(const uint8_t* data, size_t size, uint8_t opt) {
  static fuzz::MemFile mem;
  std::unique_ptr<text::CharTokenizer> tok;
  try {
    tok = std::make_unique<text::CharTokenizer>(text::CharTokenizer::load(mem.write(data, size)));
    fuzz::note("text::CharTokenizer accepted: vocabulary " + std::to_string(tok->vocab_size()));
  } catch (const io::Error& e) {
    fuzz::note(std::string("io::Error: ") + e.what());
    return;  // documented
  } catch (const std::exception& e) {
    fuzz::undocumented("text::CharTokenizer::load", e);
  }
  try {
    const std::string json = tok->to_json();
    const text::CharTokenizer again =
        text::CharTokenizer::load(mem.write(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
    FUZZ_CHECK(again == *tok, "save → load changed the tokenizer");
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    const std::vector<int32_t> ids = tok->encode_ids(bytes);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok->vocab_size(), "id outside the vocabulary");
    // Streaming: any chunking gives the same ids.
    const size_t chunk = 1 + (opt & 7);
    std::vector<int32_t> streamed;
    std::string pending;
    for (size_t pos = 0; pos < bytes.size() || !pending.empty();) {
      const size_t take = std::min(chunk, bytes.size() - pos);
      pending.append(bytes.substr(pos, take));
      pos += take;
      const bool at_end = pos == bytes.size();
      const size_t used = tok->encode_some(pending, at_end, SIZE_MAX, &streamed);
      FUZZ_CHECK(used <= pending.size(), "encode_some consumed more than given");
      pending.erase(0, used);
      if (at_end && !pending.empty()) fuzz::finding("encode_some left bytes at the end");
      if (at_end) break;
    }
    FUZZ_CHECK(streamed == ids, "encode_some over chunks of " + std::to_string(chunk) + " differs from encode_ids");
    const std::string decoded = tok->decode_ids(ids);
    if (tok->level() == text::CharTokenizer::Level::Byte) FUZZ_CHECK(decoded == bytes, "byte-level round trip");
  } catch (const std::exception& e) {
    fuzz::undocumented("text::CharTokenizer of a loaded file", e);
  }
}

void tokenizer_config(const uint8_t* data, size_t size) {
  const std::string dir = scratch_dir();
  {
    std::ofstream out(dir + "/tokenizer_config.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) fuzz::finding("cannot write the scratch tokenizer_config.json");
  }
  std::unique_ptr<text::RoFormerTokenizer> tok;
  try {
    text::LoadOptions lo;
    lo.use_jieba = false;  // a jieba tokenizer per input would re-read the 5 MB dictionary each time
    tok = std::make_unique<text::RoFormerTokenizer>(text::RoFormerTokenizer::load(dir, lo));
    fuzz::note("tokenizer_config.json accepted: size " + std::to_string(tok->size()));
  } catch (const io::Error& e) {
    fuzz::note(std::string("io::Error: ") + e.what());
    return;  // documented
  } catch (const std::exception& e) {
    fuzz::undocumented("RoFormerTokenizer::load(tokenizer_config.json)", e);
  }
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  for (uint8_t opt : {uint8_t{0x00}, uint8_t{0x52}, uint8_t{0x33}}) {
    try {
      text::Encoding e = tok->encode(kSample, options(opt));
      fuzz::check_encoding(*tok, e);
      e = tok->encode_pair(payload.substr(0, 512), kSample, options(opt));
      fuzz::check_encoding(*tok, e);
    } catch (const std::invalid_argument& e) {
      fuzz::note(std::string("std::invalid_argument: ") + e.what());
      // documented: a configuration without [CLS]/[SEP]/[PAD] cannot add or pad them
    } catch (const std::exception& e) {
      fuzz::undocumented("RoFormerTokenizer::encode (fuzzed tokenizer_config.json)", e);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dict = text::default_jieba_dict_path();
  if (!fs::exists(dict)) {
    std::fprintf(stderr, "fuzz_tokenizer: the jieba dictionary %s is missing (install python3-jieba or set %s)\n",
                 dict.c_str(), text::kJiebaDictEnv);
    std::exit(1);
  }
  try {
    fixture(true).jieba()->load();  // read once, before the per-input timeout applies
    (void)fixture(false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_tokenizer: cannot load the fixture tokenizer: %s\n", e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0] & 3, opt = data[1];
  const std::string_view payload(reinterpret_cast<const char*>(data + 2), size - 2);
  try {
    switch (mode) {
      case 0:
      case 1:
        encode_checked(fixture(mode == 0), payload, opt);
        break;
      case 2:
        char_tokenizer(data + 2, size - 2, opt);
        break;
      case 3:
        tokenizer_config(data + 2, size - 2);
        break;
    }
  } catch (const std::exception& e) {
    fuzz::undocumented("fuzz_tokenizer", e);
  }
  return 0;
}
