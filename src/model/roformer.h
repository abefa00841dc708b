// The RoFormer encoder models, composed from the blocks of blocks.h: embeddings → L × layer_forward
// (layer.h: self-attention, feed-forward) → heads (MLM, RoFormer-Sim's pooler). The masked LM
// (RoFormerForMaskedLM), the causal LM (is_decoder: causal mask, next-token targets), RoFormer-V2 (RMS
// norms, tied-only head) and RoFormer-Sim (UniLM mask, pooler) are the same composition with different
// configs. A decoder with add_cross_attention (the decoder of an encoder-decoder, seq2seq.h) also
// attends over a memory (set_memory) in every layer. llm.c style: parameters and gradients are arenas
// (params.h), activations are kept for the backward.
//
// Templated on float (the engine) and double (whole-model gradient checks). Shapes: B batch,
// T tokens, N = B·T, E embedding size, H hidden size, V vocabulary, L layers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/weights.h"
#include "rope/rope.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/head.h"
#include "model/layer.h"
#include "model/params.h"

namespace model {

// One batch; every array is (B, T) row-major.
struct Inputs {
  const int64_t* ids = nullptr;
  const int64_t* token_types = nullptr;     // null: all type 0
  const int64_t* attention_mask = nullptr;  // 1 real, 0 padding; null: all real
  const int64_t* targets = nullptr;         // null: no loss; kIgnoreIndex entries are not counted
  int64_t B = 0, T = 0;
  // Global index of row 0 in the whole batch (across micro-batches and processes): dropout masks are
  // keyed by global row, so a row trains the same however the batch is split.
  int64_t row0 = 0;
  // false: the forward stops before the MLM head, and logits() is null after it. Embeddings and
  // classification read the hidden states only; a server that also fills masks keeps the head loaded.
  bool logits = true;
  // With logits: only these rows of the flattened (B·T) batch, in this order, go through the MLM head,
  // and logits() is (logit_row_count, V): fill-mask's masked positions of a long document, instead of
  // B·T·V logits. Null: every row. Not with targets.
  const int64_t* logit_rows = nullptr;
  int64_t logit_row_count = 0;
};

// What a forward keeps (default: backward). all: every activation, for backward() and the per-layer views
// (hidden_state(l) of every layer, attention(l)); softmax attention keeps its probabilities
// (B, n, T, T), memory quadratic in T. backward: the same, except that softmax attention over more
// keys than max_kept_keys() keeps two statistics per query row instead, and the backward recomputes
// the probabilities from them (ops::AttentionSaved::row_stats; fp32 and bf16 in the fused kernels of
// ops/flash_attention.h, fp64 bit for bit): memory linear in T, at the price of one more q·kᵀ
// product; attention(l) is not readable.
// outputs: inference only; the layers share one set of scratch buffers, so activation memory does
// not grow with depth, and only embedding_output(), the last hidden state, logits() and
// pooler_output() remain readable.
// inputs (gradient checkpointing): as backward, but only each layer's input h[l] is kept and the layers
// share one set of activations; the backward runs each layer's forward again from h[l] (the same
// dropout masks, drawn from the same counters) just before that layer's backward. Gradients equal
// backward's bit for bit; activation memory is L + 1 (N, H) buffers plus one layer's, for about one
// more forward of work. hidden_state(l) is readable for every l.
enum class Keep { all, backward, outputs, inputs };

// A decoder's self-attention key/value cache (RoFormer::set_kv_cache): fp32 or bf16.
enum class CacheType { f32, bf16 };

template <typename T>
class RoFormer : public Trainable<T> {
 public:
  using Trainable<T>::params;
  using Trainable<T>::grads;
  using Trainable<T>::on_grads_final;
  explicit RoFormer(const RoFormerConfig& cfg);  // validates cfg (std::invalid_argument)
  // A view over another model's arenas (an encoder-decoder's encoder and decoder): p and g are
  // bound to params_base and grads_base with this config's layout (param_layout(cfg)), whose
  // offsets the owner keeps; params and grads stay empty, and init_weights, load, allocate_grads
  // and zero_grad are the owner's. mlm_head false: no head (the encoder); its pointers are null.
  RoFormer(const RoFormerConfig& cfg, T* params_base, T* grads_base, bool mlm_head);
  ~RoFormer();
  RoFormer(const RoFormer&) = delete;  // the pointer structs point into this object's arenas
  RoFormer& operator=(const RoFormer&) = delete;

