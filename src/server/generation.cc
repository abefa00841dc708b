// Step-level batching of causal-LM generation (see generation.h).
#include "server/generation.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "base/utf8.h"
#include "server/scheduler.h"

namespace server {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::length: return "length";
    case FinishReason::eos: return "eos_token";
    case FinishReason::stop: return "stop_sequence";
    case FinishReason::error: return "error";
    case FinishReason::none: break;
  }
  return "none";
}

namespace {

// The bytes of `s` up to its last complete character: a token may end inside a multi-byte one.
size_t complete_utf8(const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    char32_t cp;
    const int used = base::utf8_next(reinterpret_cast<const uint8_t*>(s.data()) + at, s.size() - at, false, &cp);
    if (used == 0) break;
    at += static_cast<size_t>(used);
  }
  return at;
}

}  // namespace

bool GenerationStream::next(GenerationEvent& e) {
  bool timed_out = false;
  return next_for(e, std::chrono::milliseconds::max(), timed_out);
}

bool GenerationStream::next_for(GenerationEvent& e, std::chrono::milliseconds timeout, bool& timed_out) {
  std::unique_lock<std::mutex> lock(mutex_);
  timed_out = false;
  const auto ready = [&] { return !events_.empty() || read_end_ || cancelled_; };
  if (timeout == std::chrono::milliseconds::max()) {
    ready_.wait(lock, ready);
  } else if (!ready_.wait_for(lock, timeout, ready)) {
    timed_out = true;
    return false;
  }
  if (events_.empty()) return false;
  e = std::move(events_.front());
  events_.pop_front();
  if (e.finish != FinishReason::none) read_end_ = true;
  return true;
}

void GenerationStream::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  ready_.notify_all();
}

bool GenerationStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

void GenerationStream::push(GenerationEvent e) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool wake = !wake_at_end_ || e.finish != FinishReason::none;
  events_.push_back(std::move(e));
  if (wake) ready_.notify_all();
}

// One row of the generator and the sequence it holds.
struct Generation::Slot {
  int64_t row = 0;
  GenerationRequest r;
  std::shared_ptr<GenerationStream> stream;  // null: the slot is free
  int64_t fed = 0;                 // prompt tokens fed
  std::vector<int64_t> history;    // prompt + generated (no-repeat n-grams)
  std::vector<int64_t> generated;
  int64_t pending = -1;            // the token the next decode step feeds
  std::string emitted;             // the text sent so far
  int64_t reserve = 0;             // prompt + max_new_tokens, of the token budget
};

Generation::Generation(const model::RoFormer<float>& m, const text::Tokenizer& tokenizer, const GenerationOptions& o,
                       Metrics& metrics)
    : m_(m), tokenizer_(tokenizer), o_(o), metrics_(metrics), context_(m.config().max_position_embeddings),
      gen_(m, m.config().max_position_embeddings, std::max<int64_t>(o.slots, 1)) {
  if (o.slots < 1 || o.prefill_chunk < 1 || o.max_queued < 1 || o.max_total_tokens < 0) {
    throw std::invalid_argument("server::Generation: slots, prefill_chunk and max_queued must be at least 1");
  }
  budget_ = o.max_total_tokens > 0 ? o.max_total_tokens : o.slots * context_;
  slots_.resize(static_cast<size_t>(o.slots));
  for (int64_t i = 0; i < o.slots; ++i) slots_[i].row = i;
  worker_ = std::thread([this] { work(); });
}

Generation::~Generation() { stop(); }

std::shared_ptr<GenerationStream> Generation::submit(GenerationRequest r) {
  const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  if (r.prompt.empty() || need > context_ || need > budget_ || r.max_new_tokens < 0) {
    throw std::invalid_argument("server::Generation::submit: a prompt of 1 .. context − max_new_tokens tokens");
  }
  auto stream = std::make_shared<GenerationStream>();
  stream->wake_at_end_ = r.whole;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) throw Overloaded("the server is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= o_.max_queued) {
    throw Overloaded("Model is overloaded: " + std::to_string(queue_.size()) + " sequences wait for a slot");
  }
  queue_.push_back({std::move(r), stream, std::chrono::steady_clock::now()});
  wake_.notify_one();
  return stream;
}

