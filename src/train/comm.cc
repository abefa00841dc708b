// train::world() (comm.h): MPI's world when built with ROFORMER_MPI and launched by an MPI launcher,
// otherwise a group of one. A process that mpirun did not start never initialises MPI, so a plain
// `roformer train` behaves exactly as in a build without MPI.
#include "comm.h"

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

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
  void finish() override {}
};

#ifdef ROFORMER_WITH_MPI
// MPI_COMM_WORLD, initialised with MPI_THREAD_FUNNELED: only the main thread calls MPI (OpenMP
// threads compute between the calls). Errors are fatal (MPI's default on the world communicator), so
// a rank that dies ends the job through the launcher instead of leaving the others waiting.
class MpiComm final : public Communicator {
 public:
  MpiComm() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiComm() override {
    if (finished_ || size_ == 1) {
      MPI_Finalize();
    } else {
      MPI_Abort(MPI_COMM_WORLD, 1);  // this rank failed; the others may be inside a collective
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  void allreduce_sum(float* data, int64_t n) override { reduce(data, n, MPI_FLOAT, sizeof(float)); }
  void allreduce_sum(double* data, int64_t n) override { reduce(data, n, MPI_DOUBLE, sizeof(double)); }
  void finish() override { finished_ = true; }

 private:
  // MPI counts are int: long buffers go in chunks of 2^30 elements.
  void reduce(void* data, int64_t n, MPI_Datatype type, size_t bytes) {
    constexpr int64_t kChunk = int64_t{1} << 30;
    for (int64_t i = 0; i < n; i += kChunk) {
      const int count = static_cast<int>(n - i < kChunk ? n - i : kChunk);
      MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + i * static_cast<int64_t>(bytes), count, type, MPI_SUM,
                    MPI_COMM_WORLD);
    }
  }
  int rank_ = 0, size_ = 1;
  bool finished_ = false;
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

bool built_with_mpi() {
#ifdef ROFORMER_WITH_MPI
  return true;
#else
  return false;
#endif
}

}  // namespace train