  const RoFormerConfig& config() const { return cfg_; }
  Params<T> p, g;  // pointers into params / grads (Trainable: param_count(layout()) elements each)
  void allocate_grads() override;

  // HF's initialisation: N(0, initializer_range) for matrices and embeddings (the padding row 0),
  // zero biases, unit LayerNorm weights. A pure function of seed.
  void init_weights(uint64_t seed);
  // Copies every tensor of the layout from an HF state dict (any io::WeightStore: model.safetensors,
  // a sharded index, pytorch_model.bin; F16/BF16 are widened). HF's fixed sinusoidal table and a stored
  // tied decoder weight/bias are accepted; a missing, misshaped or unexpected tensor throws io::Error.
  // RoFormerModel checkpoints (names without "roformer.", no MLM head) load as encoder-only models:
  // forward then stops at the last hidden state and logits() is null. Tensors whose names start with
  // one of other_heads (e.g. "classifier.", "pooler.") are left for the caller. mlm_head false skips
  // the MLM head (cls.predictions.*, and RoFormer-V2's tied one): forward stops at the last hidden state.
  // Tensors of the layout whose names start with one of `optional` may be absent: they keep their
  // values (fine-tuning a pre-trained encoder initialises the new classifier.* head, then loads); an
  // optional prefix covering "cls.predictions." keeps the MLM head even when none of it is stored.
  void load(const io::WeightStore& weights, const std::vector<std::string>& other_heads = {}, bool mlm_head = true,
            const std::vector<std::string>& optional = {});
  bool has_mlm_head() const { return has_mlm_head_; }

  // The memory of a decoder's cross-attention (add_cross_attention) for the next forward and its
  // backward: memory (B, Tk, H), held by the caller until the backward is done; memory_mask (B, Tk)
  // 1 real / 0 padding, or null. The backward writes d(loss)/d(memory) to memory_grad().
  void set_memory(const T* memory, const int64_t* memory_mask, int64_t Tk);
  const T* memory_grad() const;  // (B, Tk, H) of the last backward

  // Inference: packs every layer's linear weights once for oneDNN (ops/packed_linear.h) in `precision`
  // (attention, cross-attention, feed-forward with its activation fused, embedding projection, MLM
  // head); the forward then runs them. The arena keeps the fp32 weights, so save and the parameter
  // views are unchanged. A packed model has no backward; load and init_weights drop the packing.
  // fp32 models only (std::logic_error for double). release_arena (serving): the arena's copies of
  // the packed weights are handed back to the operating system, so the process holds each weight
  // once; those arena entries then read as zeros, and pack again or a backward throw until load or
  // init_weights fill the arena again.
  void pack(ops::Precision precision, bool release_arena = false);
  bool packed() const { return !packed_.empty(); }
  ops::Precision packed_precision() const { return packed_precision_; }  // when packed()
  size_t packed_bytes() const;  // what the packed weights take besides the arena

  // Mixed-precision training: with bf16, every training forward (training = true) and its backward
  // run each linear layer's three products (ops/linear.h: x·Wᵀ, dout·W, doutᵀ·x; the MLM decoder
  // too) and softmax attention's six (ops/attention.h's bf16_products) with bf16 operands and fp32
  // accumulation. The arena stays the fp32 master copy the optimiser updates; each training forward
  // first rounds the layers' weights to bf16 copies (once per micro-batch). Norms, softmax, scores,
  // losses, reductions, biases and gradients stay fp32, and forwards with training = false
  // (validation, decoding) run fp32 on the master weights. f32 (the default) turns it off. bf16 on a
  // CPU without native bf16 throws std::invalid_argument naming its kernel family; anything but f32 on
  // a double model, std::logic_error.
  void set_precision(ops::Precision precision) override;
  ops::Precision precision() const { return precision_; }

