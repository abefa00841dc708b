// server::Scheduler: the bounded queue, the token-budget batcher and the one model thread.
#include "server/scheduler.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace server {
namespace {

int64_t longest(const std::vector<text::Encoding>& encodings) {
  int64_t t = 0;
  for (const auto& e : encodings) t = std::max<int64_t>(t, static_cast<int64_t>(e.size()));
  return t;
}

// The outputs [at, at + k) of a batch's, moved out of it.
Output slice(Output& batch, size_t at, size_t k) {
  auto take = [at, k](auto& all, auto& mine) {
    if (all.empty()) return;
    mine.assign(std::make_move_iterator(all.begin() + at), std::make_move_iterator(all.begin() + at + k));
  };
  Output mine;
  take(batch.embeddings, mine.embeddings);
  take(batch.classes, mine.classes);
  take(batch.masks, mine.masks);
  take(batch.translations, mine.translations);
  take(batch.head_logits, mine.head_logits);
  take(batch.tokens, mine.tokens);
  take(batch.sparse, mine.sparse);
  return mine;
}

}  // namespace

int64_t translation_tokens(const model::Seq2SeqConfig& c, const std::vector<int64_t>& source, const model::DecodeOptions& o) {
  const int64_t n = static_cast<int64_t>(source.size());
  return o.beam_size * (n + 1 + model::translation_limit(c, n, o));
}

int64_t Scheduler::Job::rows() const { return static_cast<int64_t>(encodings.size()); }

int64_t Scheduler::Job::longest() const { return server::longest(encodings); }

bool Scheduler::Job::batches_with(const Job& other) const { return task == other.task && top_k == other.top_k; }

Scheduler::Scheduler(Backend backend, const SchedulerOptions& options, Metrics& metrics)
    : backend_(backend), options_(options), metrics_(metrics) {
  if ((backend_.pipeline != nullptr) + (backend_.translator != nullptr) + (backend_.lm != nullptr) != 1) {
    throw std::invalid_argument("server::Scheduler: exactly one of Backend's pipeline, translator and lm");
  }
  // Here, not on the model thread: a cache that cannot fit is an error at start.
  if (backend_.translator) steps_ = std::make_unique<model::TranslationBatch>(backend_.translator->model(), options_.slots);
  worker_ = std::thread([this] { work(); });
}

Scheduler::~Scheduler() { stop(); }

Ticket Scheduler::submit(Task task, std::vector<text::Encoding> encodings, int64_t top_k, std::vector<int64_t> skip) {
  auto job = std::make_unique<Job>();
  job->task = task;
  job->top_k = top_k;
  job->encodings = std::move(encodings);
  job->skip = std::move(skip);
  return enqueue(std::move(job));
}

Ticket Scheduler::submit_translation(std::vector<std::vector<int64_t>> sources,
                                                  const model::DecodeOptions& o) {
  if (!backend_.translator) throw std::logic_error("Scheduler::submit_translation: not a translation model");
  const model::Seq2SeqConfig& c = backend_.translator->model().config();
  auto job = std::make_unique<Job>();
  job->task = Task::translate;
  job->sources = std::move(sources);
  job->decode = o;
  // A source without subwords translates to nothing, at once; the others decode in length order.
  job->translations.resize(job->sources.size());
  for (size_t i = 0; i < job->sources.size(); ++i) {
    if (job->sources[i].empty()) {
      job->translations[i] = {infer::Translation{}};
      continue;
    }
    if (o.beam_size > options_.slots ||
        (options_.max_total_tokens > 0 && translation_tokens(c, job->sources[i], o) > options_.max_total_tokens)) {
      throw std::invalid_argument("Scheduler::submit_translation: a source that can never fit the slots");
    }
    job->order.push_back(i);
  }
  std::stable_sort(job->order.begin(), job->order.end(),
                   [&](size_t a, size_t b) { return job->sources[a].size() < job->sources[b].size(); });
  job->remaining = static_cast<int64_t>(job->order.size());
  return enqueue(std::move(job));
}

Ticket Scheduler::enqueue(std::unique_ptr<Job> job) {
  job->queued = std::chrono::steady_clock::now();
  job->deadline = options_.request_timeout_s > 0
                      ? job->queued + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                          std::chrono::duration<double>(options_.request_timeout_s))
                      : std::chrono::steady_clock::time_point::max();
  Ticket t{job->done.get_future()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Overloaded("the server is shutting down");
    if (in_flight_ >= options_.max_concurrent_requests) {
      throw Overloaded("model is overloaded: " + std::to_string(in_flight_) +
                       " requests in flight (--max-concurrent-requests " +
                       std::to_string(options_.max_concurrent_requests) + ")");
    }
    ++in_flight_;
    t.id = job->id = next_id_++;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return t;
}

