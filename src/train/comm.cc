// train::world() (comm.h): MPI's world when built with ROFORMER_MPI and launched by an MPI launcher,
// otherwise a group of one. A process that mpirun did not start never initialises MPI, so a plain
// `roformer train` behaves exactly as in a build without MPI.
#include "comm.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#ifdef ROFORMER_WITH_MPI
#include <mpi.h>
#endif

namespace train {
namespace {

class LocalComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "local"; }
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void start_allreduce_sum(float*, int64_t) override {}
  void wait_all() override {}
  void broadcast(float*, int64_t, int) override {}
  void broadcast(uint64_t*, int64_t, int) override {}
  void finish() override {}
};

#ifdef ROFORMER_WITH_MPI
// MPI_COMM_WORLD. Errors are fatal (MPI's default on the world communicator), so a rank that dies
// ends the job through the launcher instead of leaving the others waiting.
//
// Non-blocking sums run on a communication thread that makes ordinary blocking MPI_Allreduce calls,
// one bucket after another. MPI's own non-blocking collectives (MPI_Iallreduce) move data only while
// the caller is inside an MPI call, so they would not overlap the backward; the thread does, with
// MPI's tuned algorithms. MPI is initialised with MPI_THREAD_SERIALIZED: the thread makes MPI calls
// only between start_allreduce_sum and wait_all, and the main thread makes none in between.
class MpiComm final : public Communicator {
 public:
  MpiComm() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (provided >= MPI_THREAD_SERIALIZED) worker_ = std::thread([this] { serve(); });
  }
  ~MpiComm() override {
    // This rank failed: the others (and this rank's thread) may be inside a collective that will
    // never complete. MPI_Abort ends the whole job and does not return.
    if (!finished_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        closing_ = true;
      }
      wake_.notify_all();
      worker_.join();
    }
    MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  void allreduce_sum(float* data, int64_t n) override { reduce(data, n, MPI_FLOAT, sizeof(float)); }
  void allreduce_sum(double* data, int64_t n) override { reduce(data, n, MPI_DOUBLE, sizeof(double)); }
  void start_allreduce_sum(float* data, int64_t n) override {
    if (!worker_.joinable()) return reduce(data, n, MPI_FLOAT, sizeof(float));  // no thread support: in place
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({data, n});
    }
    wake_.notify_all();
  }
  void wait_all() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }
  void broadcast(float* data, int64_t n, int root) override {
    constexpr int64_t kChunk = int64_t{1} << 30;
    for (int64_t i = 0; i < n; i += kChunk) {
      MPI_Bcast(data + i, static_cast<int>(n - i < kChunk ? n - i : kChunk), MPI_FLOAT, root, MPI_COMM_WORLD);
    }
  }
  void broadcast(uint64_t* data, int64_t n, int root) override {
    MPI_Bcast(data, static_cast<int>(n), MPI_UINT64_T, root, MPI_COMM_WORLD);
  }
  void finish() override { finished_ = true; }

 private:
  struct Job {
    float* data;
    int64_t n;
  };
  // The communication thread: one bucket at a time, in the order they were started.
  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing
      const Job job = queue_.front();
      busy_ = true;
      queue_.pop_front();
      lock.unlock();
      reduce(job.data, job.n, MPI_FLOAT, sizeof(float));
      lock.lock();
      busy_ = false;
      if (queue_.empty()) done_.notify_all();
    }
  }
  // MPI counts are int: long buffers go in chunks of 2^30 elements.
  static void reduce(void* data, int64_t n, MPI_Datatype type, size_t bytes) {
    constexpr int64_t kChunk = int64_t{1} << 30;
    for (int64_t i = 0; i < n; i += kChunk) {
      MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + i * static_cast<int64_t>(bytes),
                    static_cast<int>(n - i < kChunk ? n - i : kChunk), type, MPI_SUM, MPI_COMM_WORLD);
    }
  }
  int rank_ = 0, size_ = 1;
  bool finished_ = false;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::deque<Job> queue_;  // started, not yet taken by the thread
  bool busy_ = false, closing_ = false;
};
#endif

// The world size an MPI launcher gave this process (Open MPI's, MPICH's/PMI's variables), 0 when no
// launcher started it.
int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return std::getenv("PMIX_RANK") ? 1 : 0;
}

}  // namespace

Communicator& world() {
#ifdef ROFORMER_WITH_MPI
  static const std::unique_ptr<Communicator> group =
      launcher_world_size() > 0 ? std::unique_ptr<Communicator>(new MpiComm) : std::make_unique<LocalComm>();
#else
  // N copies of a binary without MPI would each train alone and overwrite each other's files.
  if (launcher_world_size() > 1) {
    throw std::runtime_error("started by mpirun with " + std::to_string(launcher_world_size()) +
                             " processes, but this roformer was built without MPI (build it with "
                             "cmake --preset mpi)");
  }
  static const std::unique_ptr<Communicator> group = std::make_unique<LocalComm>();
#endif
  return *group;
}

}  // namespace train
