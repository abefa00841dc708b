// Our side of the differential tokenizer fuzzer (tests/hf/tokenizer_diff.py, docs/reliability.md):
// encodes texts with text::RoFormerTokenizer, one or more configurations at a time, for the Python
// harness to compare with transformers' slow BertTokenizer / RoFormerTokenizer (and, for the offsets,
// tests/hf/offsets_vs_fast.py with the fast BertTokenizerFast). Not a libFuzzer
// target: a plain program that talks over pipes, built in build/fuzz (scripts/fuzz.sh) and in the
// ctest build (ctest -R hf_tokenizer_diff).
//
//   tokenizer_diff [--jieba-dict PATH] MODE=DIR...   MODE: roformer (jieba) or bert; DIR: vocab.txt + config
//   tokenizer_diff --categories                        utf8proc's general category of every code point
//
// Protocol (stdin → stdout, one reply per request, flushed): a request is the text's byte count in
// decimal, '\n', then the bytes (any bytes: invalid UTF-8 is the tokenizer's to handle). The reply is
// one JSON line (ASCII, \u escapes): {"cps": [code points the text decodes to], "ids": [[ids of
// encode(text), [CLS]/[SEP] included] per MODE=DIR], "tokens": [[their token strings] per MODE=DIR],
// "offsets": [[[start, end] per token] per MODE=DIR]}, or {"error": "what"} when encoding threw.
// A request may instead be one JSON line (starting with '{'): {"text": hex bytes, "pair": hex bytes
// (optional), "truncation": "longest_first" | "only_first" | "only_second", "max_length": N,
// "padding": "longest" | "max_length", "pad_to_multiple_of": N, "truncation_side" / "padding_side":
// "left" | "right", "add_special_tokens": bool} (all but text optional), encoded with encode_pair
// when there is a pair; its reply has ids, tokens, offsets, "type_ids" and "mask" per MODE=DIR. --categories prints "first last Xx" lines, one per run
// of equal category over U+0000..U+10FFFF (the harness keeps out the code points on which Python's
// unicodedata disagrees: a Unicode version skew, not a tokenizer difference).
#include <utf8proc.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "text/roformer_tokenizer.h"

namespace {

int usage() {
  std::cerr << "usage: tokenizer_diff [--jieba-dict PATH] MODE=DIR... (MODE: roformer or bert) | --categories\n";
  return 2;
}

int print_categories() {
  const char* run = nullptr;
  int32_t first = 0;
  for (int32_t c = 0; c <= 0x110000; ++c) {
    const char* cat = c < 0x110000 ? utf8proc_category_string(c) : "";
    if (run == nullptr || std::string(cat) != run) {
      if (run != nullptr) std::printf("%d %d %s\n", first, c - 1, run);
      run = cat;
      first = c;
    }
  }
  return 0;
}

constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

std::string unhex(const std::string& hex) {
  if (hex.size() % 2 != 0) throw std::invalid_argument("odd-length hex text");
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// A JSON request (see the top): every tokenizer's encoding of its text or pair under its options.
nlohmann::json encode_request(const std::vector<text::RoFormerTokenizer>& tokenizers, const nlohmann::json& r) {
  text::EncodeOptions o;
  o.add_special_tokens = r.value("add_special_tokens", true);
  const std::string truncation = r.value("truncation", ""), padding = r.value("padding", "");
  if (truncation == "longest_first") o.truncation = text::Truncation::LongestFirst;
  if (truncation == "only_first") o.truncation = text::Truncation::OnlyFirst;
  if (truncation == "only_second") o.truncation = text::Truncation::OnlySecond;
  if (padding == "longest") o.padding = text::Padding::Longest;
  if (padding == "max_length") o.padding = text::Padding::MaxLength;
  o.max_length = r.value("max_length", int64_t{-1});
  o.pad_to_multiple_of = r.value("pad_to_multiple_of", int64_t{0});
  auto side = [&](const char* key) -> std::optional<text::Side> {
    if (!r.contains(key)) return std::nullopt;
    return r[key] == "left" ? text::Side::Left : text::Side::Right;
  };
  o.truncation_side = side("truncation_side");
  o.padding_side = side("padding_side");
  const std::string first = unhex(r.at("text").get<std::string>());
  nlohmann::json reply;
  for (const char* key : {"ids", "tokens", "offsets", "type_ids", "mask"}) reply[key] = nlohmann::json::array();
  for (const text::RoFormerTokenizer& tok : tokenizers) {
    const text::Encoding e = r.contains("pair") ? tok.encode_pair(first, unhex(r["pair"].get<std::string>()), o)
                                                : tok.encode(first, o);
    reply["ids"].push_back(e.input_ids);
    reply["tokens"].push_back(e.tokens);
    reply["offsets"].push_back(e.offsets);
    reply["type_ids"].push_back(e.token_type_ids);
    reply["mask"].push_back(e.attention_mask);
  }
  return reply;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc == 2 && std::string(argv[1]) == "--categories") return print_categories();
  std::string jieba_dict;
  std::vector<text::RoFormerTokenizer> tokenizers;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--jieba-dict" && i + 1 < argc) {
        jieba_dict = argv[++i];
        continue;
      }
      const size_t eq = arg.find('=');
      if (eq == std::string::npos) return usage();
      const std::string mode = arg.substr(0, eq);
      if (mode != "roformer" && mode != "bert") return usage();
      text::LoadOptions lo;
      lo.jieba_dict = jieba_dict;
      lo.use_jieba = mode == "roformer";
      tokenizers.push_back(text::RoFormerTokenizer::load(arg.substr(eq + 1), lo));
    }
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_diff: " << e.what() << '\n';
    return 1;
  }
  if (tokenizers.empty()) return usage();

  std::string line, text;
  while (std::getline(std::cin, line)) {
    nlohmann::json reply;
    if (!line.empty() && line[0] == '{') {  // an encode request with options
      try {
        std::cout << encode_request(tokenizers, nlohmann::json::parse(line)).dump(-1, ' ', true, kReplace) << '\n';
      } catch (const std::exception& e) {
        std::cout << nlohmann::json{{"error", e.what()}}.dump(-1, ' ', true, kReplace) << '\n';
      }
      std::cout.flush();
      continue;
    }
    size_t n = 0;
    try {
      n = std::stoul(line);
    } catch (const std::exception&) {
      std::cerr << "tokenizer_diff: bad request header '" << line << "' (want a byte count)\n";
      return 1;
    }
    text.resize(n);
    if (!std::cin.read(text.data(), static_cast<std::streamsize>(n))) {
      std::cerr << "tokenizer_diff: the input ended inside a request\n";
      return 1;
    }
    try {
      std::vector<uint32_t> cps;
      for (char32_t c : base::utf8_decode(text)) cps.push_back(c);
      reply["cps"] = cps;
      for (const char* key : {"ids", "tokens", "offsets"}) reply[key] = nlohmann::json::array();
      for (const text::RoFormerTokenizer& tok : tokenizers) {
        const text::Encoding e = tok.encode(text);
        reply["ids"].push_back(e.input_ids);
        reply["tokens"].push_back(e.tokens);
        reply["offsets"].push_back(e.offsets);
      }
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}};
    }
    std::cout << reply.dump(-1, ' ', true, kReplace) << '\n';
    std::cout.flush();
  }
  return 0;
}