void Generation::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int64_t Generation::queue_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

GenerationTotals Generation::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

int64_t Generation::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size()) + running_;
}

bool Generation::admit(std::unique_lock<std::mutex>&) {
  bool any = false;
  for (Slot& s : slots_) {
    if (queue_.empty()) break;
    if (s.stream) continue;
    Queued& q = queue_.front();
    const int64_t need = static_cast<int64_t>(q.request.prompt.size()) + q.request.max_new_tokens;
    if (reserved_ + need > budget_) break;  // first come, first served: it waits for room
    metrics_.queued(std::chrono::duration<double>(std::chrono::steady_clock::now() - q.queued).count());
    s.r = std::move(q.request);
    s.stream = std::move(q.stream);
    s.fed = 0, s.pending = -1, s.reserve = need;
    s.history = s.r.prompt;
    s.generated.clear();
    s.emitted.clear();
    reserved_ += need;
    ++running_;
    queue_.pop_front();
    gen_.release(s.row);
    any = true;
  }
  return any;
}

void Generation::finish(Slot& s, FinishReason why) {
  GenerationEvent e;
  e.finish = why;
  bool stopped = false;
  if (why != FinishReason::none && why != FinishReason::stop && why != FinishReason::error) e.text = new_text(s, true, &stopped);
  e.prompt_tokens = static_cast<int64_t>(s.r.prompt.size());
  e.generated_tokens = static_cast<int64_t>(s.generated.size());
  e.step = step_;
  const std::shared_ptr<GenerationStream> stream = std::move(s.stream);
  gen_.release(s.row);
  {
    std::lock_guard<std::mutex> lock(mutex_);  // out of flight before its reader sees the end
    reserved_ -= s.reserve;
    --running_;
  }
  if (why != FinishReason::none) stream->push(std::move(e));
}

std::string Generation::new_text(Slot& s, bool final, bool* stopped) const {
  const std::string text = tokenizer_.decode_ids(std::vector<int32_t>(s.generated.begin(), s.generated.end()));
  size_t end = final ? text.size() : complete_utf8(text);
  *stopped = false;
  for (const std::string& stop : s.r.stop) {
    // A stop string ends the text; its start may lie in text already checked, never in text sent.
    const size_t at = text.find(stop, s.emitted.size() >= stop.size() ? s.emitted.size() - stop.size() + 1 : 0);
    if (at != std::string::npos && at <= end) end = at, *stopped = true;
  }
  if (!final && !*stopped) {  // hold back an ending that may begin a stop string
    for (const std::string& stop : s.r.stop) {
      for (size_t k = std::min(stop.size() - 1, text.size()); k > 0; --k) {
        if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
          end = std::min(end, text.size() - k);
          break;
        }
      }
    }
  }
  // The decoder may rewrite what was sent (a WordPiece cleanup): then nothing more until it agrees again.
  if (end <= s.emitted.size() || text.compare(0, s.emitted.size(), s.emitted) != 0) return "";
  std::string out = text.substr(s.emitted.size(), end - s.emitted.size());
  s.emitted = text.substr(0, end);
  return out;
}

void Generation::advance(Slot& s, const float* logits) {
  const int64_t V = m_.config().vocab_size, step = static_cast<int64_t>(s.generated.size());
  if (step >= s.r.max_new_tokens) return finish(s, FinishReason::length);
  std::vector<double> logp;
  model::step_log_probs(logits, V, s.history, s.r.eos, step, s.r.decode, logp);
  const int64_t t = model::pick_token(logp, s.r.decode, s.r.stream, step);
  if (t < 0 || t == s.r.eos) return finish(s, FinishReason::eos);  // t < 0: every token banned
  s.generated.push_back(t);
  s.history.push_back(t);
  GenerationEvent e;
  e.has_token = true;
  e.step = step_;
  e.id = t;
  e.logprob = logp[t];
  if (s.r.top_logprobs > 0) {
    std::vector<int64_t> ids(V);
    for (int64_t v = 0; v < V; ++v) ids[v] = v;
    const int64_t k = std::min(s.r.top_logprobs, V);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int64_t a, int64_t b) { return logp[a] > logp[b] || (logp[a] == logp[b] && a < b); });
    for (int64_t i = 0; i < k; ++i) e.top.emplace_back(ids[i], logp[ids[i]]);
  }
  bool stopped = false;
  e.text = new_text(s, false, &stopped);
  s.stream->push(std::move(e));
  if (stopped) return finish(s, FinishReason::stop);
  if (static_cast<int64_t>(s.generated.size()) >= s.r.max_new_tokens) return finish(s, FinishReason::length);
  s.pending = t;
}

