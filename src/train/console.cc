// Stop signals and the progress line (see console.h).
#include "console.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

bool stop_requested() { return g_stop_signal != 0; }

bool stop_requested(Communicator& group) {
  double stopping = stop_requested() ? 1 : 0;
  group.allreduce_sum(&stopping, 1);
  return stopping > 0;
}

std::string format_duration(double s) {
  const int64_t t = static_cast<int64_t>(std::max(0.0, s) + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  }
  return buf;
}

ProgressLine::Mode ProgressLine::choose(bool live_wanted, bool prints) {
  if (!prints) return Mode::off;
  return live_wanted && isatty(STDERR_FILENO) ? Mode::live : Mode::log;
}

void ProgressLine::update(int64_t step, int64_t total, double loss, double val, double tok_s, double elapsed, double eta,
                          bool evaluated) {
  if (mode_ == Mode::off) return;
  if (mode_ == Mode::log && !evaluated && step % std::max<int64_t>(1, total / 50) != 0 && step != total) return;
  const int width = 24, filled = static_cast<int>(width * step / std::max<int64_t>(total, 1));
  std::string bar;
  for (int i = 0; i < width; ++i) bar += i < filled ? "█" : "░";
  char buf[256];
  std::snprintf(buf, sizeof(buf), "step %lld/%lld %s %3d%% | loss %.4f | val %s | %.0f tok/s | %s elapsed | ETA %s",
                static_cast<long long>(step), static_cast<long long>(total), bar.c_str(),
                static_cast<int>(100 * step / std::max<int64_t>(total, 1)), loss,
                std::isfinite(val) ? (std::to_string(val).substr(0, 6)).c_str() : "-", tok_s,
                format_duration(elapsed).c_str(), format_duration(eta).c_str());
  if (mode_ == Mode::live) {
    std::fprintf(stderr, "\r%s\033[K", buf);
  } else {
    std::fprintf(stderr, "%s\n", buf);
  }
  std::fflush(stderr);
}

void ProgressLine::finish() {
  if (mode_ == Mode::live) std::fprintf(stderr, "\n");
}

}  // namespace train
