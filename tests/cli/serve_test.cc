// The roformer inference subcommands as a user runs them (the binary is ROFORMER_CLI): tokenize gives
// the fixture tokenizer cases' ids through stdin (text lines with CRLF endings) and a JSONL file, and
// with --offsets the encodings' offsets;
// fill-mask, embed, similarity, classify and forward print/write what the library computes; every
// command that runs a model (forward, eval and generate too) takes --quantize and stays close to fp32
// in int8; and every bad input, a bad config.json size field included, ends with exactly one
// "roformer: error: ..." line naming the problem (the file, field or input line) and a non-zero exit
// status.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/safetensors.h"
#include "ops/packed_linear.h"
#include "infer/pipeline.h"
#include "serve_fixtures.h"
#include "text/roformer_tokenizer.h"

namespace {

using namespace serve_fixtures;
using nlohmann::json;

struct Result {
  int status = -1;
  std::string out, err;
  std::vector<json> lines() const {  // stdout as JSONL
    std::vector<json> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) v.push_back(json::parse(line));
    return v;
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `roformer ARGS` with `input` on stdin.
Result run(const std::string& args, const std::string& input = "") {
  static int n = 0;
  const std::string base = temp_dir() + "/cli" + std::to_string(n++);
  std::ofstream(base + ".in", std::ios::binary) << input;
  const std::string cmd = std::string(ROFORMER_CLI) + " " + args + " < " + base + ".in > " + base + ".out 2> " + base + ".err";
  const int raw = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  return r;
}

// A failing run: non-zero status, one stderr line holding every fragment.
void expect_fails(const Result& r, const std::vector<std::string>& fragments) {
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << r.err << "lacks: " << f;
}

// A value the parser refuses: a non-zero status and the parser's message naming the option.
void expect_refused(const Result& r, const std::string& fragment) {
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find(fragment), std::string::npos) << r.err;
}

json cases() { return json::parse(std::ifstream(kFixtures + "/tokenizer/cases.json")); }

json with_specials(const json& c) {
  json tokens = json::array({"[CLS]"});
  for (const auto& t : c["tokens"]) tokens.push_back(t);
  tokens.push_back("[SEP]");
  return tokens;
}

TEST(Cli, TokenizeGivesTheFixtureIdsFromTextLines) {
  std::string input;
  std::vector<json> expected;
  for (const json& c : cases()) {
    const std::string text = c["text"];
    if (text.find_first_of("\r\n") != std::string::npos || text.rfind("{", 0) == 0) continue;  // not one text line
    input += text + "\r\n";
    expected.push_back(c);
  }
  ASSERT_GE(expected.size(), 25u);
  const Result r = run("tokenize --model " + model_dir("m"), input);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), expected.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["input_ids"], expected[i]["input_ids"]) << expected[i]["text"];
    EXPECT_EQ(lines[i]["tokens"], with_specials(expected[i])) << expected[i]["text"];
  }
}

TEST(Cli, TokenizeReadsJsonlFiles) {
  const std::string path = temp_dir() + "/cases.jsonl";
  std::ofstream f(path, std::ios::binary);
  const json all = cases();
  for (const json& c : all) f << json{{"text", c["text"]}}.dump() << "\n";
  f.close();
  const Result r = run("tokenize --input-format jsonl --model " + model_dir("m") + " --input " + path);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = r.lines();
  ASSERT_EQ(lines.size(), all.size());
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["input_ids"], all[i]["input_ids"]) << all[i]["text"];
}

