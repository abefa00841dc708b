// Line charts rendered to PNG with cairo: the trainer's loss curves and the paper-figure plots.
// One call, render_png, turns a Chart (series of x/y points, optional log axes, labelled dashed
// reference lines) into PNG bytes in memory; the caller decides where and how to write them (e.g.
// atomically beside a checkpoint). Nothing here touches the filesystem or keeps state between calls
// (cairo and fontconfig do cache fonts; see release_font_caches).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace plot {

// One curve, drawn as a polyline in the given point order. A point whose x or y is NaN/Inf is
// skipped and breaks the line (a diverged step leaves a gap rather than a spike); an isolated
// finite point is drawn as a dot so it does not vanish.
struct Series {
  std::string label;       // shown in the legend; an empty label keeps the series out of it
  std::vector<double> x, y;
  bool markers = false;    // also draw a dot at every point (sparse data, e.g. one point per model)
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;            // coloured in order from the tab10 palette (cycling)
  bool log_x = false, log_y = false;     // log10 axes with decade ticks
  // Axes span the finite data (y also the hlines), rounded out to whole ticks; y_min / y_max
  // override either end and are kept exactly. Data outside the range is clipped.
  std::optional<double> y_min, y_max;
  std::vector<std::pair<std::string, double>> hlines;  // labelled dashed reference lines at y
  int width = 900, height = 560;         // pixels; fonts and line widths scale with the area
};

// Renders `chart` to PNG bytes. Throws std::invalid_argument with a message naming the problem for:
// no series, x/y size mismatch, an empty series, a non-positive value on a log axis (data, y_min,
// y_max or an hline), a non-finite or inverted y_min/y_max, a non-finite hline, width/height
// outside [100, 8000], and a data range too wide for doubles (e.g. -1e308..1e308). Throws std::runtime_error if cairo itself fails (e.g. out of memory).
std::string render_png(const Chart& chart);

// Optional, at process exit: frees the font caches that cairo and fontconfig keep for the whole
// process (about 1 KB, allocated by the first render and never grown), which LeakSanitizer otherwise
// reports as leaks. Call it only when no thread is using cairo or fontconfig any more, e.g. at the
// end of main or in a test environment's TearDown; do not render afterwards.
void release_font_caches();

// The palette, exposed so tests and callers can match colours: the 10 matplotlib "tab10" colours
// as 0xRRGGBB. Series i gets kPalette[i % 10].
inline constexpr unsigned kPalette[10] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                          0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};

}  // namespace plot
