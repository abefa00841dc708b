// render_png: validates a Chart, lays out title / axes / legend, and draws it with cairo on an
// ARGB32 image surface that is then encoded to PNG in memory. Ticks are "nice" (1-2-5 steps on linear
// axes, decades on log axes); lines are clipped to the plot area in double precision first, so that
// huge or far-away values cannot overflow cairo's fixed-point coordinates.
#include "plot/plot.h"

#include <cairo.h>
#include <fontconfig/fontconfig.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "plot/ticks.h"

namespace plot {
namespace {

using detail::Axis;

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("plot::render_png: " + msg); }

void validate(const Chart& c) {
  for (auto [name, v] : {std::pair{"width", c.width}, std::pair{"height", c.height}})
    if (v < 100 || v > 8000) fail(std::string(name) + " " + std::to_string(v) + " is outside [100, 8000]");
  if (c.series.empty()) fail("the chart has no series");
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const std::string name = "series " + std::to_string(i) + (s.label.empty() ? "" : " ('" + s.label + "')");
    if (s.x.size() != s.y.size())
      fail(name + ": x has " + std::to_string(s.x.size()) + " values but y has " + std::to_string(s.y.size()));
    if (s.x.empty()) fail(name + " is empty");
    for (auto [axis, log, v] : {std::tuple{"x", c.log_x, &s.x}, std::tuple{"y", c.log_y, &s.y}})
      for (size_t j = 0; log && j < v->size(); ++j)
        if (std::isfinite((*v)[j]) && (*v)[j] <= 0)  // non-finite points are skipped, not errors
          fail(name + ": " + axis + "[" + std::to_string(j) + "] = " + detail::format_g((*v)[j]) +
               " is not positive on a log " + axis + " axis");
  }
  for (auto [name, v] : {std::pair{"y_min", c.y_min}, std::pair{"y_max", c.y_max}}) {
    if (!v) continue;
    if (!std::isfinite(*v)) fail(std::string(name) + " is not finite");
    if (c.log_y && *v <= 0)
      fail(std::string(name) + " = " + detail::format_g(*v) + " is not positive on a log y axis");
  }
  if (c.y_min && c.y_max && !(*c.y_min < *c.y_max))
    fail("y_min (" + detail::format_g(*c.y_min) + ") must be less than y_max (" + detail::format_g(*c.y_max) + ")");
  for (const auto& [label, v] : c.hlines) {
    if (!std::isfinite(v)) fail("hline '" + label + "' is not finite");
    if (c.log_y && v <= 0) fail("hline '" + label + "' = " + detail::format_g(v) + " is not positive on a log y axis");
  }
}

// Cairo objects are reference counted C handles; unique_ptr destroys them on every path (LeakSanitizer).
using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using Context = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

void check(cairo_status_t st, const char* what) {
  if (st != CAIRO_STATUS_SUCCESS)
    throw std::runtime_error(std::string("plot::render_png: cairo failed to ") + what + ": " +
                             cairo_status_to_string(st));
}

void set_rgb(cairo_t* cr, unsigned rgb, double alpha = 1) {
  cairo_set_source_rgba(cr, ((rgb >> 16) & 255) / 255.0, ((rgb >> 8) & 255) / 255.0, (rgb & 255) / 255.0, alpha);
}

void set_font(cairo_t* cr, double size, bool bold = false) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double text_width(cairo_t* cr, const std::string& s) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e.x_advance;
}

// Draws `s` anchored at (x, y): ax is the fraction of the width left of x (0 left, 0.5 centre, 1
// right); ay places y on the capital height (0: top of capitals, 0.5: middle, 1: baseline). Anchoring
// on the cap height rather than the glyph box keeps labels like "0.1" and "10" on one baseline.
void draw_text(cairo_t* cr, const std::string& s, double x, double y, double ax, double ay) {
  cairo_matrix_t fm;
  cairo_get_font_matrix(cr, &fm);
  const double cap = 0.73 * fm.yy;  // DejaVu Sans capital height / em
  cairo_move_to(cr, x - ax * text_width(cr, s), y + cap * (1 - ay));
  cairo_show_text(cr, s.c_str());
}

struct Rect { double x0, y0, x1, y1; };
using Point = std::array<double, 2>;  // pixels
using Run = std::vector<Point>;       // an unbroken stretch of a polyline