TEST(Cli, TokenizeOffsetsAreTheEncodingsOnlyWhenAsked) {
  const std::string m = model_dir("m");
  const text::RoFormerTokenizer tok = text::RoFormerTokenizer::load(m);
  std::string input;
  std::vector<std::string> texts;
  for (const json& c : cases()) {
    const std::string text = c["text"];
    input += json{{"text", text}}.dump() + "\n";
    texts.push_back(text);
  }
  Result r = run("tokenize --offsets --input-format jsonl --model " + m, input);
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = r.lines();
  ASSERT_EQ(lines.size(), texts.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const text::Encoding e = tok.encode(texts[i]);
    EXPECT_EQ(lines[i]["offsets"], json(e.offsets)) << texts[i];
    EXPECT_EQ(lines[i]["tokens"], json(e.tokens)) << texts[i];
  }
  // Text lines: offsets in the line without its CRLF; without --offsets the lines stay as they were.
  r = run("tokenize --offsets --model " + m, "Hello, world!\r\n你好 hello\n");
  ASSERT_EQ(r.status, 0) << r.err;
  lines = r.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["offsets"], json::parse("[[0,0],[0,5],[5,6],[7,12],[12,13],[0,0]]"));
  EXPECT_EQ(lines[1]["offsets"], json::parse("[[0,0],[0,1],[1,2],[3,8],[0,0]]"));
  r = run("tokenize --model " + m, "Hello, world!\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, tok.encode("Hello, world!").to_json() + "\n");
}

TEST(Cli, FillMaskEmbedSimilarityClassifyAndForwardRun) {
  const std::string m = model_dir("m");
  Result r = run("fill-mask --top-k 3 --batch-size 2 --model " + m, "hello [MASK] world\n[MASK] is a [MASK]\nok [MASK]\n");
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = r.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].size(), 3u);
  EXPECT_TRUE(lines[0][0].contains("sequence"));
  EXPECT_EQ(lines[1].size(), 2u);  // two masks: a list per mask
  EXPECT_EQ(lines[1][1].size(), 3u);

  const std::vector<std::string> texts = {"今天天气非常好。", "hello, world!", "the quick brown fox"};
  r = run("embed --pooling mean --normalize --batch-size 2 --model " + m, texts[0] + "\n" + texts[1] + "\n" + texts[2] + "\n");
  ASSERT_EQ(r.status, 0) << r.err;
  lines = r.lines();
  ASSERT_EQ(lines.size(), 3u);
  auto p = infer::Pipeline::load(m);
  const auto ref = p->embed(texts, {.pooling = infer::Pooling::mean, .normalize = true});
  for (size_t i = 0; i < 3; ++i) {
    const auto e = lines[i]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(e.size(), ref[i].size());
    for (size_t k = 0; k < e.size(); ++k) EXPECT_NEAR(e[k], ref[i][k], 1e-6);
  }

  r = run("similarity --model " + m, texts[0] + "\t" + texts[1] + "\n{\"a\": \"ok\", \"b\": \"ok\"}\n");
  ASSERT_EQ(r.status, 0) << r.err;
  lines = r.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NEAR(lines[0]["similarity"].get<double>(), p->similarity({{texts[0], texts[1]}}, {})[0], 1e-6);
  EXPECT_NEAR(lines[1]["similarity"].get<double>(), 1.0, 1e-6);

  const std::string c = classifier_dir("cls", 2, {{"id2label", {{"0", "no"}, {"1", "yes"}}}});
  r = run("classify --model " + c, "hello\n今天\n");
  ASSERT_EQ(r.status, 0) << r.err;
  lines = r.lines();
  ASSERT_EQ(lines.size(), 2u);
  const auto cls = infer::Pipeline::load(c)->classify({"hello", "今天"});
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(lines[i]["label"], cls[i].label);
    EXPECT_NEAR(lines[i]["score"].get<double>(), cls[i].score, 1e-6);
    EXPECT_EQ(lines[i]["probabilities"].size(), 2u);
  }

  const std::string fixture = kFixtures + "/case2_embproj_rotary_value", out = temp_dir() + "/fwd.safetensors";
  r = run("forward --model " + fixture + " --inputs " + fixture + "/io.safetensors --out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  const io::SafeTensors o(out);
  EXPECT_EQ(o.at("hidden_states").shape, (std::vector<int64_t>{3, 2, 16, 64}));
  EXPECT_EQ(o.at("logits").shape, (std::vector<int64_t>{2, 16, 129}));
}

