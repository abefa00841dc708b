// The terminal side of a training or fine-tuning run: SIGINT/SIGTERM turned into a stop request
// (the run saves a checkpoint and exits), and the progress line.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

#include "train/comm.h"

namespace train {

// While alive, SIGINT and SIGTERM set the stop request instead of ending the process; the previous
// handlers come back when it goes.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// Whether a stop signal arrived since the current StopSignals was made.
bool stop_requested();
// Whether one arrived on any rank of the group: a collective, called by every rank after the same
// step, so that a signal reaching the ranks between two different steps stops them all at one step.
bool stop_requested(Communicator& group);

// "m:ss" or "h:mm:ss".
std::string format_duration(double seconds);

// A live line on a terminal (redrawn every step); otherwise a log line every 2% of the run and at
// every evaluation; or nothing (the ranks of a data-parallel run other than rank 0). `val` is the
// latest validation figure (NaN: none yet).
class ProgressLine {
 public:
  enum class Mode { live, log, off };
  // live when wanted and stderr is a terminal, else log; off for a process that does not print.
  static Mode choose(bool live_wanted, bool prints);
  explicit ProgressLine(Mode mode) : mode_(mode) {}
  void update(int64_t step, int64_t total, double loss, double val, double tok_s, double elapsed, double eta,
              bool evaluated);
  void finish();

 private:
  Mode mode_;
};

}  // namespace train