  void set_keep(Keep keep);  // takes effect with the next forward
  Keep keep() const { return keep_; }
  // Training: Keep::inputs (on) or Keep::backward (off).
  void set_gradient_checkpointing(bool on) override { set_keep(on ? Keep::inputs : Keep::backward); }
  // Keep::backward keeps attention's probabilities over at most this many keys. Default: while they
  // take no more memory than the layer's other saved activations, n·Tk ≤ 4H + 2I (12·D when I = 4H:
  // 768 keys at D = 64), so that short sequences skip the recomputation and memory stays linear in T
  // beyond. 0: always row statistics.
  void set_max_kept_keys(int64_t keys) { max_kept_keys_ = keys; }
  int64_t max_kept_keys() const { return max_kept_keys_; }
  // Keep::outputs runs the row-wise parts of each layer (embeddings, the q/k/v product, the output
  // denses, norms and the feed-forward) over at most this many rows of the batch at a time, and
  // attention writes its context over the queries: activation memory is then about 6 (N, H) buffers
  // plus (rows, 4H) (a long document's, linear in N with a small constant) instead of about 15
  // (N, H). Results equal one pass's up to the products' rounding at another row count. 0: one pass.
  void set_inference_rows(int64_t rows) { inference_rows_ = rows; }
  int64_t inference_rows() const { return inference_rows_; }
  // Decoding (Generator, generate.h): the element type of the self-attention key/value caches. bf16
  // keeps each key and value rounded to bfloat16 once, as it is cached: half the memory, and half the
  // bytes a decoding step reads from it, on every CPU (widening is exact; no bf16 arithmetic). Softmax
  // attention of fp32 models; linear attention's recurrent state and cross-attention memories stay fp32.
  void set_kv_cache(CacheType t) { kv_cache_ = t; }
  CacheType kv_cache() const { return kv_cache_; }

  // Runs the network on a batch; with targets, returns the mean cross-entropy over counted
  // positions (0 when none count). training turns dropout on, with masks drawn from dropout_seed.
  // Throws std::invalid_argument on bad shapes and std::out_of_range on out-of-range ids.
  double forward(const Inputs& in, bool training = false, uint64_t dropout_seed = 0);
  // Adds d(loss)/d(params) of the last forward (which must have had targets) to grads.
  void backward();
  // Adds the gradients given d(loss)/d(logits) (B, T, V) of the last forward (a task's own loss).
  void backward_from_logits(const T* d_logits);
  // Adds the gradients given d(loss)/d(head_logits()) of the last forward of a model with a task head.
  void backward_from_head_logits(const T* d_logits);
  // Adds the gradients given d(loss)/d(last hidden state) (B, T, H) (heads outside the model), plus
  // d(loss)/d(pooler output) (B, H) when d_pooled is given.
  void backward_from_hidden(const T* d_hidden, const T* d_pooled = nullptr);
  // on_grads_final (Trainable) is called after layer l's backward with layer l's first parameter
  // (the head's and the pooler's lie above it), and after the embeddings with 0.

  // Views of the last forward.
  const T* embedding_output() const;      // (B, T, E) after the embedding LayerNorm (before dropout); not after a
                                          // Keep::outputs forward over more than inference_rows() rows
  const T* hidden_state(int64_t l) const; // (B, T, H), l = 0 (encoder input) .. L; only l = L with Keep::outputs
  const T* attention(int64_t l) const;    // (B, n, T, T) softmax probabilities of layer l (null for linear
                                          // attention); Keep::all only
  const T* logits() const;                // (B, T, V), or (logit_row_count, V); null without an MLM head
  const T* pooler_output() const;         // (B, H) with a pooler (RoFormer-Sim), else null
  const T* head_logits() const;           // a task head's logits (config().head->logits_count), else null
  int64_t counted() const;                // targets counted by the last loss