// --gemm packed (oneDNN, weights packed at load) gives OpenBLAS's embeddings to fp32 rounding, and
// --quantize int8 stays close to them (the fixture encoder: hidden 64, random weights); bad values of
// either are refused by the parser.
TEST(Cli, PackedAndInt8LinearLayersAgreeWithOpenBlas) {
  const std::string m = model_dir("m");
  const std::string texts = "今天天气非常好。\nhello, world!\nthe quick brown fox jumps over the lazy dog\n";
  auto embeddings = [&](const std::string& flags) {
    const Result r = run("embed --pooling mean --model " + m + " " + flags, texts);
    EXPECT_EQ(r.status, 0) << r.err;
    std::vector<std::vector<float>> e;
    for (const json& line : r.lines()) e.push_back(line["embedding"].get<std::vector<float>>());
    return e;
  };
  const auto blas = embeddings("--gemm blas"), packed = embeddings("--gemm packed"),
             int8 = embeddings("--quantize int8");
  ASSERT_EQ(blas.size(), 3u);
  ASSERT_EQ(packed.size(), 3u);
  ASSERT_EQ(int8.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    double dot = 0, a2 = 0, b2 = 0, worst = 0, scale = 0;
    for (size_t k = 0; k < blas[i].size(); ++k) {
      worst = std::max(worst, std::fabs(double(packed[i][k]) - blas[i][k]));
      scale = std::max(scale, std::fabs(double(blas[i][k])));
      dot += double(int8[i][k]) * blas[i][k], a2 += double(int8[i][k]) * int8[i][k], b2 += double(blas[i][k]) * blas[i][k];
    }
    EXPECT_LE(worst, 1e-5 * scale) << "text " << i;
    EXPECT_GE(dot / std::sqrt(a2 * b2), 0.99) << "text " << i;
  }
  EXPECT_NE(run("embed --quantize int4 --model " + m, "x\n").status, 0);
  EXPECT_NE(run("embed --gemm mkl --model " + m, "x\n").status, 0);
}

// --quantize bf16 keeps the embeddings' cosine ≥ 0.99 to fp32 where the CPU multiplies bf16 natively,
// and elsewhere is one error line that names what is missing.
TEST(Cli, Bf16LinearLayersStayCloseToFp32OrAreRefusedClearly) {
  const std::string m = model_dir("m");
  const std::string texts = "今天天气非常好。\nhello, world!\n";
  const Result bf16 = run("embed --pooling mean --quantize bf16 --model " + m, texts);
  if (!ops::bf16_is_native()) {
    EXPECT_NE(bf16.status, 0);
    EXPECT_NE(bf16.err.find("--quantize bf16: this CPU has no native bf16"), std::string::npos) << bf16.err;
    EXPECT_EQ(std::count(bf16.err.begin(), bf16.err.end(), '\n'), 1) << bf16.err;
    return;
  }
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  const Result fp32 = run("embed --pooling mean --gemm blas --model " + m, texts);
  ASSERT_EQ(fp32.status, 0) << fp32.err;
  const auto a = bf16.lines(), b = fp32.lines();
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto x = a[i]["embedding"].get<std::vector<double>>(), y = b[i]["embedding"].get<std::vector<double>>();
    double dot = 0, x2 = 0, y2 = 0;
    for (size_t k = 0; k < x.size(); ++k) dot += x[k] * y[k], x2 += x[k] * x[k], y2 += y[k] * y[k];
    EXPECT_GE(dot / std::sqrt(x2 * y2), 0.99) << "text " << i;
    EXPECT_NE(x, y) << "text " << i;  // it did run in bf16
  }
}

