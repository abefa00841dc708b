// server::Scheduler: the bounded queue, the token-budget batcher and the one model thread.
#include "server/scheduler.h"

#include <omp.h>

#include <algorithm>

namespace server {
namespace {

int64_t longest(const std::vector<text::Encoding>& encodings) {
  int64_t t = 0;
  for (const auto& e : encodings) t = std::max<int64_t>(t, static_cast<int64_t>(e.size()));
  return t;
}

}  // namespace

Scheduler::Scheduler(serve::Pipeline& pipeline, const SchedulerOptions& options, Metrics& metrics)
    : pipeline_(pipeline), options_(options), metrics_(metrics) {
  worker_ = std::thread([this] { work(); });
}

Scheduler::~Scheduler() { stop(); }

std::future<Output> Scheduler::submit(Task task, std::vector<text::Encoding> encodings, int64_t top_k) {
  auto job = std::make_unique<Job>();
  job->task = task;
  job->top_k = top_k;
  job->queued = std::chrono::steady_clock::now();
  job->deadline = options_.request_timeout_s > 0
                      ? std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(options_.request_timeout_s))
                      : std::chrono::steady_clock::time_point::max();
  job->encodings = std::move(encodings);
  std::future<Output> f = job->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Overloaded("the server is shutting down");
    if (in_flight_ >= options_.max_concurrent_requests) {
      throw Overloaded("model is overloaded: " + std::to_string(in_flight_) +
                       " requests in flight (--max-concurrent-requests " +
                       std::to_string(options_.max_concurrent_requests) + ")");
    }
    ++in_flight_;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return f;
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

// The front job, then the jobs behind it of the same task while the batch stays within the budget:
// (sequences) × (longest) ≤ max_batch_tokens and sequences ≤ max_batch_requests. The front job always
// goes, however large; Pipeline::run then splits it into forwards within the budget.
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
    const int64_t n = sequences + static_cast<int64_t>(next.encodings.size());
    const int64_t t = std::max(T, longest(next.encodings));
    const bool same = !jobs.empty() && next.task == jobs.front()->task && next.top_k == jobs.front()->top_k;
    if (!jobs.empty() && (!same || n * t > options_.max_batch_tokens ||
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
  std::vector<text::Encoding> all;  // the jobs' encodings, moved: each job keeps only its count
  std::vector<size_t> counts;
  int64_t tokens = 0;
  for (const auto& j : jobs) {
    counts.push_back(j->encodings.size());
    for (auto& e : j->encodings) {
      tokens += static_cast<int64_t>(e.size());
      all.push_back(std::move(e));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (const auto& j : jobs) metrics_.queued(std::chrono::duration<double>(start - j->queued).count());
  const int64_t T = std::max<int64_t>(longest(all), 1);
  int64_t batch_size = std::max<int64_t>(options_.max_batch_tokens / T, 1);
  if (options_.max_batch_requests > 0) batch_size = std::min(batch_size, options_.max_batch_requests);
  Output out;
  try {
    switch (jobs.front()->task) {  // encoded (and truncated) on the HTTP threads already
      case Task::embed: {
        serve::EmbedOptions eo;
        eo.pooling = options_.pooling;
        eo.batch_size = batch_size;
        out.embeddings = pipeline_.embed_encoded(all, eo);
        break;
      }
      case Task::classify: out.classes = pipeline_.classify_encoded(all, batch_size); break;
      case Task::fill_mask:
        out.masks = serve::fill_mask_encoded(pipeline_, all, jobs.front()->top_k, batch_size);
        break;
    }
  } catch (...) {
    release(jobs.size());
    for (auto& j : jobs) j->done.set_exception(std::current_exception());
    return;
  }
  const int64_t n = static_cast<int64_t>(all.size());
  metrics_.batch(n, tokens, n * T, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  release(jobs.size());
  size_t at = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {  // hand each job its slice, in its order
    Output mine;
    const size_t k = counts[i];
    if (!out.embeddings.empty()) {
      mine.embeddings.assign(std::make_move_iterator(out.embeddings.begin() + at),
                             std::make_move_iterator(out.embeddings.begin() + at + k));
    } else if (!out.classes.empty()) {
      mine.classes.assign(out.classes.begin() + at, out.classes.begin() + at + k);
    } else if (!out.masks.empty()) {
      mine.masks.assign(std::make_move_iterator(out.masks.begin() + at),
                        std::make_move_iterator(out.masks.begin() + at + k));
    }
    at += k;
    jobs[i]->done.set_value(std::move(mine));
  }
}

}  // namespace server
