// The one path from HTTP threads to the model. Requests arrive already tokenized (the HTTP threads
// encode), wait in a bounded queue, and ONE model thread takes them in batches: consecutive requests
// of the same task (and top_k, or decoding options) while the batch's padded size (rows × longest)
// stays within max_batch_tokens and its rows within max_batch_requests; infer::Pipeline runs them
// sorted by length and padded per forward. A translation model's thread batches at the decoding step
// instead (model::TranslationBatch): a source joins the running decoder rows at the next step with
// num_beams free rows (slots) and room in the token budget (free rows go to the request that has had
// the fewest sources admitted), and leaves when its hypotheses are done; a request is answered when
// its last source is. Neither model is thread-safe, so nothing but that
// thread touches it.
//
//   server::Scheduler s({.pipeline = &pipeline}, {.max_concurrent_requests = 64}, metrics);
//   server::Ticket t = s.submit(server::Task::embed, pipeline.encode(texts));  // Overloaded: 429
//   t.answer.get().embeddings;  // one vector per encoding, unnormalised
//   s.cancel(t.id);             // instead, when its client is gone: dropped if still queued
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "infer/fill_mask.h"
#include "model/decoding.h"
#include "infer/pipeline.h"
#include "infer/translator.h"
#include "server/metrics.h"

namespace server {

// head: the task head's logits per token (token classification, question answering), which the
// request's thread turns into entities or answers. tokens: every token's hidden state (/embed_all);
// sparse: SPLADE vectors from the MLM head (/embed_sparse).
enum class Task { embed, classify, fill_mask, translate, head, tokens, sparse };

// The model a server runs: an encoder pipeline (embed, classify, fill-mask), an encoder-decoder
// (translate) or a causal LM (generation). Exactly one is set; the scheduler's thread is the only one
// to run the first two, server::Generation's thread (generation.h) the causal LM.
struct Backend {
  infer::Pipeline* pipeline = nullptr;
  infer::Translator* translator = nullptr;
  const model::RoFormer<float>* lm = nullptr;
  const text::Tokenizer* lm_tokenizer = nullptr;  // with lm
};

// More requests in flight than max_concurrent_requests, or the server is stopping: HTTP 429.
class Overloaded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request dropped from the queue by cancel: its client closed the connection before the answer.
class Cancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request still queued when its request_timeout_s passed: dropped unrun (HTTP 503). Its client has
// most likely given up; the model's time goes to requests someone still waits for.
class TimedOut : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SchedulerOptions {
  int64_t max_concurrent_requests = 512;  // accepted and not yet answered (queued + running)
  int64_t max_batch_tokens = 16384;       // per forward: sequences × the longest of them
  int64_t max_batch_requests = 0;         // sequences per forward; 0: only the token budget bounds it
  infer::Pooling pooling = infer::Pooling::automatic;  // automatic: the folder's modules, else cls
  int threads = 0;                        // OpenMP threads of the model thread (0: the default)
  double request_timeout_s = 0;           // longest wait in the queue before TimedOut (0: none)
  // A translation model's step batcher: decoder rows (a source takes num_beams of them), and the
  // token budget Σ num_beams · (source + eos + its new-token limit) of the sources running (0: none
  // but the rows). A source that can never fit is the caller's to refuse (need_slots, need_tokens).
  int64_t slots = 32;
  int64_t max_total_tokens = 0;
};

// What one source of a translation request holds of the step batcher's slots and token budget.
int64_t translation_tokens(const model::Seq2SeqConfig& c, const std::vector<int64_t>& source, const model::DecodeOptions& o);

// What one request gets back, in the order of its encodings.
struct Output {
  std::vector<std::vector<float>> embeddings;      // Task::embed: pooled, not normalised
  std::vector<infer::Classification> classes;      // Task::classify
  std::vector<std::vector<infer::MaskPredictions>> masks;  // Task::fill_mask: per encoding, per mask
  std::vector<std::vector<infer::Translation>> translations;  // Task::translate: per source, nbest
  std::vector<std::vector<float>> head_logits;     // Task::head: per encoding, (tokens, width)
  std::vector<std::vector<float>> tokens;          // Task::tokens: per encoding, (tokens, hidden)
  std::vector<std::vector<infer::SparseValue>> sparse;  // Task::sparse: per encoding, its non-zero entries
};

// An accepted request: its answer to come, and its id for cancel.
struct Ticket {
  std::future<Output> answer;
  uint64_t id = 0;
};

class Scheduler {
 public:
  Scheduler(Backend backend, const SchedulerOptions& options, Metrics& metrics);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues the request; throws Overloaded at once when max_concurrent_requests are in flight.
  // top_k: Task::fill_mask's predictions per mask (requests batch together when they agree on it).
  // skip: Task::embed's tokens per encoding left out of the pooling (infer::EmbedOptions::skip).
  Ticket submit(Task task, std::vector<text::Encoding> encodings, int64_t top_k = 0, std::vector<int64_t> skip = {});
  // Task::translate: subword ids of each source (Translator::encode), decoded with o (checked by the
  // caller: model::check_decode_options); requests batch together when their options are equal.
  Ticket submit_translation(std::vector<std::vector<int64_t>> sources, const model::DecodeOptions& o);
  // Drops request `id` if it is still queued (its client is gone): its answer becomes Cancelled and
  // it is no longer in flight. A translation decoding already frees its rows at the next step and is
  // answered Cancelled then. Returns false when it is running (other tasks) or answered already.
  bool cancel(uint64_t id);
  // Answers every queued request TimedOut(why) unrun (the server's --shutdown-timeout passed); the
  // batch running, if any, finishes. Returns how many were dropped.
  int64_t drop_queued(const std::string& why);
  // Refuses new requests, runs every accepted one to its answer, joins the model thread. Idempotent.
  void stop();
  int64_t queue_depth() const;
  int64_t in_flight() const;