// `roformer quantize` writes the packed layers as I8 with row scales and copies the rest; the copy
// serves in int8 without flags (--quantize auto), as the original does with --quantize int8, and
// dequantised with --quantize none.
TEST(Cli, QuantizeWritesAnInt8DirectoryThatServesInInt8) {
  const std::string m = model_dir("m"), out = temp_dir() + "/quantized";
  Result r = run("quantize --model " + m + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("linear weights in int8"), std::string::npos) << r.out;
  const io::SafeTensors st(out + "/model.safetensors");
  EXPECT_TRUE(st.has_int8_tensors());
  EXPECT_EQ(st.at("roformer.encoder.layer.0.attention.self.query.weight").dtype, io::DType::I8);
  EXPECT_EQ(st.at("roformer.embeddings.word_embeddings.weight").dtype, io::DType::F32);
  EXPECT_TRUE(std::filesystem::exists(out + "/vocab.txt"));
  const std::string texts = "hello, world!\n今天天气非常好。\n";
  auto embeddings = [&](const std::string& args) {
    const Result e = run("embed --pooling mean " + args, texts);
    EXPECT_EQ(e.status, 0) << e.err;
    std::vector<std::vector<float>> v;
    for (const json& line : e.lines()) v.push_back(line["embedding"].get<std::vector<float>>());
    return v;
  };
  const auto original = embeddings("--quantize int8 --model " + m), served = embeddings("--model " + out),
             fp32 = embeddings("--quantize none --model " + m), dequantised = embeddings("--quantize none --model " + out);
  ASSERT_EQ(served.size(), 2u);
  auto cosine = [](const std::vector<float>& a, const std::vector<float>& b) {
    double dot = 0, a2 = 0, b2 = 0;
    for (size_t k = 0; k < a.size(); ++k) dot += double(a[k]) * b[k], a2 += double(a[k]) * a[k], b2 += double(b[k]) * b[k];
    return dot / std::sqrt(a2 * b2);
  };
  // The directory stores 8-bit weights (127 levels); CPUs without VNNI products take 7 bits
  // (int8_weight_levels), so serving it there rounds twice where --quantize int8 rounds once: cosine
  // 0.99973–0.99977 on Zen 3, against ≥ 0.9999 where both keep 8 bits.
  const double same_int8 = ops::int8_weight_levels() == 127 ? 0.9999 : 0.999;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_GE(cosine(served[i], original[i]), same_int8) << i << " (" << ops::cpu_isa_name() << ")";
    EXPECT_GE(cosine(dequantised[i], fp32[i]), 0.99) << i;
  }
  expect_fails(run("quantize --model " + temp_dir() + "/absent --out " + out + "2"), {"absent"});
}

// A mistyped command is named, with the nearest command, instead of "A subcommand is required".
TEST(Cli, AMistypedCommandSuggestsTheNearestOne) {
  expect_refused(run("trian --data x"), "'trian' is not a command; did you mean 'train'?");
  expect_refused(run("bench rpoe"), "roformer bench: 'rpoe' is not a command; did you mean 'rope'?");
  const Result far = run("xyzzy");
  expect_refused(far, "'xyzzy' is not a command (roformer --help lists them)");
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
}

// An option that names a choice is parsed once, at the command line: an unknown name is one line that
// names the option and the names it takes.
TEST(Cli, ChoiceOptionsNameTheirValues) {
  const std::string m = model_dir("m");  // --model is resolved (a directory or a cached id) before the others
  expect_refused(run("train --data x --precision bf17"), "--precision: unknown precision 'bf17' (fp32, bf16, auto)");
  expect_refused(run("train --data x --task lm"), "--task: unknown task 'lm' (clm, mlm)");
  expect_refused(run("train --data x --tokenizer bpe"),
                 "--tokenizer: unknown tokenizer 'bpe' (byte, char, wordpiece, sentencepiece)");
  expect_refused(run("train --data x --tokenizer sentencepiece"), "--tokenizer must be char, byte or wordpiece");
  expect_refused(run("finetune --model " + m + " --train t --validation v --task ner"),
                 "--task: unknown task 'ner' (text-classification, token-classification, question-answering, "
                 "multiple-choice)");
  expect_refused(run("translate-train --train t --validation v --precision fp16"), "--precision: unknown precision 'fp16'");
  expect_refused(run("bench train --task seq2seq"), "--task: unknown task 'seq2seq' (clm, mlm)");
  expect_refused(run("serve --model " + m + " --gemm mkl"), "--gemm: unknown gemm 'mkl' (auto, packed, blas)");
}