// Liang-Barsky: clips segment a-b to r in place; false if nothing of it is inside. A degenerate
// segment (a point) is kept when the point is inside.
bool clip_segment(const Rect& r, double& ax, double& ay, double& bx, double& by) {
  const double dx = bx - ax, dy = by - ay;
  double t0 = 0, t1 = 1;
  const double p[4] = {-dx, dx, -dy, dy}, q[4] = {ax - r.x0, r.x1 - ax, ay - r.y0, r.y1 - ay};
  for (int i = 0; i < 4; ++i) {
    if (p[i] == 0) {
      if (q[i] < 0) return false;
    } else {
      const double t = q[i] / p[i];
      if (p[i] < 0) t0 = std::max(t0, t); else t1 = std::min(t1, t);
    }
  }
  if (t0 > t1) return false;
  if (t1 < 1) bx = ax + t1 * dx, by = ay + t1 * dy;  // t0 == 0 keeps a bit-identical, which joins segments
  if (t0 > 0) ax += t0 * dx, ay += t0 * dy;
  return true;
}

// M4 decimation: of consecutive points that fall in one pixel column only the first, the last, the
// lowest and the highest can show, so keeping just those draws the same picture; a million training
// steps then stroke in milliseconds rather than seconds.
Run decimate(const Run& run) {
  Run out;
  for (size_t i = 0, j; i < run.size(); i = j) {
    const double col = std::floor(run[i][0]);
    size_t lo = i, hi = i;
    for (j = i; j < run.size() && std::floor(run[j][0]) == col; ++j) {
      if (run[j][1] < run[lo][1]) lo = j;
      if (run[j][1] > run[hi][1]) hi = j;
    }
    const size_t keep[4] = {i, std::min(lo, hi), std::max(lo, hi), j - 1};  // in drawing order
    for (int k = 0; k < 4; ++k)
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(run[keep[k]]);
  }
  return out;
}

// Finite points of a series in pixels, one vector per unbroken run (NaN/Inf end a run).
std::vector<Run> runs_px(const Series& s, const Axis& ax, const Axis& ay, const Rect& pr) {
  std::vector<Run> runs(1);
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
      if (!runs.back().empty()) runs.emplace_back();
      continue;
    }
    // Clamped far outside the image: clip_segment stays exact enough and nothing overflows.
    const double px = std::clamp(pr.x0 + ax.frac(s.x[i]) * (pr.x1 - pr.x0), -1e15, 1e15);
    const double py = std::clamp(pr.y1 - ay.frac(s.y[i]) * (pr.y1 - pr.y0), -1e15, 1e15);
    runs.back().push_back({px, py});
  }
  if (runs.back().empty()) runs.pop_back();
  if (!s.markers)  // markers show every point, so those series keep them all
    for (Run& run : runs) run = decimate(run);
  return runs;
}

// How much of the drawing a legend box at `box` would cover: segments crossing it plus hlines.
int coverage(const Rect& box, const std::vector<std::vector<Run>>& all, const std::vector<double>& hline_px) {
  int n = 0;
  for (const auto& runs : all)
    for (const auto& run : runs)
      for (size_t i = 0; i < run.size(); ++i) {
        const auto& a = run[i];
        const auto& b = run[i + 1 < run.size() ? i + 1 : i];
        double ax = a[0], ay = a[1], bx = b[0], by = b[1];
        n += clip_segment(box, ax, ay, bx, by);
      }
  for (double y : hline_px) n += (y >= box.y0 && y <= box.y1) ? 4 : 0;
  return n;
}

// Sizes in pixels. Fonts and strokes grow with the image so a 2x figure looks like the default one,
// only sharper: s is 1 at 900x560.
struct Style {
  double s;
  double f_title, f_label, f_tick, f_legend;  // font sizes
  double pad, tick_len, gap;
};

Style style_for(const Chart& c) {
  const double W = c.width, H = c.height;
  const double s = std::clamp(std::sqrt(W * H / (900.0 * 560.0)), 0.5, 4.0);
  return Style{s, 16 * s, 13 * s, 11 * s, 12 * s, 10 * s, 5 * s, 6 * s};
}

// The axes and the plot area (pixels) they map onto.
struct Layout {
  Axis ax, ay;
  Rect pr;
};

// Pixel of the point at fractions (fx, fy) of the plot area (y grows downwards in pixels).
Point to_px(const Rect& pr, double fx, double fy) {
  return Point{pr.x0 + fx * (pr.x1 - pr.x0), pr.y1 - fy * (pr.y1 - pr.y0)};
}