void Generation::record(bool prefill, int64_t rows, int64_t tokens, std::chrono::steady_clock::time_point t0) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  metrics_.batch(rows, tokens, tokens, seconds);
  std::lock_guard<std::mutex> lock(mutex_);
  if (prefill) {
    totals_.prefill_tokens += tokens, totals_.prefill_seconds += seconds;
  } else {
    totals_.decode_steps += 1, totals_.decode_rows += rows, totals_.decode_seconds += seconds;
  }
}

void Generation::decode_step() {
  std::vector<int64_t> rows, ids;
  std::vector<Slot*> fed;
  for (Slot& s : slots_) {
    if (s.stream && s.pending >= 0) rows.push_back(s.row), ids.push_back(s.pending), fed.push_back(&s);
  }
  if (rows.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float>& logits = gen_.feed_rows(rows, ids);
  record(false, static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.size()), t0);
  const int64_t V = m_.config().vocab_size;
  for (size_t i = 0; i < fed.size(); ++i) {
    fed[i]->pending = -1;
    advance(*fed[i], logits.data() + static_cast<int64_t>(i) * V);
  }
}

void Generation::prefill_step() {
  // The slots reading prompts, in slot order (the earliest joined first), each take as much of its
  // rest as the budget leaves, all in one feed_rows (products over every token of them at once,
  // where a call per prompt would run products of one prompt's tokens).
  std::vector<Slot*> reading;
  std::vector<int64_t> rows, ids, counts;
  int64_t budget = o_.prefill_chunk;
  for (Slot& s : slots_) {
    const int64_t P = static_cast<int64_t>(s.r.prompt.size());
    if (!s.stream || s.fed >= P) continue;
    if (s.r.max_new_tokens == 0) {
      finish(s, FinishReason::length);
      continue;
    }
    if (budget == 0) continue;
    const int64_t n = std::min(P - s.fed, budget);
    reading.push_back(&s), rows.push_back(s.row), counts.push_back(n);
    ids.insert(ids.end(), s.r.prompt.begin() + s.fed, s.r.prompt.begin() + s.fed + n);
    budget -= n;
  }
  if (reading.empty()) return;
  const int64_t R = static_cast<int64_t>(reading.size()), tokens = static_cast<int64_t>(ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float>& logits = gen_.feed_rows(rows, ids, counts);
  record(true, R, tokens, t0);
  const int64_t V = m_.config().vocab_size;
  for (int64_t i = 0; i < R; ++i) {
    Slot& s = *reading[i];
    s.fed += counts[i];
    if (s.fed == static_cast<int64_t>(s.r.prompt.size())) advance(s, logits.data() + i * V);  // the first new token
  }
}

void Generation::work() {
  if (o_.threads > 0) omp_set_num_threads(o_.threads);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || running_ > 0; });
      if (stopping_ && queue_.empty() && running_ == 0) return;
      admit(lock);
    }
    for (Slot& s : slots_) {  // clients gone: their slots free now
      if (s.stream && s.stream->cancelled()) finish(s, FinishReason::none);
    }
    ++step_;
    try {
      decode_step();
      prefill_step();
    } catch (const std::exception& e) {  // not expected: every sequence ends, none is left hanging
      for (Slot& s : slots_) {
        if (s.stream) finish(s, FinishReason::error);
      }
      std::fprintf(stderr, "roformer serve: generation failed: %s\n", e.what());
    }
  }
}

}  // namespace server