TEST(Cli, ThreadCountsAndWindowLengthsAreBounded) {
  // --threads 100000 (or OMP_NUM_THREADS=100000) crashed inside the OpenMP runtime; eval --lengths 0
  // divided by zero.
  const std::string m = model_dir("m");
  expect_refused(run("embed --threads 100000 --model " + m, "x\n"), "at most 1024");
  expect_refused(run("embed --threads -1 --model " + m, "x\n"), "--threads");
  setenv("OMP_NUM_THREADS", "100000", 1);
  expect_fails(run("embed --model " + m, "x\n"), {"OMP_NUM_THREADS=100000", "at most 1024"});
  setenv("OMP_NUM_THREADS", "2,100000", 1);
  expect_fails(run("embed --model " + m, "x\n"), {"OMP_NUM_THREADS=2,100000"});
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(run("embed --threads 2 --model " + m, "x\n").status, 0);
  expect_refused(run("eval --model " + m + " --data " + m + "/vocab.txt --lengths 256,0"), "--lengths");
}

TEST(Cli, TruncateLetsTheEncoderCommandsTakeLongInputs) {
  // A review longer than the model used to stop `classify` at its line; --truncate cuts it as the
  // fine-tuning did (transformers' truncation=True).
  const std::string c = classifier_dir("trunc_cls", 2, {{"id2label", {{"0", "no"}, {"1", "yes"}}}});
  std::string review;
  for (int i = 0; i < 100; ++i) review += "good ";
  expect_fails(run("classify --model " + c, review + "\n"), {"<stdin>:1: 402 tokens", "--truncate cuts inputs"});
  const Result cut = run("classify --truncate --model " + c, review + "\n");
  EXPECT_EQ(cut.status, 0) << cut.err;
  const Result shorter = run("classify --truncate --max-length 16 --truncation-side left --model " + c, review + "\n");
  EXPECT_EQ(shorter.status, 0) << shorter.err;
  EXPECT_NE(cut.out, shorter.out);  // 64 against 16 tokens
  for (const char* command : {"embed", "similarity", "fill-mask"}) {
    const std::string input = std::string(command) == "similarity" ? review + "\tok\n" : review + " [MASK]\n";
    const Result r = run(std::string(command) + " --truncate --truncation-side left --model " + model_dir("m"), input);
    EXPECT_EQ(r.status, 0) << command << ": " << r.err;
  }
}

TEST(Cli, BenchSizesAreBoundedByOptionAndByMemory) {
  // bench gemm --rows 0 divided by zero (SIGFPE); --rows -5 and bench attention --lengths 0 or 10^8
  // ended in std::vector or librope errors or std::bad_alloc.
  expect_refused(run("bench gemm --rows 0"), "--rows");
  expect_refused(run("bench gemm --rows -5"), "--rows");
  expect_refused(run("bench attention --lengths 0"), "--lengths");
  expect_fails(run("bench attention --lengths 16777216 --heads 64"),
               {"--lengths 16777216 with --heads 64 and --head-dim 64 needs 2048 GiB, more than this machine's"});
}

