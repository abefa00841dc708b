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

#include "cli.h"

namespace {

// OpenMP workers that wait for the next parallel region spin (libgomp: 300,000 turns, about a
// millisecond) before they sleep. On a machine whose cores are all ours that is fastest, but when another
// process holds a core the spinning workers take the time slices the working ones need, and 2 threads
// ran slower than 1 (docs/perf.md, "Threads that share the machine"). A short spin keeps most of the
// fast hand-off of small regions (librope's decode calls) and sleeps before it starves anyone.
// libgomp reads its environment when it is loaded, before main, so the default is set by executing
// the program once more with it; OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment win.
constexpr const char* kDefaultSpinCount = "1000";

void apply_default_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("GOMP_SPINCOUNT", kDefaultSpinCount, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then the runtime's own default stays
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace

int main(int argc, char** argv) {
  apply_default_wait_policy(argv);
  return roformer::run_command_line(argc, argv);
}