 private:
  struct Job {
    uint64_t id = 0;
    Task task;
    int64_t top_k = 0;
    std::chrono::steady_clock::time_point queued, deadline;  // deadline: max() without request_timeout_s
    std::vector<text::Encoding> encodings;      // the encoder tasks' inputs
    std::vector<int64_t> skip;                  // Task::embed's, per encoding (empty: none)
    std::vector<std::vector<int64_t>> sources;  // Task::translate's, with its decoding options
    model::DecodeOptions decode;
    std::promise<Output> done;
    // Task::translate on the step batcher: each source's nbest as it ends, the sources in length order
    // (source order[i] samples from stream i, as infer::Translator's batch), the next to admit, those
    // not yet done.
    std::vector<std::vector<infer::Translation>> translations;
    std::vector<size_t> order;
    size_t admitted = 0;
    int64_t remaining = 0;
    int64_t rows() const;     // sequences in a forward: the encodings
    int64_t longest() const;  // tokens of the longest encoding
    bool batches_with(const Job& other) const;
  };
  Ticket enqueue(std::unique_ptr<Job> job);
  void work();
  std::vector<std::unique_ptr<Job>> next_batch(std::unique_lock<std::mutex>& lock);
  void run_batch(std::vector<std::unique_ptr<Job>>& jobs);
  // The batch's outputs, its inputs moved out of the jobs: counts gets each job's count, tokens the
  // real (unpadded) tokens. batch_size: rows per forward.
  Output encode(std::vector<std::unique_ptr<Job>>& jobs, int64_t batch_size, std::vector<size_t>& counts,
                int64_t& tokens);
  void release(size_t jobs);  // the jobs are answered: no longer in flight
  // A translation model's thread: the step batcher's loop, each turn admit_sources, drop_gone,
  // translate_step and the answers.
  struct Steps;
  void translate_steps();
  void admit_sources(Steps& st);                                   // under the lock
  void drop_gone(Steps& st, const std::vector<uint64_t>& gone);    // the requests whose clients left
  void translate_step(Steps& st);                                  // the joins and one decoding step
  void answer_translation(Steps& st, Job* j, std::exception_ptr error);
  // Answers the queue's front TimedOut when its request_timeout_s has passed (under the lock).
  bool time_out_front(std::chrono::steady_clock::time_point now);

  const Backend backend_;
  const SchedulerOptions options_;
  Metrics& metrics_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Job>> queue_;
  int64_t in_flight_ = 0;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::unique_ptr<model::TranslationBatch> steps_;  // a translation model's decoder rows (the model thread's)
  std::vector<uint64_t> stepping_;    // translation requests admitted to the step batcher, not answered
  std::vector<uint64_t> cancelling_;  // of those, the ones whose clients are gone
  std::thread worker_;
};

}  // namespace server