int64_t Scheduler::drop_queued(const std::string& why) {
  std::deque<std::unique_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dropped.swap(queue_);
    in_flight_ -= static_cast<int64_t>(dropped.size());
  }
  for (auto& job : dropped) {
    metrics_.timed_out();
    job->done.set_exception(std::make_exception_ptr(TimedOut(why)));
  }
  return static_cast<int64_t>(dropped.size());
}

bool Scheduler::cancel(uint64_t id) {
  std::unique_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find_if(queue_.begin(), queue_.end(), [id](const auto& j) { return j->id == id; });
    if (it == queue_.end()) {  // a translation decoding: its rows are freed at the next step
      const bool stepping = std::find(stepping_.begin(), stepping_.end(), id) != stepping_.end();
      if (stepping && std::find(cancelling_.begin(), cancelling_.end(), id) == cancelling_.end()) cancelling_.push_back(id);
      return stepping;
    }
    job = std::move(*it);
    queue_.erase(it);
    --in_flight_;
  }
  metrics_.cancelled();
  job->done.set_exception(std::make_exception_ptr(Cancelled("the client closed the connection")));
  return true;
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int64_t Scheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

int64_t Scheduler::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_;
}

// Before the answers go out: a client that sends its next request on receiving one is not refused
// for the request it was just answered.
void Scheduler::release(size_t jobs) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_ -= static_cast<int64_t>(jobs);
}

void Scheduler::work() {
  // OpenMP's thread count is per thread: set it on the thread that runs the model.
  if (options_.threads > 0) omp_set_num_threads(options_.threads);
  if (backend_.translator) return translate_steps();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every accepted request answered
    std::vector<std::unique_ptr<Job>> jobs = next_batch(lock);
    if (jobs.empty()) continue;  // every queued request had timed out
    lock.unlock();
    run_batch(jobs);
    lock.lock();
  }
}

// The front job, then the jobs behind it that batch with it while the batch stays within the budget:
// (rows) × (longest) ≤ max_batch_tokens and rows ≤ max_batch_requests. The front job always goes,
// however large; Pipeline::run (or the Translator's batches) then split it within the budget.
std::vector<std::unique_ptr<Scheduler::Job>> Scheduler::next_batch(std::unique_lock<std::mutex>&) {
  std::vector<std::unique_ptr<Job>> jobs;
  int64_t sequences = 0, T = 0;
  const auto now = std::chrono::steady_clock::now();
  while (!queue_.empty()) {
    if (time_out_front(now)) continue;
    const Job& next = *queue_.front();
    const int64_t n = sequences + next.rows();
    const int64_t t = std::max(T, next.longest());
    if (!jobs.empty() && (!next.batches_with(*jobs.front()) || n * t > options_.max_batch_tokens ||
                          (options_.max_batch_requests > 0 && n > options_.max_batch_requests))) {
      break;
    }
    sequences = n;
    T = t;
    jobs.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return jobs;
}

bool Scheduler::time_out_front(std::chrono::steady_clock::time_point now) {
  if (queue_.front()->deadline >= now) return false;
  queue_.front()->done.set_exception(std::make_exception_ptr(
      TimedOut("request timed out after " + std::to_string(options_.request_timeout_s) + " s in the queue (--request-timeout)")));
  queue_.pop_front();
  --in_flight_;
  metrics_.timed_out();
  return true;
}

void Scheduler::run_batch(std::vector<std::unique_ptr<Job>>& jobs) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& j : jobs) metrics_.queued(std::chrono::duration<double>(start - j->queued).count());
  int64_t rows = 0, T = 1;
  for (const auto& j : jobs) {
    rows += j->rows();
    T = std::max(T, j->longest());
  }
  int64_t batch_size = std::max<int64_t>(options_.max_batch_tokens / T, 1);  // rows per forward
  if (options_.max_batch_requests > 0) batch_size = std::min(batch_size, options_.max_batch_requests);
  Output out;
  std::vector<size_t> counts;  // each job's inputs, moved out of it into one list
  int64_t tokens = 0;
  try {
    out = encode(jobs, batch_size, counts, tokens);
  } catch (...) {
    release(jobs.size());
    for (auto& j : jobs) j->done.set_exception(std::current_exception());
    return;
  }
  metrics_.batch(rows, tokens, rows * T, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  release(jobs.size());
  size_t at = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {  // hand each job its slice, in its order
    jobs[i]->done.set_value(slice(out, at, counts[i]));
    at += counts[i];
  }
}