// Axes over the data ranges of the finite points (and the reference lines, so a baseline is always in
// view), and the plot area left by the title, the tick labels and the axis labels. Margins depend on
// tick-label sizes, tick counts on the plot size; one estimate suffices. Leaves the tick font set.
Layout lay_out(cairo_t* cr, const Chart& c, const Style& st) {
  const double W = c.width, H = c.height, s = st.s;
  detail::Range xr, yr;
  for (const Series& se : c.series)
    for (size_t i = 0; i < se.x.size(); ++i)
      if (std::isfinite(se.x[i]) && std::isfinite(se.y[i])) xr.add(se.x[i]), yr.add(se.y[i]);
  for (const auto& h : c.hlines) yr.add(h.second);

  set_font(cr, st.f_tick);
  const double top = c.title.empty() ? st.pad + st.f_tick / 2 : st.pad + st.f_title * 1.6;
  const double bottom =
      st.pad + st.tick_len + st.gap + st.f_tick * 1.2 + (c.x_label.empty() ? 0 : st.gap + st.f_label * 1.3);
  const double est_h = std::max(10.0, H - top - bottom);
  Axis ay = detail::make_axis(c.log_y, yr, c.y_min, c.y_max, std::clamp<int>(est_h / (55 * s), 2, 10));
  double ylab_w = 0;
  for (const auto& t : ay.ticks) ylab_w = std::max(ylab_w, text_width(cr, t.label));
  const double left = st.pad + (c.y_label.empty() ? 0 : st.f_label * 1.3 + st.gap) + ylab_w + st.gap + st.tick_len;
  const double est_w = std::max(10.0, W - left - 20 * s);
  Axis ax = detail::make_axis(c.log_x, xr, std::nullopt, std::nullopt, std::clamp<int>(est_w / (95 * s), 2, 10));
  const detail::Tick* last = nullptr;  // the rightmost labelled x tick may overhang the plot area
  for (const auto& t : ax.ticks)
    if (!t.label.empty() && (!last || t.frac > last->frac)) last = &t;
  const double last_xlab = last ? text_width(cr, last->label) : 0;
  const double right = std::max(st.pad + 5 * s, last_xlab / 2 + 4 * s);
  const Rect pr{left, top, std::max(left + 10, W - right), std::max(top + 10, H - bottom)};
  return Layout{std::move(ax), std::move(ay), pr};
}

// Grid: light lines at every tick (fainter at unlabelled log minors) behind the data.
void draw_grid(cairo_t* cr, const Style& st, const Layout& L) {
  const Rect& pr = L.pr;
  cairo_set_line_width(cr, 1 * st.s);
  for (const auto& [axis, vertical] : {std::pair{&L.ax, true}, std::pair{&L.ay, false}})
    for (const auto& t : axis->ticks) {
      set_rgb(cr, t.label.empty() ? 0xf3f3f3 : 0xe3e3e3);
      const auto p = to_px(pr, t.frac, t.frac);
      if (vertical) cairo_move_to(cr, p[0], pr.y0), cairo_line_to(cr, p[0], pr.y1);
      else cairo_move_to(cr, pr.x0, p[1]), cairo_line_to(cr, pr.x1, p[1]);
      cairo_stroke(cr);
    }
}

