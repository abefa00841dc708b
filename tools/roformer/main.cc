// roformer: the command line of roformer.cpp.
//   roformer rope check        accuracy of librope against a __float128 oracle
//   roformer bench rope        speed of librope against this machine's memory floor
//   roformer bench train|infer|attention|gemm   engine speed (PyTorch peers in bench/peers/)
//   roformer decay             RoPE's long-term decay bound (paper Fig. 2) as PNG/CSV
//   roformer train             train a RoFormer causal or masked LM on a text file
//   roformer eval              validation loss and perplexity of a checkpoint
//   roformer generate          sample from a causal-LM checkpoint
//   roformer finetune          fine-tune a RoFormer into a sequence classifier or regressor
//   roformer translate-train | translate | average
//                              train the encoder-decoder, translate with beam search, average checkpoints
//   roformer bleu              corpus BLEU as sacreBLEU computes it
//   roformer vocab             learn a BERT WordPiece vocabulary
//   roformer spm-train | spm-encode | spm-decode   SentencePiece subwords (translation)
//   roformer quantize          write an int8 copy of a model directory
//   roformer tokenize | fill-mask | embed | similarity | classify | forward
//                              inference on Hugging Face RoFormer model directories
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/process.h"
#include "cli.h"

namespace {

// OpenMP workers that wait for the next parallel region spin (libgomp: 300,000 turns, about a
// millisecond) before they sleep. On a machine whose cores are all ours that is fastest, but when another
// process holds a core the spinning workers take the time slices the working ones need, and 2 threads
// ran slower than 1 (docs/perf.md, "Threads that share the machine"). A short spin keeps most of the
// fast hand-off of small regions (librope's decode calls) and sleeps before it starves anyone.
// OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment win.
constexpr const char* kDefaultSpinCount = "1000";

// Training walks hundreds of MiB of activations each step; on 4 KiB pages the products and element-wise
// passes miss the TLB. glibc's malloc asks for transparent huge pages on what it maps when told so
// (madvise(MADV_HUGEPAGE): the kernel's default "madvise" mode gives them only to those who ask): 1-5%
// faster steps, the same results (docs/perf.md, "How it works"). Training commands only: a server keeps
// 4 KiB pages and no compaction stalls on its page faults. GLIBC_TUNABLES in the environment wins.
constexpr const char* kTrainingTunables = "glibc.malloc.hugetlb=1";

bool is_training(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  return command == "train" || command == "finetune" || command == "translate-train" ||
         (command == "bench" && argc > 2 && std::string(argv[2]) == "train");
}

// libgomp and glibc read their environment when they are loaded, before main, so the defaults are set
// by executing the program once more with them.
void apply_default_environment(int argc, char** argv) {
  std::vector<const char*> set;  // the variables given their default here
  auto set_default = [&](const char* name, const char* value) {
    setenv(name, value, 1);
    set.push_back(name);
  };
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    set_default("GOMP_SPINCOUNT", kDefaultSpinCount);
  }
  if (!std::getenv("GLIBC_TUNABLES") && is_training(argc, argv)) set_default("GLIBC_TUNABLES", kTrainingTunables);
  if (set.empty()) return;
  // Under the dynamic loader (base/process.h) /proc/self/exe is the loader: it is given the program
  // (argv[0]) again, and finds the libraries through LD_LIBRARY_PATH, which execv keeps.
  std::vector<char*> args;
  if (base::started_by_loader()) args.push_back(argv[0]);
  args.insert(args.end(), argv, argv + argc);
  args.push_back(nullptr);
  execv("/proc/self/exe", args.data());  // returns only on failure: then the runtimes' own defaults stay
  for (const char* name : set) unsetenv(name);
}

}  // namespace

int main(int argc, char** argv) {
  apply_default_environment(argc, argv);
  return roformer::run_command_line(argc, argv);
}
