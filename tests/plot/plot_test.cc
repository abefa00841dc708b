// plot::render_png: valid PNGs of the requested size, series drawn in their palette colours inside
// the plot area and clipped to it, log axes mapping straight lines straight, NaN gaps, nice ticks,
// and every invalid chart rejected with a message. PNGs are decoded back with cairo.
#include <gtest/gtest.h>
#include <cairo.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "plot/plot.h"
#include "plot/ticks.h"

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// cairo and fontconfig keep process-wide font caches; freeing them once at the end keeps
// LeakSanitizer (debug preset) quiet without hiding real leaks in render_png.
class ReleaseFontCaches : public ::testing::Environment {
  void TearDown() override { plot::release_font_caches(); }
};
const auto* const kReleaseFontCaches = ::testing::AddGlobalTestEnvironment(new ReleaseFontCaches);

// A decoded image: 0xRRGGBB per pixel, row-major.
struct Image {
  int w = 0, h = 0;
  std::vector<uint32_t> px;
  uint32_t at(int x, int y) const { return px[size_t(y) * w + x]; }
};

Image decode(const std::string& png) {
  struct Reader { const std::string* s; size_t pos; } r{&png, 0};
  auto read = [](void* closure, unsigned char* data, unsigned int n) -> cairo_status_t {
    auto* rd = static_cast<Reader*>(closure);
    if (rd->pos + n > rd->s->size()) return CAIRO_STATUS_READ_ERROR;
    std::copy_n(rd->s->data() + rd->pos, n, data);
    rd->pos += n;
    return CAIRO_STATUS_SUCCESS;
  };
  cairo_surface_t* surf = cairo_image_surface_create_from_png_stream(read, &r);
  Image img;
  if (cairo_surface_status(surf) == CAIRO_STATUS_SUCCESS) {
    cairo_surface_flush(surf);
    img.w = cairo_image_surface_get_width(surf);
    img.h = cairo_image_surface_get_height(surf);
    const int stride = cairo_image_surface_get_stride(surf);
    const unsigned char* data = cairo_image_surface_get_data(surf);
    for (int y = 0; y < img.h; ++y)
      for (int x = 0; x < img.w; ++x)
        img.px.push_back(reinterpret_cast<const uint32_t*>(data + size_t(y) * stride)[x] & 0xffffff);
  }
  cairo_surface_destroy(surf);
  return img;
}

uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Pixels of exactly colour `rgb` in the box [x0, x1) x [y0, y1) (line centres are fully covered,
// so anti-aliasing leaves them exact).
int count(const Image& img, uint32_t rgb, int x0, int y0, int x1, int y1) {
  int n = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) n += img.at(x, y) == rgb;
  return n;
}