// Dashed labelled reference lines (Chart::hlines) inside the plot area; returns the pixel row of each
// one drawn, for the legend placement.
std::vector<double> draw_hlines(cairo_t* cr, const Chart& c, const Style& st, const Layout& L) {
  const Rect& pr = L.pr;
  const double s = st.s;
  std::vector<double> hline_px;
  const double dash[] = {6 * s, 4 * s};
  for (const auto& [label, v] : c.hlines) {
    const double y = to_px(pr, 0, L.ay.frac(v))[1];
    if (y < pr.y0 - 1 || y > pr.y1 + 1) continue;
    hline_px.push_back(y);
    set_rgb(cr, 0x555555);
    cairo_set_line_width(cr, 1.3 * s);
    cairo_set_dash(cr, dash, 2, 0);
    cairo_move_to(cr, pr.x0, y);
    cairo_line_to(cr, pr.x1, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
    set_font(cr, st.f_tick);
    const bool below = y - pr.y0 < st.f_tick * 1.5;  // no room above the line at the top edge
    draw_text(cr, label, pr.x1 - 4 * s, below ? y + 4 * s : y - 4 * s, 1, below ? 0 : 1);
  }
  return hline_px;
}

// Strokes one run (pixels) with the current source and width, clipping each segment to cliprect
// first; dots of radius `dot` go on every point inside cliprect when `markers`, and on a lone point
// (which has no segment to show it).
void draw_run(cairo_t* cr, const Run& run, const Rect& cliprect, bool markers, double dot) {
  bool pen = false;
  double pen_x = 0, pen_y = 0;
  for (size_t i = 0; i + 1 < run.size(); ++i) {
    double x0 = run[i][0], y0 = run[i][1], x1 = run[i + 1][0], y1 = run[i + 1][1];
    if (!clip_segment(cliprect, x0, y0, x1, y1)) { pen = false; continue; }
    if (!pen || x0 != pen_x || y0 != pen_y) cairo_move_to(cr, x0, y0);
    cairo_line_to(cr, x1, y1);
    pen = true, pen_x = x1, pen_y = y1;
  }
  cairo_stroke(cr);
  for (const auto& p : run)
    if ((run.size() == 1 || markers) && p[0] >= cliprect.x0 && p[0] <= cliprect.x1 && p[1] >= cliprect.y0 &&
        p[1] <= cliprect.y1) {
      cairo_new_sub_path(cr);
      cairo_arc(cr, p[0], p[1], dot, 0, 2 * M_PI);
      cairo_fill(cr);
    }
}

// Draws every series in its palette colour; returns their runs in pixels (per series), for the
// legend placement.
std::vector<std::vector<Run>> draw_series(cairo_t* cr, const Chart& c, const Style& st, const Layout& L) {
  const Rect& pr = L.pr;
  const double s = st.s;
  // Segments are clipped to the plot area grown by a margin (so line caps at the edge are cut by
  // cairo's clip, not by us) before cairo sees them.
  const Rect cliprect{pr.x0 - 10 * s, pr.y0 - 10 * s, pr.x1 + 10 * s, pr.y1 + 10 * s};
  std::vector<std::vector<Run>> all;  // per series
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  for (size_t si = 0; si < c.series.size(); ++si) {
    all.push_back(runs_px(c.series[si], L.ax, L.ay, pr));
    set_rgb(cr, kPalette[si % 10]);
    cairo_set_line_width(cr, 2 * s);
    for (const auto& run : all.back()) draw_run(cr, run, cliprect, c.series[si].markers, 3 * s);
  }
  return all;
}

// Frame of the plot area, ticks and tick labels.
void draw_axes(cairo_t* cr, const Style& st, const Layout& L) {
  const Rect& pr = L.pr;
  const double tick_len = st.tick_len, gap = st.gap;
  set_rgb(cr, 0x333333);
  cairo_set_line_width(cr, 1 * st.s);
  cairo_rectangle(cr, pr.x0, pr.y0, pr.x1 - pr.x0, pr.y1 - pr.y0);
  cairo_stroke(cr);
  set_font(cr, st.f_tick);
  for (const auto& t : L.ax.ticks) {
    const double x = to_px(pr, t.frac, 0)[0], len = t.label.empty() ? tick_len / 2 : tick_len;
    cairo_move_to(cr, x, pr.y1), cairo_line_to(cr, x, pr.y1 + len), cairo_stroke(cr);
    if (!t.label.empty()) draw_text(cr, t.label, x, pr.y1 + tick_len + gap, 0.5, 0);
  }
  for (const auto& t : L.ay.ticks) {
    const double y = to_px(pr, 0, t.frac)[1], len = t.label.empty() ? tick_len / 2 : tick_len;
    cairo_move_to(cr, pr.x0, y), cairo_line_to(cr, pr.x0 - len, y), cairo_stroke(cr);
    if (!t.label.empty()) draw_text(cr, t.label, pr.x0 - tick_len - gap, y, 1, 0.5);
  }
}

// Axis labels (the y label rotated) and the bold title.
void draw_titles(cairo_t* cr, const Chart& c, const Style& st, const Rect& pr) {
  const double H = c.height, pad = st.pad, f_label = st.f_label;
  set_rgb(cr, 0x000000);
  set_font(cr, f_label);
  if (!c.x_label.empty()) draw_text(cr, c.x_label, (pr.x0 + pr.x1) / 2, H - pad - f_label * 0.25, 0.5, 1);
  if (!c.y_label.empty()) {
    cairo_save(cr);
    cairo_translate(cr, pad + f_label * 0.75, (pr.y0 + pr.y1) / 2);
    cairo_rotate(cr, -M_PI / 2);
    draw_text(cr, c.y_label, 0, 0, 0.5, 0.5);
    cairo_restore(cr);
  }
  if (!c.title.empty()) {
    set_font(cr, st.f_title, true);
    draw_text(cr, c.title, (pr.x0 + pr.x1) / 2, pad, 0.5, 0);
  }
}

// Legend of the labelled series: in the corner of the plot area where it hides the least of the data
// (`all`: runs per series, `hline_px`: reference lines; top right first, where a falling loss curve
// leaves room). Nothing when no series has a label.
void draw_legend(cairo_t* cr, const Chart& c, const Style& st, const Rect& pr,
                 const std::vector<std::vector<Run>>& all, const std::vector<double>& hline_px) {
  const double s = st.s, pad = st.pad, gap = st.gap;
  set_font(cr, st.f_legend);
  double text_w = 0;
  int rows = 0;
  for (const Series& se : c.series)
    if (!se.label.empty()) text_w = std::max(text_w, text_width(cr, se.label)), ++rows;
  if (rows == 0) return;
  const double row_h = st.f_legend * 1.5, sample = 24 * s, inset = 8 * s;
  const double bw = pad + sample + gap + text_w + pad, bh = pad * 0.6 * 2 + rows * row_h;
  Rect best{};
  int best_cov = -1;
  for (auto [right_side, top_side] : {std::pair{true, true}, {false, true}, {true, false}, {false, false}}) {
    const double x0 = right_side ? pr.x1 - inset - bw : pr.x0 + inset;
    const double y0 = top_side ? pr.y0 + inset : pr.y1 - inset - bh;
    const Rect box{x0, y0, x0 + bw, y0 + bh};
    const int cov = coverage(box, all, hline_px);
    if (best_cov < 0 || cov < best_cov) best = box, best_cov = cov;
  }
  cairo_rectangle(cr, best.x0, best.y0, bw, bh);
  set_rgb(cr, 0xffffff, 0.9);
  cairo_fill_preserve(cr);
  set_rgb(cr, 0xbbbbbb);
  cairo_set_line_width(cr, 1 * s);
  cairo_stroke(cr);
  double y = best.y0 + pad * 0.6 + row_h / 2;
  for (size_t si = 0; si < c.series.size(); ++si) {
    if (c.series[si].label.empty()) continue;
    set_rgb(cr, kPalette[si % 10]);
    cairo_set_line_width(cr, 2 * s);
    cairo_move_to(cr, best.x0 + pad, y), cairo_line_to(cr, best.x0 + pad + sample, y), cairo_stroke(cr);
    if (c.series[si].markers) cairo_arc(cr, best.x0 + pad + sample / 2, y, 3 * s, 0, 2 * M_PI), cairo_fill(cr);
    set_rgb(cr, 0x222222);
    draw_text(cr, c.series[si].label, best.x0 + pad + sample + gap, y, 0, 0.5);
    y += row_h;
  }
}

// The finished image as PNG file bytes.
std::string encode_png(cairo_surface_t* surface) {
  cairo_surface_flush(surface);
  std::string png;
  // The callback runs inside C code: no exception may cross it, so allocation failure becomes a status.
  auto write = [](void* closure, const unsigned char* data, unsigned int n) -> cairo_status_t {
    try {
      static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), n);
      return CAIRO_STATUS_SUCCESS;
    } catch (...) {
      return CAIRO_STATUS_NO_MEMORY;
    }
  };
  check(cairo_surface_write_to_png_stream(surface, write, &png), "encode the PNG");
  return png;
}

}  // namespace

