// The data-parallel process group a training run belongs to. Every process of a run (a "rank") holds
// the whole model, computes the gradient of its share of each global batch, and the ranks sum their
// gradients with allreduce_sum, so that each applies the same update. The interface is what the
// Trainer needs and nothing more, so that another engine (NCCL for a GPU backend) can slot in beside
// MPI. world() is this process's group: MPI's world when roformer was built with ROFORMER_MPI and
// launched by mpirun, otherwise a group of one whose collectives do nothing.
#pragma once

#include <cstdint>
#include <string>

namespace train {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // 0 .. size() - 1; rank 0 writes the run's files
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local" or "mpi", for the run's header

  // In place: data becomes the element-wise sum over all ranks, the same bits on every rank. Every
  // rank calls with the same n, in the same order of calls.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  // The same, in the background: starts summing data, which must stay untouched until wait_all()
  // returns, when every started sum is done. No other collective may be called in between.
  virtual void start_allreduce_sum(float* data, int64_t n) = 0;
  virtual void wait_all() = 0;
  // data (n elements) on every rank becomes root's.
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  virtual void broadcast(uint64_t* data, int64_t n, int root) = 0;  // n < 2^31 (hashes, counts)

  // The run ended normally on this rank: the group shuts down in order at exit. Without it (an
  // error on one rank) the exit aborts the whole group, so that no rank waits for it forever.
  virtual void finish() = 0;
};

// This process's group (created on first use; MPI is initialised then and shut down at exit).
Communicator& world();

}  // namespace train