TEST(Cli, RealValuedTrainingOptionsAreFinite) {
  // An infinite learning rate or a NaN weight decay trained to NaN and stopped late (status 3); NaN
  // --min-lr, --clip or --temperature were taken silently.
  const std::string m = model_dir("m");
  const std::string train = "train --data " + m + "/vocab.txt --layers 1 --hidden 16 --heads 2 --ff 32 --seq 8 "
                            "--batch 2 --steps 1 --no-progress --out " + temp_dir() + "/finite ";
  for (const char* bad : {"--lr inf", "--lr nan", "--min-lr nan", "--warmup -5", "--clip nan", "--clip inf",
                          "--weight-decay nan", "--temperature nan", "--top-k -1"}) {
    const std::string option = std::string(bad).substr(0, std::string(bad).find(' '));
    expect_refused(run(train + bad), option);
  }
}

TEST(Cli, BadInputsGiveOneErrorLineAndAFailingStatus) {
  const std::string m = model_dir("m");
  expect_fails(run("embed --model " + temp_dir() + "/absent", "x\n"), {"roformer: error:", "absent: no such model directory"});
  expect_fails(run("fill-mask --model " + m, "[MASK] ok\nno mask\n"), {"<stdin>:2:", "no [MASK] token"});
  expect_fails(run("embed --model " + m, "one\ntwo\n{\"text\": \n"), {"<stdin>:3: not valid JSON"});
  expect_fails(run("embed --input-format jsonl --model " + m, "{\"txt\": \"x\"}\n"), {"<stdin>:1: no \"text\" string"});
  expect_fails(run("similarity --model " + m, "no tab here\n"), {"<stdin>:1: no tab"});
  expect_fails(run("classify --model " + m, "x\n"), {"no sequence-classification head"});
  expect_fails(run("tokenize --model " + m + " --input " + temp_dir() + "/nope.txt"), {"nope.txt: cannot open"});
  std::string long_line;
  for (int i = 0; i < 70; ++i) long_line += "a ";
  expect_fails(run("embed --model " + m, "ok\n" + long_line + "\n"),
               {"<stdin>:2: 72 tokens", "max_position_embeddings (64)"});
  // A record has a bound: 3 MiB without a line break is refused at the bound, not tokenized for minutes.
  expect_fails(run("embed --model " + m, "ok\n" + std::string(3 << 20, 'a')),
               {"<stdin>:2: a line of", "beyond the 1 MiB one record (one input) may have"});
  expect_fails(run("forward --model " + m + " --inputs " + temp_dir() + "/none.safetensors --out " + temp_dir() + "/x"),
               {"none.safetensors"});
  // A config.json that asks for an absurd size, or sizes its weights do not have, is named with the
  // field before anything is allocated.
  auto edited = [&](const std::string& name, const json& change) {
    const std::string dir = model_dir(name);
    json cfg = json::parse(std::ifstream(dir + "/config.json"));
    cfg.update(change);
    std::ofstream(dir + "/config.json") << cfg.dump(2);
    return dir;
  };
  expect_fails(run("embed --model " + edited("huge", {{"intermediate_size", 4000000000LL}}), "x\n"),
               {"config.json", "intermediate_size 4000000000 is beyond the supported"});
  expect_fails(run("embed --model " + edited("wide", {{"intermediate_size", 64}}), "x\n"),
               {"config.json: intermediate_size 64 does not match the checkpoint", "intermediate.dense.weight",
                "model.safetensors"});
  EXPECT_NE(run("embed --batch-size 0 --model " + m, "x\n").status, 0);
  EXPECT_NE(run("embed --pooling splade --model " + m, "x\n").status, 0);
}

