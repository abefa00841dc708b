// Axis ranges and "nice" ticks for plot.cc (internal; separate so the tick rules can be tested on
// their own). Linear axes step by 1, 2 or 5 times a power of ten and, unless overridden, extend to
// a whole step; log axes extend to whole decades and tick at decades (with 2..9 minor ticks when few
// decades are shown).
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace plot::detail {

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  bool empty() const { return lo > hi; }
};

struct Tick {
  double value;       // in data units
  double frac;        // position along the axis, 0 at the low end, 1 at the high end
  std::string label;  // empty for a minor (unlabelled) tick
};

struct Axis {
  bool log = false;
  double lo = 0, hi = 1;  // the axis ends, in log10 units on a log axis
  std::vector<Tick> ticks;
  // Position of data value v along the axis (outside [0, 1] when v is out of view).
  double frac(double v) const;
};

// The axis for `data` (finite values; positive on a log axis; may be empty), with optional fixed
// ends (which are kept exactly, not rounded out) and about `target` labelled ticks.
Axis make_axis(bool log, const Range& data, std::optional<double> fixed_lo, std::optional<double> fixed_hi,
               int target);

// 1, 2 or 5 times a power of ten, the smallest such value >= raw (raw > 0).
double nice_step(double raw);

// Compact number for labels and messages: up to 6 significant digits, "1e6" rather than "1e+06".
std::string format_g(double v, int significant = 6);

}  // namespace plot::detail
