// server::Scheduler: the bounded queue, the token-budget batcher and the one model thread.
#include "server/scheduler.h"

#include <omp.h>

#include <algorithm>
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

int64_t Scheduler::Job::rows() const {
  if (task == Task::translate) return static_cast<int64_t>(sources.size()) * decode.beam_size;
  return static_cast<int64_t>(encodings.size());
}

int64_t Scheduler::Job::longest() const {
  if (task != Task::translate) return server::longest(encodings);
  int64_t t = 0;
  for (const auto& s : sources) t = std::max<int64_t>(t, static_cast<int64_t>(s.size()) + 1);
  return t;
}

bool Scheduler::Job::batches_with(const Job& other) const {
  return task == other.task && top_k == other.top_k && (task != Task::translate || decode == other.decode);
}

Scheduler::Scheduler(Backend backend, const SchedulerOptions& options, Metrics& metrics)
    : backend_(backend), options_(options), metrics_(metrics) {
  if ((backend_.pipeline != nullptr) + (backend_.translator != nullptr) + (backend_.lm != nullptr) != 1) {
    throw std::invalid_argument("server::Scheduler: exactly one of Backend's pipeline, translator and lm");
  }
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
  auto job = std::make_unique<Job>();
  job->task = Task::translate;
  job->sources = std::move(sources);
  job->decode = o;
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
    if (it == queue_.end()) return false;
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
    if (queue_.front()->deadline < now) {  // waited too long: answered TimedOut, never run
      queue_.front()->done.set_exception(std::make_exception_ptr(
          TimedOut("request timed out after " + std::to_string(options_.request_timeout_s) +
                   " s in the queue (--request-timeout)")));
      queue_.pop_front();
      --in_flight_;
      metrics_.timed_out();
      continue;
    }
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
    out = jobs.front()->task == Task::translate ? translate(jobs, batch_size, counts, tokens)
                                                : encode(jobs, batch_size, counts, tokens);
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

Output Scheduler::translate(std::vector<std::unique_ptr<Job>>& jobs, int64_t batch_size, std::vector<size_t>& counts,
                            int64_t& tokens) {
  std::vector<std::vector<int64_t>> all;
  for (const auto& j : jobs) {
    counts.push_back(j->sources.size());
    for (auto& s : j->sources) {
      tokens += static_cast<int64_t>(s.size()) + 1;  // with the eos
      all.push_back(std::move(s));
    }
  }
  const model::DecodeOptions& o = jobs.front()->decode;
  Output out;
  out.translations = backend_.translator->translate_encoded(all, o, std::max<int64_t>(batch_size / o.beam_size, 1));
  return out;
}

}  // namespace server