void expect_invalid(const plot::Chart& c, const std::string& fragment) {
  try {
    plot::render_png(c);
    ADD_FAILURE() << "rendered; expected an error containing '" << fragment << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

plot::Chart two_lines() {
  plot::Chart c;
  c.title = "Training loss";
  c.x_label = "step";
  c.y_label = "loss";
  plot::Series a{"train", {}, {}}, b{"validation", {}, {}};
  for (int i = 0; i <= 100; ++i) {
    a.x.push_back(i * 100), a.y.push_back(10.0 - 0.08 * i);  // both diagonals cross the centre
    b.x.push_back(i * 100), b.y.push_back(2.0 + 0.08 * i);
  }
  c.series = {a, b};
  c.hlines = {{"unigram baseline", 6.5}};
  return c;
}

TEST(Plot, WritesAPngOfTheRequestedSize) {
  plot::Chart c = two_lines();
  c.width = 640, c.height = 300;
  const std::string png = plot::render_png(c);
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(png, 16), 640u);
  EXPECT_EQ(be32(png, 20), 300u);
  const Image img = decode(png);
  EXPECT_EQ(img.w, 640);
  EXPECT_EQ(img.h, 300);
  EXPECT_EQ(img.at(0, 0), 0xffffffu) << "white background";
  std::ofstream(::testing::TempDir() + "plot_example.png", std::ios::binary) << plot::render_png(two_lines());
}

TEST(Plot, DrawsEachSeriesInItsPaletteColourInsideThePlotArea) {
  const Image img = decode(plot::render_png(two_lines()));
  ASSERT_EQ(img.w, 900);
  // The central box holds only the crossing lines (legend and labels live near the edges).
  const int x0 = img.w * 3 / 10, x1 = img.w * 7 / 10, y0 = img.h * 3 / 10, y1 = img.h * 7 / 10;
  EXPECT_GT(count(img, plot::kPalette[0], x0, y0, x1, y1), 100);
  EXPECT_GT(count(img, plot::kPalette[1], x0, y0, x1, y1), 100);
  EXPECT_EQ(count(img, plot::kPalette[2], 0, 0, img.w, img.h), 0) << "only two series";
}

TEST(Plot, ClipsLinesToThePlotArea) {
  plot::Chart c;
  c.series = {{"", {0, 1, 2, 3}, {0, 1e6, -1e300, 1}}};  // far outside the overridden range
  c.y_min = 0, c.y_max = 1;
  const Image img = decode(plot::render_png(c));
  const uint32_t blue = plot::kPalette[0];
  EXPECT_GT(count(img, blue, 0, 0, img.w, img.h), 50);
  EXPECT_EQ(count(img, blue, 0, 0, img.w, 12), 0) << "nothing above the plot area";
  EXPECT_EQ(count(img, blue, 0, img.h - 25, img.w, img.h), 0) << "nothing below it";
}

// On a log y axis y = 10^(x/40) is a straight line: the centre of the blue in each column lies on a
// line. The centre weights each pixel by its blueness (b - r), so anti-aliased edges count too;
// grey grid lines and black text have b == r and weigh nothing. No label: no legend in the way.
double straightness_residual(bool log_y) {
  plot::Chart c;
  c.log_y = log_y;
  plot::Series s{"", {}, {}};
  for (int i = 0; i <= 200; ++i) s.x.push_back(i * 0.5), s.y.push_back(std::pow(10.0, i * 0.5 / 40));
  c.series = {s};
  const Image img = decode(plot::render_png(c));
  std::vector<double> xs, ys;
  for (int x = img.w / 10; x < img.w * 9 / 10; ++x) {
    double sum = 0, weight = 0;
    for (int y = 0; y < img.h; ++y) {
      const int r = img.at(x, y) >> 16, b = img.at(x, y) & 255;
      if (b > r) sum += y * (b - r), weight += b - r;
    }
    if (weight > 0) xs.push_back(x), ys.push_back(sum / weight);
  }
  EXPECT_GT(xs.size(), size_t(img.w * 7 / 10));
  const double n = xs.size();
  double mx = 0, my = 0;
  for (size_t i = 0; i < xs.size(); ++i) mx += xs[i] / n, my += ys[i] / n;
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < xs.size(); ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) worst = std::max(worst, std::fabs(ys[i] - my - sxy / sxx * (xs[i] - mx)));
  return worst;
}

TEST(Plot, LogAxesMapDecadesLinearly) {
  EXPECT_LT(straightness_residual(true), 0.5);
  EXPECT_GT(straightness_residual(false), 20) << "the same data on a linear axis curves";

  plot::Chart c;
  c.log_x = c.log_y = true;
  c.series = {{"power law", {1, 10, 100, 1000, 1e4}, {1e-3, 1e-2, 1e-1, 1, 10}}};
  const Image img = decode(plot::render_png(c));
  EXPECT_GT(count(img, plot::kPalette[0], img.w * 3 / 10, img.h * 3 / 10, img.w * 7 / 10, img.h * 7 / 10), 50);
}

TEST(Plot, NonFinitePointsBreakTheLine) {
  plot::Chart c;
  plot::Series s{"loss", {}, {}};
  for (int i = 0; i <= 100; ++i) {
    s.x.push_back(i);
    s.y.push_back(i >= 35 && i <= 65 ? (i % 2 ? kNaN : std::numeric_limits<double>::infinity()) : 1.0);
  }
  s.x[70] = kNaN;  // a NaN x breaks the line too
  c.series = {s};
  const Image img = decode(plot::render_png(c));
  const uint32_t blue = plot::kPalette[0];
  // x in 0..100 spans the plot area, so the gap 35..65 covers the middle of the image.
  EXPECT_EQ(count(img, blue, img.w / 2 - 40, 0, img.w / 2 + 40, img.h), 0);
  EXPECT_GE(count(img, blue, img.w / 5, 0, img.w / 5 + 40, img.h), 40) << "a line on both sides";

  c.series = {{"", {kNaN, 1}, {2, kNaN}}};  // nothing finite: an empty frame, no error
  EXPECT_EQ(count(decode(plot::render_png(c)), blue, 0, 0, 900, 560), 0);
}

TEST(Plot, IsolatedPointsAndMarkersAreVisible) {
  plot::Chart c;
  c.series = {{"one", {1}, {1}}, {"sparse", {0, 1, 2}, {0, 2, 1}, true}};
  const Image img = decode(plot::render_png(c));
  EXPECT_GT(count(img, plot::kPalette[0], 0, 0, img.w, img.h), 10);
}