Output Scheduler::encode(std::vector<std::unique_ptr<Job>>& jobs, int64_t batch_size, std::vector<size_t>& counts,
                         int64_t& tokens) {
  std::vector<text::Encoding> all;  // encoded (and truncated) on the HTTP threads already
  std::vector<int64_t> skip;        // Task::embed: per encoding, when any job leaves a prompt out
  for (const auto& j : jobs) {
    if (!j->skip.empty()) {
      skip.resize(all.size(), 0);
      skip.insert(skip.end(), j->skip.begin(), j->skip.end());
    }
    counts.push_back(j->encodings.size());
    for (auto& e : j->encodings) {
      tokens += static_cast<int64_t>(e.size());
      all.push_back(std::move(e));
    }
  }
  infer::Pipeline& pipeline = *backend_.pipeline;
  Output out;
  switch (jobs.front()->task) {
    case Task::embed: {
      infer::EmbedOptions eo;
      eo.pooling = options_.pooling;
      eo.batch_size = batch_size;
      if (!skip.empty()) skip.resize(all.size(), 0);
      eo.skip = std::move(skip);
      out.embeddings = pipeline.embed_encoded(all, eo);
      break;
    }
    case Task::classify: out.classes = pipeline.classify_encoded(all, batch_size); break;
    case Task::fill_mask: out.masks = infer::fill_mask_encoded(pipeline, all, jobs.front()->top_k, batch_size); break;
    case Task::head: out.head_logits = pipeline.head_logits_encoded(all, batch_size); break;
    case Task::tokens: out.tokens = pipeline.token_embeddings_encoded(all, batch_size); break;
    case Task::sparse: out.sparse = pipeline.sparse_encoded(all, batch_size); break;
    case Task::translate: throw std::logic_error("Scheduler::encode: a translation job");
  }
  return out;
}

// The step batcher's state, the model thread's own: which request each of the batch's ids decodes a
// source of, the requests running (sources admitted, not answered) and the budget they hold.
struct Scheduler::Steps {
  struct Admitted {
    Job* job;
    size_t source;
    int64_t tokens;  // of the budget
  };
  std::map<int64_t, Admitted> of;             // the batch's ids
  std::vector<std::unique_ptr<Job>> running;
  int64_t reserved = 0;
  // This turn's admissions: sources to join the batch (job null once its client is gone).
  std::vector<model::TranslationBatch::Source> join;
  std::vector<Admitted> joining;
};

// The step batcher's loop: each turn admits what fits, frees the rows of clients gone, runs one
// decoding step and answers the requests whose last source ended.
void Scheduler::translate_steps() {
  Steps st;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !st.running.empty(); });
    if (queue_.empty() && st.running.empty()) return;  // stopping, and every accepted request answered
    std::vector<uint64_t> gone;
    gone.swap(cancelling_);
    admit_sources(st);
    lock.unlock();
    drop_gone(st, gone);
    translate_step(st);
    std::vector<Job*> finished;
    for (auto& j : st.running) {
      if (j->remaining == 0 && j->admitted == j->order.size()) finished.push_back(j.get());
    }
    for (Job* j : finished) answer_translation(st, j, nullptr);
    lock.lock();
  }
}

