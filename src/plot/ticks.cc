// Tick placement and labels for plot axes (see ticks.h). The small epsilons absorb floating-point
// noise such as 0.3 / 0.1 = 2.9999999999999996, which would otherwise add or drop a tick.
#include "plot/ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace plot::detail {
namespace {

constexpr double kEps = 1e-9;

// Labels for linear ticks spaced `step` apart whose largest magnitude is `maxabs`: fixed decimals
// just fine enough for the step ("0.25", "1500"), scientific when the numbers are very large/small.
std::string linear_label(double v, double step, double maxabs) {
  const int e = static_cast<int>(std::floor(std::log10(step) + kEps));
  if (maxabs < 1e7 && e >= -5) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", std::max(0, -e), v);
    return buf;
  }
  const int sig = std::clamp(static_cast<int>(std::floor(std::log10(maxabs))) - e + 1, 1, 15);
  return format_g(v, sig);
}

// Linear ticks over [lo, hi] with step `step` (positions mapped through `to_axis`, e.g. log10).
template <class F>
void linear_ticks(double lo, double hi, double step, F to_axis, Axis& a) {
  const double i0 = std::ceil(lo / step - kEps), i1 = std::floor(hi / step + kEps);
  const double maxabs = std::max(std::fabs(i0 * step), std::fabs(i1 * step));
  for (double i = i0; i <= i1 && a.ticks.size() < 100; ++i) {
    double v = i * step;
    if (std::fabs(v) < step * kEps) v = 0;  // no "-0" or "5.5e-17"
    const double t = to_axis(v);
    if (std::isfinite(t)) a.ticks.push_back({v, (t - a.lo) / (a.hi - a.lo), linear_label(v, step, maxabs)});
  }
}

}  // namespace

double Axis::frac(double v) const { return ((log ? std::log10(v) : v) - lo) / (hi - lo); }

double nice_step(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw * (1 - kEps)) return m * p;
  return 10 * p;
}

std::string format_g(double v, int significant) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  std::string s = buf;
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string exp = s.substr(e + 1);  // "+06" -> "6", "-07" -> "-7"
  const bool neg = exp[0] == '-';
  exp = exp.substr(exp[0] == '+' || exp[0] == '-' ? 1 : 0);
  exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
  return s.substr(0, e) + "e" + (neg ? "-" : "") + exp;
}

Axis make_axis(bool log, const Range& data, std::optional<double> fixed_lo, std::optional<double> fixed_hi,
               int target) {
  auto to_axis = [log](double v) { return log ? std::log10(v) : v; };
  Range r = data;
  if (r.empty()) r = log ? Range{1, 10} : Range{0, 1};  // nothing finite to show: an empty frame
  Axis a;
  a.log = log;
  a.lo = to_axis(fixed_lo.value_or(r.lo));
  a.hi = to_axis(fixed_hi.value_or(r.hi));
  if (!(a.hi > a.lo)) {  // a single value, or one fixed end beyond all the data: open a sensible span
    auto pad = [log](double t) { return log ? 0.5 : (t != 0 ? std::fabs(t) * 0.1 : 0.5); };
    if (!fixed_lo && !fixed_hi) {
      const double p = pad(a.lo);
      a.lo -= p, a.hi += p;
    } else if (!fixed_hi) {
      a.hi = a.lo + 2 * pad(a.lo);
    } else {
      a.lo = a.hi - 2 * pad(a.hi);
    }
  }
  if (!std::isfinite(a.hi - a.lo))
    throw std::invalid_argument("plot::render_png: the data range is too wide to plot");
  target = std::max(target, 2);

  if (!log) {
    const double step = nice_step((a.hi - a.lo) / target);
    if (!fixed_lo) a.lo = std::floor(a.lo / step + kEps) * step;
    if (!fixed_hi) a.hi = std::ceil(a.hi / step - kEps) * step;
    linear_ticks(a.lo, a.hi, step, to_axis, a);
    return a;
  }

  if (!fixed_lo) a.lo = std::floor(a.lo + kEps);
  if (!fixed_hi) a.hi = std::ceil(a.hi - kEps);
  auto add = [&a](double v, bool labelled) {
    const double t = std::log10(v);
    if (t >= a.lo - kEps && t <= a.hi + kEps)
      a.ticks.push_back({v, (t - a.lo) / (a.hi - a.lo), labelled ? format_g(v) : ""});
  };
  const int d0 = static_cast<int>(std::ceil(a.lo - kEps)), d1 = static_cast<int>(std::floor(a.hi + kEps));
  const int dlo = static_cast<int>(std::floor(a.lo)), dhi = static_cast<int>(std::ceil(a.hi));
  if (d1 > d0) {
    // Two or more decades in view: label decades, every `stride`-th one when there are many.
    const int stride = std::max(1, static_cast<int>(std::ceil((d1 - d0 + 1) / double(target + 1))));
    for (int d = d0; d <= d1; ++d) add(std::pow(10.0, d), ((d % stride) + stride) % stride == 0);
    if (a.hi - a.lo <= 6)
      for (int d = dlo; d < dhi; ++d)
        for (int m = 2; m <= 9; ++m) add(m * std::pow(10.0, d), false);
    return a;
  }
  // Less than two decades (only with a fixed end): label 1-2-5 mantissas (if 3 fit), or every mantissa, with
  // the other mantissas as minor ticks; in a very narrow window fall back to linear steps.
  for (const std::vector<int>& labelled : {std::vector<int>{1, 2, 5}, std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    const int needed = labelled.size() == 3 ? 3 : 2;  // two 1-2-5 labels alone look bare
    a.ticks.clear();
    int n = 0;
    for (int d = dlo; d <= dhi; ++d)
      for (int m = 1; m <= 9; ++m) {
        const bool lab = std::find(labelled.begin(), labelled.end(), m) != labelled.end();
        const size_t before = a.ticks.size();
        add(m * std::pow(10.0, d), lab);
        n += lab && a.ticks.size() > before;
      }
    if (n >= needed) return a;
  }
  a.ticks.clear();
  const double vlo = std::pow(10.0, a.lo), vhi = std::pow(10.0, a.hi);
  linear_ticks(vlo, vhi, nice_step((vhi - vlo) / target), to_axis, a);
  return a;
}

}  // namespace plot::detail