// forward --quantize int8 writes every hidden state within cosine 0.99 of fp32 (OpenBLAS), and
// refuses a value it does not know.
TEST(Cli, ForwardTakesQuantize) {
  const std::string fixture = kFixtures + "/case1_mlm_basic", out = temp_dir() + "/fwd";
  auto last_hidden = [&](const std::string& flags, const std::string& name) {
    const Result r = run("forward --model " + fixture + " --inputs " + fixture + "/io.safetensors --out " + out + name +
                         " " + flags);
    EXPECT_EQ(r.status, 0) << r.err;
    const io::SafeTensors o(out + name);
    return o.f32("last_hidden_state");
  };
  const std::vector<float> fp32 = last_hidden("--quantize none --gemm blas", "32"), int8 = last_hidden("--quantize int8", "8");
  ASSERT_EQ(fp32.size(), int8.size());
  const int64_t H = 64;
  for (size_t t = 0; t < fp32.size() / H; ++t) {  // every token (padding included)
    double dot = 0, a2 = 0, b2 = 0;
    for (int64_t h = 0; h < H; ++h) {
      const double a = int8[t * H + h], b = fp32[t * H + h];
      dot += a * b, a2 += a * a, b2 += b * b;
    }
    EXPECT_GE(dot / std::sqrt(a2 * b2), 0.99) << "token " << t;
  }
  EXPECT_NE(fp32, int8);  // it did run in int8
  expect_refused(run("forward --quantize int4 --model " + fixture + " --inputs " + fixture + "/io.safetensors --out " + out),
                 "--quantize: unknown quantize 'int4' (auto, none, int8, bf16)");
}

// A small character-level causal LM, trained once per process (about 10 s on 2 cores) on a
// repetitive text, so that its greedy continuations are confident.
std::string causal_lm() {
  static const std::string dir = [] {
    const std::string corpus = temp_dir() + "/lm.txt";
    std::ofstream f(corpus);
    const char* words[] = {"the river", "a stone", "the old road", "light", "the garden", "a quiet city"};
    for (int i = 0; i < 3000; ++i) f << words[i % 6] << " runs to " << words[(i * 7 + 3) % 6] << ".\n";
    f.close();
    const std::string out = temp_dir() + "/lm";
    const Result r = run("train --data " + corpus + " --out " + out + " --layers 2 --hidden 64 --heads 4 --ff 128 "
                         "--max-positions 64 --seq 48 --batch 16 --steps 150 --lr 3e-3 --warmup 10 --eval-every 0 "
                         "--save-every 0 --sample-tokens 0 --no-progress --threads 2");
    EXPECT_EQ(r.status, 0) << r.err;
    std::string latest = slurp(out + "/latest");
    latest.erase(latest.find_last_not_of(" \n") + 1);
    return out + "/" + latest;
  }();
  return dir;
}

// eval and generate run packed like the other inference commands (model::prepare_for_inference):
// --quantize int8 keeps the validation loss within 0.01 nats/token of fp32 (measured: 1e-4) and greedy
// generation's first 24 characters, bf16 (where native) the same; bad values are refused, and bf16
// on a CPU held to AVX2 (ONEDNN_MAX_CPU_ISA) is the one-line refusal of the packing step.
TEST(Cli, EvalAndGenerateTakeQuantizeAndStayCloseToFp32) {
  const std::string m = causal_lm(), data = temp_dir() + "/lm.txt";
  auto loss = [&](const std::string& flags) {
    const Result r = run("eval --model " + m + " --data " + data + " --seq 48 --max-batches 4 " + flags);
    EXPECT_EQ(r.status, 0) << r.err;
    const size_t at = r.out.find("validation loss ");
    EXPECT_NE(at, std::string::npos) << r.out;
    return at == std::string::npos ? NAN : std::stod(r.out.substr(at + 16));
  };
  auto greedy = [&](const std::string& flags) {
    const Result r = run("generate --model " + m + " --prompt 'the river runs' --tokens 40 --temperature 0 " + flags);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  };
  const double fp32 = loss("--quantize none --gemm blas");
  const std::string reference = greedy("--quantize none --gemm blas");
  ASSERT_GE(reference.size(), 14u + 24u);
  EXPECT_LT(fp32, 1.5);  // it did learn the text
  std::vector<std::string> reduced = {"int8"};
  if (ops::bf16_is_native()) reduced.push_back("bf16");
  for (const std::string& q : reduced) {
    EXPECT_NEAR(loss("--quantize " + q), fp32, 0.01) << q;
    EXPECT_EQ(greedy("--quantize " + q).substr(0, 14 + 24), reference.substr(0, 14 + 24)) << q;
  }
  EXPECT_NEAR(loss("--gemm packed"), fp32, 1e-4);
  expect_refused(run("generate --quantize int4 --model " + m), "--quantize: unknown quantize 'int4' (auto, none, int8, bf16)");
  expect_refused(run("eval --gemm mkl --model " + m + " --data " + data), "--gemm: unknown gemm 'mkl' (auto, packed, blas)");
  setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  for (const std::string& command : {"generate --model " + m, "eval --model " + m + " --data " + data}) {
    expect_fails(run(command + " --quantize bf16"), {"--quantize bf16: this CPU has no native bf16"});
  }
  unsetenv("ONEDNN_MAX_CPU_ISA");
}