// Admission, under the lock: a source takes num_beams free rows and its tokens of the budget. Fair
// shares: the next source comes from the request that has had the fewest admitted (the earliest among
// equals; the queue's front has had none), so a short request joins at the next free rows rather than
// behind every source of a long one. The first source that does not fit ends the admission: it waits,
// first in line.
void Scheduler::admit_sources(Steps& st) {
  const model::Seq2SeqConfig& c = backend_.translator->model().config();
  st.join.clear(), st.joining.clear();
  int64_t rows_free = steps_->free_rows();
  auto take = [&](Job& j) {  // one source of j if it fits: true when taken, false when it must wait
    const size_t i = j.order[j.admitted];
    const int64_t need = translation_tokens(c, j.sources[i], j.decode);
    if (j.decode.beam_size > rows_free || (options_.max_total_tokens > 0 && st.reserved + need > options_.max_total_tokens)) {
      return false;
    }
    st.join.push_back({j.sources[i], j.decode, static_cast<uint64_t>(j.admitted)});
    st.joining.push_back({&j, i, need});
    rows_free -= j.decode.beam_size, st.reserved += need;
    ++j.admitted;
    return true;
  };
  const auto now = std::chrono::steady_clock::now();
  auto start = [&] {  // the queue's front is running from now on
    metrics_.queued(std::chrono::duration<double>(now - queue_.front()->queued).count());
    stepping_.push_back(queue_.front()->id);
    st.running.push_back(std::move(queue_.front()));
    queue_.pop_front();
  };
  for (;;) {
    while (!queue_.empty()) {
      if (time_out_front(now)) continue;
      if (!queue_.front()->order.empty()) break;
      start();  // nothing to decode (no subwords): answered after this step
    }
    Job* next = nullptr;
    for (auto& j : st.running) {
      if (j->admitted < j->order.size() && (!next || j->admitted < next->admitted)) next = j.get();
    }
    const bool front = !queue_.empty() && (!next || next->admitted > 0);
    if (front) next = queue_.front().get();
    if (!next || !take(*next)) break;
    if (front) start();
  }
}

// The requests whose clients are gone (their ids): their sources leave the batch and this turn's
// admissions, their budget is returned, and they are answered Cancelled.
void Scheduler::drop_gone(Steps& st, const std::vector<uint64_t>& gone) {
  for (uint64_t id : gone) {
    const auto it = std::find_if(st.running.begin(), st.running.end(), [id](const auto& j) { return j->id == id; });
    if (it == st.running.end()) continue;
    Job* j = it->get();
    for (auto a = st.of.begin(); a != st.of.end();) {  // its sources out of the batch
      if (a->second.job != j) {
        ++a;
        continue;
      }
      steps_->drop(a->first);
      st.reserved -= a->second.tokens;
      a = st.of.erase(a);
    }
    for (auto& a : st.joining) {  // not admitted after all
      if (a.job == j) st.reserved -= a.tokens, a.job = nullptr;
    }
    metrics_.cancelled();
    answer_translation(st, j, std::make_exception_ptr(Cancelled("the client closed the connection")));
  }
}

// The admitted sources join (their encoder runs once), one decoding step runs, and the sources that
// ended hand their n-best to their requests. An exception (not expected) answers every running
// request with it and starts the rows afresh.
void Scheduler::translate_step(Steps& st) {
  infer::Translator& tr = *backend_.translator;
  try {
    std::vector<model::TranslationBatch::Source> admit;
    std::vector<Steps::Admitted> admitted;
    for (size_t k = 0; k < st.join.size(); ++k) {
      if (st.joining[k].job) admit.push_back(std::move(st.join[k])), admitted.push_back(st.joining[k]);
    }
    const std::vector<int64_t> ids = steps_->admit(admit);
    for (size_t k = 0; k < ids.size(); ++k) st.of.emplace(ids[k], admitted[k]);
    const auto t0 = std::chrono::steady_clock::now();
    auto done = steps_->step();
    const int64_t rows = steps_->last_rows();
    if (rows > 0) metrics_.batch(rows, rows, rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (auto& [id, hyps] : done) {
      const Steps::Admitted a = st.of.at(id);
      st.of.erase(id);
      st.reserved -= a.tokens;
      for (const model::Hypothesis& h : hyps) {
        a.job->translations[a.source].push_back({tr.subwords().decode(h.tokens), h.score, h.tokens, h.finished});
      }
      --a.job->remaining;
    }
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    while (!st.running.empty()) answer_translation(st, st.running.front().get(), error);
    st.of.clear();
    st.reserved = 0;
    steps_->clear();
  }
}

// Answers request j (error: its exception) and forgets it; its sources must have left the batch.
void Scheduler::answer_translation(Steps& st, Job* j, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stepping_.erase(std::remove(stepping_.begin(), stepping_.end(), j->id), stepping_.end());
    cancelling_.erase(std::remove(cancelling_.begin(), cancelling_.end(), j->id), cancelling_.end());
    --in_flight_;
  }
  if (error) {
    j->done.set_exception(error);
  } else {
    Output out;
    out.translations = std::move(j->translations);
    j->done.set_value(std::move(out));
  }
  st.running.erase(std::find_if(st.running.begin(), st.running.end(), [j](const auto& r) { return r.get() == j; }));
}

}  // namespace server