std::string render_png(const Chart& c) {
  validate(c);
  const Style st = style_for(c);
  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, c.width, c.height), &cairo_surface_destroy);
  check(cairo_surface_status(surface.get()), "create the image");
  Context ctx(cairo_create(surface.get()), &cairo_destroy);
  cairo_t* cr = ctx.get();
  check(cairo_status(cr), "create a context");
  cairo_set_antialias(cr, CAIRO_ANTIALIAS_GOOD);
  set_rgb(cr, 0xffffff);
  cairo_paint(cr);

  const Layout L = lay_out(cr, c, st);
  draw_grid(cr, st, L);
  // Everything data-bound is clipped to the plot area.
  cairo_save(cr);
  cairo_rectangle(cr, L.pr.x0, L.pr.y0, L.pr.x1 - L.pr.x0, L.pr.y1 - L.pr.y0);
  cairo_clip(cr);
  const std::vector<double> hline_px = draw_hlines(cr, c, st, L);
  const std::vector<std::vector<Run>> all = draw_series(cr, c, st, L);
  cairo_restore(cr);
  draw_axes(cr, st, L);
  draw_titles(cr, c, st, L.pr);
  draw_legend(cr, c, st, L.pr, all, hline_px);

  check(cairo_status(cr), "draw");
  return encode_png(surface.get());
}

void release_font_caches() {
  cairo_debug_reset_static_data();  // cairo's font-face caches hold fontconfig patterns: drop them first
  FcFini();                         // then fontconfig's own configuration and caches
}

}  // namespace plot