TEST(Plot, DenseSeriesKeepTheirSpikes) {
  // 400k points, about 480 per pixel column, flat at 0 but for a one-point spike to 1 every 1000
  // points: the renderer thins each column to its first, last, lowest and highest points, and no
  // spike may get lost in that.
  plot::Chart c;
  plot::Series s{"", {}, {}};
  for (int i = 0; i < 400000; ++i) s.x.push_back(i), s.y.push_back(i % 1000 == 500 ? 1 : 0);
  c.series = {s};
  const Image img = decode(plot::render_png(c));
  int columns = 0, spiked = 0;
  for (int x = img.w * 3 / 10; x < img.w * 7 / 10; ++x, ++columns)
    spiked += count(img, plot::kPalette[0], x, img.h / 5, x + 1, img.h / 2) > 0;
  EXPECT_GT(spiked, columns / 3) << "a spike every ~2 columns, each a few pixels wide";
}

TEST(Plot, NiceTicks) {
  using plot::detail::make_axis;
  EXPECT_DOUBLE_EQ(plot::detail::nice_step(0.13), 0.2);
  EXPECT_DOUBLE_EQ(plot::detail::nice_step(3), 5);
  EXPECT_DOUBLE_EQ(plot::detail::nice_step(7), 10);
  EXPECT_DOUBLE_EQ(plot::detail::nice_step(1e-4), 1e-4);
  auto labels = [](const plot::detail::Axis& a) {
    std::vector<std::string> out;
    for (const auto& t : a.ticks)
      if (!t.label.empty()) out.push_back(t.label);
    return out;
  };
  const auto lin = make_axis(false, {0.03, 0.97}, std::nullopt, std::nullopt, 5);
  EXPECT_EQ(labels(lin), (std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}));
  EXPECT_DOUBLE_EQ(lin.ticks.back().frac, 1.0);
  const auto big = make_axis(false, {0, 3e8}, std::nullopt, std::nullopt, 3);
  EXPECT_EQ(labels(big), (std::vector<std::string>{"0", "1e8", "2e8", "3e8"}));
  const auto log = make_axis(true, {2e-3, 40}, std::nullopt, std::nullopt, 6);
  EXPECT_EQ(labels(log), (std::vector<std::string>{"0.001", "0.01", "0.1", "1", "10", "100"}));
  EXPECT_GT(log.ticks.size(), 30u) << "2..9 minor ticks";
  const auto one_decade = make_axis(true, {2, 3}, 1.5, 40.0, 6);  // under two decades: 1-2-5 labels
  EXPECT_EQ(labels(one_decade), (std::vector<std::string>{"2", "5", "10", "20"}));
  const auto narrow = make_axis(true, {2, 3}, 1.5, 8.0, 6);  // within a decade: every mantissa
  EXPECT_EQ(labels(narrow), (std::vector<std::string>{"2", "3", "4", "5", "6", "7", "8"}));
  const auto tiny = make_axis(true, {2, 3}, 2.01, 2.05, 6);  // no mantissa inside: linear steps
  EXPECT_EQ(labels(tiny), (std::vector<std::string>{"2.01", "2.02", "2.03", "2.04", "2.05"}));
  const auto fixed = make_axis(false, {0, 10}, 1.5, std::nullopt, 5);
  EXPECT_DOUBLE_EQ(fixed.lo, 1.5) << "a fixed end is kept exactly";
}

TEST(Plot, RejectsInvalidCharts) {
  expect_invalid(plot::Chart{}, "no series");
  plot::Chart c = two_lines();
  c.series[1].y.pop_back();
  expect_invalid(c, "series 1 ('validation'): x has 101 values but y has 100");
  c = two_lines();
  c.series[0].x.clear(), c.series[0].y.clear();
  expect_invalid(c, "series 0 ('train') is empty");
  c = two_lines();
  c.log_y = true;
  c.series[0].y[3] = 0;
  expect_invalid(c, "y[3] = 0 is not positive on a log y axis");
  c = two_lines();
  c.log_x = true;  // x starts at 0
  expect_invalid(c, "x[0] = 0 is not positive on a log x axis");
  c = two_lines();
  c.width = 99;
  expect_invalid(c, "width 99 is outside [100, 8000]");
  c = two_lines();
  c.height = 8001;
  expect_invalid(c, "height 8001 is outside [100, 8000]");
  c = two_lines();
  c.y_min = 3, c.y_max = 1;
  expect_invalid(c, "y_min (3) must be less than y_max (1)");
  c = two_lines();
  c.y_max = kNaN;
  expect_invalid(c, "y_max is not finite");
  c = two_lines();
  c.log_y = true;
  c.y_min = -1;
  expect_invalid(c, "y_min = -1 is not positive on a log y axis");
  c = two_lines();
  c.log_y = true;
  c.hlines = {{"zero", 0}};
  expect_invalid(c, "hline 'zero' = 0 is not positive");
  c = two_lines();
  c.hlines = {{"inf", std::numeric_limits<double>::infinity()}};
  expect_invalid(c, "hline 'inf' is not finite");
  c = two_lines();
  c.series[0].y[0] = -1e308, c.series[0].y[1] = 1e308;
  expect_invalid(c, "too wide");
}

}  // namespace
