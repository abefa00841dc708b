// Generation for a causal LM with step-level batching, as llama.cpp's server and TGI do it: a fixed
// set of slots (rows of one model::Generator, each at a position of its own), ONE model thread, and a
// loop of steps. Each step feeds one new token to every decoding slot in one batched feed_rows, then
// at most prefill_chunk prompt tokens of the slots still reading their prompts, so that a long prompt
// joins over several steps without stalling the running ones; the slots reading prompts are fed
// together in one call (model::Generator::feed_rows with a count per row), so that the products run
// over all their tokens at once. A request joins at the next step that
// has a free slot and room in the token budget (each holds prompt + max_new_tokens of it); it leaves
// when it ends (eos, max_new_tokens, a stop string, the context) or its client is gone.
//
//   server::Generation g(model, tokenizer, {.slots = 32}, metrics);
//   auto s = g.submit({.prompt = ids, .max_new_tokens = 64});   // Overloaded: 429
//   for (server::GenerationEvent e; s->next(e);) send(e.text);  // one event per token
//
// A sequence's tokens equal `roformer generate`'s with the same options (greedy, or sampling with the
// same seed): the same per-step log-probabilities and choice (model::step_log_probs, pick_token).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/decoding.h"
#include "model/generate.h"
#include "model/roformer.h"
#include "server/metrics.h"
#include "text/tokenizer.h"

namespace server {

struct GenerationOptions {
  int64_t slots = 32;              // sequences decoded together
  int64_t max_total_tokens = 0;    // Σ (prompt + max_new_tokens) of the slots' sequences; 0: slots × context
  int64_t prefill_chunk = 256;     // prompt tokens fed per step, beside the decoding slots
  int64_t max_queued = 512;        // waiting for a slot; more: Overloaded
  int threads = 0;                 // OpenMP threads of the model thread (0: the default)
};

struct GenerationRequest {
  std::vector<int64_t> prompt;     // at least one token; prompt + max_new_tokens within the context
  int64_t max_new_tokens = 16;
  model::DecodeOptions decode;     // beam 1: greedy, or sample with temperature / top_k / top_p / seed
  uint64_t stream = 0;             // the sampling stream (OpenAI's n: the choice's index)
  int64_t eos = -1;                // ends the sequence (not emitted); -1: none
  std::vector<std::string> stop;   // a stop string ends the text before it
  int64_t top_logprobs = 0;        // alternatives reported per token (OpenAI's logprobs)
  // The reader takes the sequence whole (a route that does not stream): its events queue without waking
  // it until the end, so that a step of S such sequences wakes no reader thread, where waking each for
  // every token puts S thread switches on the cores the step's workers run on.
  bool whole = false;
};

// error: the model thread failed (not expected; the stream ends instead of hanging).
enum class FinishReason { none, length, eos, stop, error };
const char* finish_reason_name(FinishReason r);  // TGI's: "length", "eos_token", "stop_sequence"; "error"

// One generated token, or the end of the sequence (finish != none: no token, and the text held back
// until then, if any). A reader appends every event's text: the text of all of them is the completion,
// cut before the first stop string (the text after a token may be held back while it could begin a
// stop string or ends inside a character).
struct GenerationEvent {
  bool has_token = false;
  int64_t id = -1;
  std::string text;                // the text this token adds (UTF-8; may be "" until a character completes)
  double logprob = 0;              // log p of the token (after the bans)
  std::vector<std::pair<int64_t, double>> top;  // top_logprobs best (id, log p), best first
  FinishReason finish = FinishReason::none;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // with the end
  int64_t step = 0;                // the model thread's step that made it (counted from 1)
};

// What the HTTP thread of one sequence reads; the model thread writes.
class GenerationStream {
 public:
  // Waits for the next event; false after the end was read (or the stream was cancelled).
  bool next(GenerationEvent& e);
  // As next, waiting at most `timeout`: false with timed_out set when none came (a streaming route then
  // checks its client).
  bool next_for(GenerationEvent& e, std::chrono::milliseconds timeout, bool& timed_out);
  // The client is gone: the slot is freed at the next step.
  void cancel();
  bool cancelled() const;

 private:
  friend class Generation;
  void push(GenerationEvent e);
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;
  bool read_end_ = false, cancelled_ = false;
  bool wake_at_end_ = false;  // GenerationRequest::whole
};

// What the model thread has run so far (Generation::totals): decoding steps and the prompt feeds
// beside them, with their rows, tokens and seconds.
struct GenerationTotals {
  int64_t decode_steps = 0, decode_rows = 0, prefill_tokens = 0;
  double decode_seconds = 0, prefill_seconds = 0;
};

class Generation {
 public:
  // m must be a causal LM with softmax attention (model::Generator::feed_rows); both outlive this.
  Generation(const model::RoFormer<float>& m, const text::Tokenizer& tokenizer, const GenerationOptions& o,
             Metrics& metrics);
  ~Generation();  // stop()
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // The longest prompt + max_new_tokens of one sequence.
  int64_t context() const { return context_; }
  const model::RoFormer<float>& model() const { return m_; }
  // Queues the sequence (checked by the caller: prompt length, options); Overloaded when max_queued
  // wait already or the server is stopping.
  std::shared_ptr<GenerationStream> submit(GenerationRequest r);
  // Refuses new requests, runs every accepted one to its end, joins the model thread. Idempotent.
  void stop();
  int64_t queue_depth() const;
  int64_t in_flight() const;
  GenerationTotals totals() const;

 private:
  struct Slot;
  void work();
  bool admit(std::unique_lock<std::mutex>& lock);  // queued sequences into free slots
  void decode_step();                               // one token for every decoding slot
  void prefill_step();                              // up to prefill_chunk prompt tokens, in one call
  // The slot's next token from its logits (V), emitted; ends the sequence when it should.
  void advance(Slot& s, const float* logits);
  // The text of s's tokens not sent yet, up to a stop string (*stopped) or, unless final, the last
  // complete character that cannot begin a stop string.
  std::string new_text(Slot& s, bool final, bool* stopped) const;
  // Ends the sequence (none: its client is gone, nothing is sent) and frees its slot.
  void finish(Slot& s, FinishReason why);
  // One feed_rows of `rows` rows and `tokens` tokens since t0, in the metrics and totals.
  void record(bool prefill, int64_t rows, int64_t tokens, std::chrono::steady_clock::time_point t0);

  const model::RoFormer<float>& m_;
  const text::Tokenizer& tokenizer_;
  const GenerationOptions o_;
  Metrics& metrics_;
  int64_t context_ = 0, budget_ = 0, reserved_ = 0, step_ = 0;
  model::Generator gen_;
  std::vector<Slot> slots_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  struct Queued {
    GenerationRequest request;
    std::shared_ptr<GenerationStream> stream;
    std::chrono::steady_clock::time_point queued;
  };
  std::deque<Queued> queue_;
  int64_t running_ = 0;
  GenerationTotals totals_;  // under mutex_
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace server