 private:
  struct Activations;
  void embed(const Inputs& in, bool training, uint64_t dropout_seed);  // masks, dropout, embeddings → h[0]
  void encode();                                                      // the blocks over h[0]
  // Keep::inputs: makes the shared activations layer l's again, by its forward from h[l].
  void recompute_layer(int64_t l, const AttentionCall& call, const CrossMemory<T>& memory);
  // bf16 training: where h[l] goes in bf16 too, layer l's kept x16 (N, H), which h[l]'s producer writes
  // (Bf16Handoff); null when layer l's denses read fp32, and for l = L.
  uint16_t* input16(int64_t l);
  void run_heads(bool logits);
  void bind_head();                // the task head's views of p and g
  HeadCall<T> head_call() const;   // what the task head reads of the last forward
  AttentionCall attention_call() const;  // the last forward's masks, dropout and precision
  using Trainable<T>::layout_;
  using Trainable<T>::layer_offsets_;
  RoFormerConfig cfg_;
  std::unique_ptr<Activations> act_;
  std::unique_ptr<LayerStatics<T>> statics_;  // RoPE plan (dynamic NTK follows the batch length), FAVOR+
  std::unique_ptr<Scratch<T>> scratch_;  // backward buffers, made on the first backward
  std::unique_ptr<HeadModule<T>> head_;  // config().head's module, or null
  std::vector<T> d_head_h_;              // (N, H) d(loss)/d(last hidden state) from the task head
  bool has_mlm_head_ = true;
  Keep keep_ = Keep::backward;
  int64_t max_kept_keys_ = 0;  // set from the config in the constructor
  int64_t inference_rows_ = 1024;
  CacheType kv_cache_ = CacheType::f32;
  bool view_ = false;                  // p and g point into an owner's arenas
  const T* memory_ = nullptr;          // (B, Tk, H) cross-attention memory
  const int64_t* memory_mask_ = nullptr;
  int64_t memory_len_ = 0;
  std::vector<T> d_memory_;            // (B, Tk, H)
  std::vector<std::unique_ptr<ops::PackedLinear>> packed_;  // what p's packed pointers point to
  ops::Precision packed_precision_ = ops::Precision::f32;
  bool arena_released_ = false;  // pack(…, release_arena): the packed weights' arena pages are gone
  void unpack();
  void require_unpacked(const char* what) const;
  // Every linear layer that has weights, with its (out, in) shape, and the MLM decoder (tied).
  struct LinearLayer {
    LinearParams<T>* params;
    int64_t out, in;
  };
  std::vector<LinearLayer> linear_layers();
  void use_bf16_weights(bool on);  // rounds the weights into bf16_ and points w16 at them, or clears w16
  ops::Precision precision_ = ops::Precision::f32;
  std::vector<uint16_t> bf16_;  // bf16 training: the linear layers' weights, rounded each training forward
  bool bf16_training_ = false;  // the last forward ran in bf16 (its backward and attention products follow it)
};

extern template class RoFormer<float>;
extern template class RoFormer<double>;

// How an inference run's linear layers compute: the --quantize and --gemm of every command that runs
// a model (the encoder commands, forward, generate, eval, translate, finetune --predict, bench infer).
//   quantize: none (fp32), int8 (oneDNN dynamic int8, ops/packed_linear.h), bf16 (oneDNN bf16 GEMMs
//   with fp32 accumulation; CPUs with AVX512-BF16 or AMX only), or automatic ("auto"): int8 for a
//   checkpoint `roformer quantize` wrote, else fp32;
//   gemm, for fp32: packed (oneDNN, weights packed at load), blas (OpenBLAS on the arena, as
//   training runs) or automatic ("auto": packed where oneDNN has its own fp32 kernel, else blas).
enum class Quantize { automatic, none, int8, bf16 };
enum class Gemm { automatic, packed, blas };
struct LinearOptions {
  Quantize quantize = Quantize::automatic;
  Gemm gemm = Gemm::automatic;
  CacheType kv_cache = CacheType::f32;  // --kv-cache of the decoding commands (generate, translate, serve)
};
// The command-line names ("auto", "none", "int8", "bf16"; "auto", "packed", "blas"); the parsers
// throw std::invalid_argument naming the option and the names it takes.
const char* quantize_name(Quantize q);
Quantize parse_quantize(const std::string& name);
const char* gemm_name(Gemm g);
Gemm parse_gemm(const std::string& name);
const char* cache_type_name(CacheType t);  // "fp32", "bf16"
CacheType parse_cache_type(const std::string& name);

// Throws io::Error naming the option where the CPU cannot run what it asks for (--quantize bf16 on a
// CPU without native bf16 names oneDNN's kernel family), so that a run fails before it loads or trains.
void check_linear_options(const LinearOptions& options);

// Packs m's linear layers as options ask (RoFormer::pack), after check_linear_options; int8_checkpoint:
// the weights came from an int8 checkpoint (io::WeightStore::has_int8_tensors); release_arena: see
// RoFormer::pack. The model then runs forwards only.
void prepare_for_inference(RoFormer<float>& m, const LinearOptions& options, bool int8_checkpoint,
                           bool release_arena = false);

}  // namespace model