// Every size field of config.json is checked against its bound and against the checkpoint's tensors
// before anything is allocated: one error line naming the file and the field, non-zero status.
TEST(Cli, BadConfigSizeFieldsAreNamedBeforeAllocation) {
  int n = 0;
  auto edited = [&](const json& change, const std::string& fixture_case = "case1_mlm_basic") {
    const std::string dir = model_dir("config" + std::to_string(n++), fixture_case);
    json cfg = json::parse(std::ifstream(dir + "/config.json"));
    cfg.update(change);
    std::ofstream(dir + "/config.json") << cfg.dump(2);
    return dir;
  };
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"num_hidden_layers", 5}}, "num_hidden_layers 5 does not match the checkpoint"},
      {{{"num_hidden_layers", 1}}, "num_hidden_layers 1 does not match the checkpoint"},
      {{{"num_hidden_layers", 1000}}, "num_hidden_layers 1000 does not match the checkpoint"},
      {{{"hidden_size", 128}}, "hidden_size 128 does not match the checkpoint"},
      {{{"vocab_size", 4000}}, "vocab_size 4000 does not match the checkpoint"},
      {{{"type_vocab_size", 3}}, "type_vocab_size 3 does not match the checkpoint"},
      {{{"embedding_size", 32}}, "embedding_size 32 does not match the checkpoint"},
      {{{"intermediate_size", 262144}}, "intermediate_size 262144 does not match the checkpoint"},
      {{{"max_position_embeddings", 16777216}}, "max_position_embeddings 16777216 does not match the checkpoint"},
      {{{"num_attention_heads", 8}}, "num_attention_heads 8 does not match the checkpoint"},
      {{{"num_attention_heads", 128}}, "num_attention_heads 128 is beyond the supported"},
      {{{"position_encoding", "learned"}}, "(check position_encoding)"},
      {{{"vocab_size", 4000000000LL}}, "vocab_size 4000000000 is beyond the supported"},
      {{{"max_position_embeddings", 1LL << 40}}, "max_position_embeddings 1099511627776 is beyond the supported"},
      {{{"hidden_size", 0}}, "hidden_size must be positive"},
      {{{"attention_type", "performer"}, {"performer_features", 3}}, "performer_features must be even"},
      {{{"architectures", {"RoFormerForSequenceClassification"}}, {"num_labels", 1LL << 40}}, "'num_labels' must be an integer in [1, 65536]"},
      {{{"architectures", {"RoFormerForSequenceClassification"}}, {"num_labels", 3}, {"id2label", {{"0", "a"}, {"1", "b"}}}},
       "'num_labels' is 3 but 'id2label' has 2 labels"},
  };
  for (const auto& [change, field] : cases) {
    const std::string dir = edited(change);
    expect_fails(run("embed --model " + dir, "x\n"), {"roformer: error: " + dir + "/config.json", field});
  }
  // The classifier head's rows against num_labels.
  const std::string c = classifier_dir("labels3", 3, {{"num_labels", 5}});
  expect_fails(run("classify --model " + c, "x\n"), {c + "/config.json: num_labels 5 does not match", "classifier.out_proj.weight is [3, 64]"});
}

}  // namespace
