// CarRacing-v3's 96x96x3 observation: what Gymnasium's `_render("state_pixels")`
// draws, rasterized in software.
//
// Gymnasium draws on a 1000x800 pygame surface (field, grass squares, road
// and kerb polygons, the car's wheels and hull; then flips it vertically and
// draws the indicator bar and the score) and shrinks it to 96x96 with
// pygame's smoothscale, an area average.  Here every convex polygon is filled
// at 4x4 samples per output pixel (the sample grid maps onto the same screen
// rectangle each output pixel averages), storing a palette index per sample;
// `resolve` then averages each pixel's 16 samples (the canvas is the worker
// thread's, reused by every env it steps).  The picture matches
// Gymnasium's up to the edges: pygame's fill rules, gfxdraw's anti-aliased
// outlines and its integer vertex coordinates shift edges by up to one
// screen pixel (a tenth of an output pixel), and the score is drawn with
// seven-segment digits of our own instead of pygame's font.  Nothing is
// allocated per frame.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "car_racing_sim.h"

namespace torchfrag {
namespace box2d {

namespace car_racing {
constexpr int kStateSize = 96;
constexpr double kWindowW = 1000.0;
constexpr double kWindowH = 800.0;
constexpr double kZoom = 2.7;
constexpr double kGrassDim = kPlayfield / 20.0;
}  // namespace car_racing

// A palette-indexed canvas of kSub x kSub samples per output pixel.
class PaletteCanvas {
 public:
  static constexpr int kSub = 4;
  static constexpr int kSide = car_racing::kStateSize * kSub;

  PaletteCanvas() : samples_(static_cast<size_t>(kSide) * kSide, 0) {}

  void clear(uint8_t index) { std::fill(samples_.begin(), samples_.end(), index); }

  // Fills the samples whose centres lie inside the convex polygon `xy`
  // (n vertices, canvas coordinates: one unit per sample).
  void fill_convex(const double* xy, int n, uint8_t index) {
    double ymin = xy[1], ymax = xy[1], xmin = xy[0], xmax = xy[0];
    for (int k = 1; k < n; ++k) {
      ymin = std::min(ymin, xy[2 * k + 1]);
      ymax = std::max(ymax, xy[2 * k + 1]);
      xmin = std::min(xmin, xy[2 * k]);
      xmax = std::max(xmax, xy[2 * k]);
    }
    if (xmax < 0.0 || xmin > kSide || ymax < 0.0 || ymin > kSide) return;
    // Each edge's x at row centre yc is xa + (yc - ya) * slope: one division per edge.
    double ya[8], yb[8], xa[8], slope[8];
    int edges = 0;
    for (int k = 0; k < n && k < 8; ++k) {
      const int j = k + 1 == n ? 0 : k + 1;
      if (xy[2 * k + 1] == xy[2 * j + 1]) continue;  // horizontal: the others bound its rows
      ya[edges] = std::min(xy[2 * k + 1], xy[2 * j + 1]);
      yb[edges] = std::max(xy[2 * k + 1], xy[2 * j + 1]);
      slope[edges] = (xy[2 * j] - xy[2 * k]) / (xy[2 * j + 1] - xy[2 * k + 1]);
      xa[edges] = xy[2 * k] + (ya[edges] - xy[2 * k + 1]) * slope[edges];
      ++edges;
    }
    const int v0 = std::max(0, static_cast<int>(std::ceil(ymin - 0.5)));
    const int v1 = std::min(kSide - 1, static_cast<int>(std::floor(ymax - 0.5)));
    for (int v = v0; v <= v1; ++v) {
      const double yc = v + 0.5;
      double xl = 1e300, xr = -1e300;
      for (int e = 0; e < edges; ++e) {
        if (yc < ya[e] || yc > yb[e]) continue;
        const double x = xa[e] + (yc - ya[e]) * slope[e];
        xl = std::min(xl, x);
        xr = std::max(xr, x);
      }
      const int u0 = std::max(0, static_cast<int>(std::ceil(xl - 0.5)));
      const int u1 = std::min(kSide, static_cast<int>(std::ceil(xr - 0.5)));
      if (u1 > u0) {
        std::memset(&samples_[static_cast<size_t>(v) * kSide + u0], index,
                    static_cast<size_t>(u1 - u0));
      }
    }
  }

  // An axis-aligned rectangle [x0, x1) x [y0, y1) (either corner order).
  void fill_rect(double x0, double y0, double x1, double y1, uint8_t index) {
    const double xy[8] = {x0, y0, x1, y0, x1, y1, x0, y1};
    fill_convex(xy, 4, index);
  }

  // Averages each output pixel's samples into `rgb` (96x96x3, row-major).
  // smoothscale's two fixed-point passes (x, then y) each multiply by a
  // reciprocal rounded down and truncate, so a flat colour v comes out as
  // v - 2 (v > 1): the average here is lowered by 1.5 and truncated.
  template <size_t N>
  void resolve(const std::array<std::array<uint8_t, 3>, N>& palette, uint8_t* rgb) const {
    static_assert(kSub == 4, "the flat-pixel test reads a pixel's 4 samples per row as one word");
    constexpr int kOut = car_racing::kStateSize;
    constexpr uint32_t kBias = kSub * kSub * 3 / 2;
    auto average = [](uint32_t sum) {
      return static_cast<uint8_t>(sum > kBias ? (sum - kBias) / (kSub * kSub) : 0);
    };
    std::array<std::array<uint8_t, 3>, N> flat;  // a pixel whose 16 samples agree
    for (size_t k = 0; k < N; ++k) {
      for (int c = 0; c < 3; ++c) flat[k][c] = average(palette[k][c] * kSub * kSub);
    }
    for (int j = 0; j < kOut; ++j) {
      const uint8_t* rows = &samples_[static_cast<size_t>(j * kSub) * kSide];
      uint8_t* out = rgb + static_cast<size_t>(j) * kOut * 3;
      for (int i = 0; i < kOut; ++i, out += 3) {
        uint32_t w[kSub];
        for (int dv = 0; dv < kSub; ++dv) std::memcpy(&w[dv], rows + dv * kSide + i * kSub, 4);
        if (w[0] == w[1] && w[0] == w[2] && w[0] == w[3] && w[0] == (w[0] & 0xFFu) * 0x01010101u) {
          const auto& c = flat[w[0] & 0xFFu];
          out[0] = c[0];
          out[1] = c[1];
          out[2] = c[2];
          continue;
        }
        uint32_t sum[3] = {0, 0, 0};
        for (int dv = 0; dv < kSub; ++dv) {
          const uint8_t* px = rows + dv * kSide + i * kSub;
          for (int du = 0; du < kSub; ++du) {
            const auto& c = palette[px[du]];
            sum[0] += c[0];
            sum[1] += c[1];
            sum[2] += c[2];
          }
        }
        out[0] = average(sum[0]);
        out[1] = average(sum[1]);
        out[2] = average(sum[2]);
      }
    }
  }

 private:
  std::vector<uint8_t> samples_;
};

// Draws a CarRacingSim's state as Gymnasium's state_pixels.
class CarRacingRenderer {
 public:
  enum Colour : uint8_t {
    kBlack, kBackground, kGrass, kRoad0, kRoad1, kRoad2, kWhite, kRed, kHull, kWheelWhite,
    kBlue, kViolet, kGreen, kCount
  };
  using Palette = std::array<std::array<uint8_t, 3>, kCount>;

  CarRacingRenderer() { set_colours({102, 102, 102}, {102, 204, 102}, {102, 230, 102}); }

  // Gymnasium's road_color, bg_color and grass_color (floats under
  // domain_randomize); the road's three shades add 0, 2.55 and 5.1 and
  // truncate, as `int(c)` does.
  void set_colours(const std::array<double, 3>& road, const std::array<double, 3>& bg,
                   const std::array<double, 3>& grass) {
    auto trunc = [](double v) { return static_cast<uint8_t>(std::clamp(v, 0.0, 255.0)); };
    for (int c = 0; c < 3; ++c) {
      palette_[kBackground][c] = trunc(bg[c]);
      palette_[kGrass][c] = trunc(grass[c]);
      for (int k = 0; k < 3; ++k) palette_[kRoad0 + k][c] = trunc(road[c] + 0.01 * k * 255);
    }
    palette_[kBlack] = {0, 0, 0};
    palette_[kWhite] = {255, 255, 255};
    palette_[kRed] = {255, 0, 0};
    palette_[kHull] = {204, 0, 0};  // int(0.8 * 255)
    palette_[kWheelWhite] = {77, 77, 77};
    palette_[kBlue] = {0, 0, 255};
    palette_[kViolet] = {51, 0, 255};
    palette_[kGreen] = {0, 255, 0};
  }

  // `t` is Gymnasium's self.t (seconds since reset, 1/50 per step, the
  // reset's own step included); `score` its self.reward.
  void draw(const CarRacingSim& sim, double t, uint8_t* rgb) {
    using namespace car_racing;
    // One canvas per worker thread, not per env: 147 KB that stays in cache
    // from one env's frame to the next, and no memory per env.
    static thread_local PaletteCanvas canvas;
    canvas_ = &canvas;
    canvas_->clear(kBlack);
    const b2Body* hull = sim.hull();
    const double angle = -static_cast<double>(hull->GetAngle());
    const double zoom = 0.1 * kScale * std::max(1 - t, 0.0) + kZoom * kScale * std::min(t, 1.0);
    const double ca = std::cos(angle), sa = std::sin(angle);
    const double scroll_x = -static_cast<double>(hull->GetPosition().x) * zoom;
    const double scroll_y = -static_cast<double>(hull->GetPosition().y) * zoom;
    // World -> canvas: rotate, zoom, translate (pygame's screen), flip y,
    // scale the 1000x800 screen onto the canvas.
    const double kx = PaletteCanvas::kSide / kWindowW, ky = PaletteCanvas::kSide / kWindowH;
    const double tx = kWindowW / 2 + scroll_x * ca - scroll_y * sa;
    const double ty = kWindowH / 4 + scroll_x * sa + scroll_y * ca;
    xx_ = ca * zoom * kx;
    xy_ = -sa * zoom * kx;
    x0_ = tx * kx;
    yx_ = -sa * zoom * ky;
    yy_ = -ca * zoom * ky;
    y0_ = (kWindowH - ty) * ky;

    const double field[8] = {kPlayfield, kPlayfield, kPlayfield, -kPlayfield,
                             -kPlayfield, -kPlayfield, -kPlayfield, kPlayfield};
    world_polygon(field, 4, kBackground);
    for (int x = -20; x < 20; x += 2) {
      for (int y = -20; y < 20; y += 2) {
        const double g[8] = {kGrassDim * x + kGrassDim, kGrassDim * y,
                             kGrassDim * x,             kGrassDim * y,
                             kGrassDim * x,             kGrassDim * y + kGrassDim,
                             kGrassDim * x + kGrassDim, kGrassDim * y + kGrassDim};
        world_polygon(g, 4, kGrass);
      }
    }
    for (const TrackPolygon& p : sim.track().polygons) {
      const uint8_t colour = p.kind == TrackPolygon::kRoad
                                 ? static_cast<uint8_t>(kRoad0 + (sim.tile_plain(p.tile) ? 0 : p.tile % 3))
                                 : (p.kind == TrackPolygon::kWhite ? kWhite : kRed);
      world_polygon(p.xy.data(), 4, colour);
    }
    draw_car(sim);
    draw_indicators(sim);
    draw_score(sim.total_reward());
    canvas_->resolve(palette_, rgb);
  }

 private:
  void world_polygon(const double* xy, int n, uint8_t colour) {
    double c[16];
    for (int k = 0; k < n; ++k) {
      c[2 * k] = xx_ * xy[2 * k] + xy_ * xy[2 * k + 1] + x0_;
      c[2 * k + 1] = yx_ * xy[2 * k] + yy_ * xy[2 * k + 1] + y0_;
    }
    canvas_->fill_convex(c, n, colour);
  }

  // A polygon in a body's frame (units of car::kSize times `scale`).
  void body_polygon(const b2Body* body, const int (*pts)[2], int n, uint8_t colour) {
    const b2Transform& xf = body->GetTransform();
    double w[16];
    for (int k = 0; k < n; ++k) {
      const double lx = pts[k][0] * car::kSize, ly = pts[k][1] * car::kSize;
      w[2 * k] = xf.q.c * lx - xf.q.s * ly + xf.p.x;
      w[2 * k + 1] = xf.q.s * lx + xf.q.c * ly + xf.p.y;
    }
    world_polygon(w, n, colour);
  }

  // Car.draw without particles: the wheels (each with its rotating stripe)
  // and then the hull, drawlist's order.
  void draw_car(const CarRacingSim& sim) {
    using namespace car;
    for (const CarRacingSim::Wheel& wheel : sim.wheels()) {
      body_polygon(wheel.body, kWheelPoly, 4, kBlack);
      const double s1 = std::sin(wheel.phase), s2 = std::sin(wheel.phase + 1.2);
      double c1 = std::cos(wheel.phase), c2 = std::cos(wheel.phase + 1.2);
      if (s1 > 0 && s2 > 0) continue;
      if (s1 > 0) c1 = c1 > 0 ? 1.0 : (c1 < 0 ? -1.0 : 0.0);
      if (s2 > 0) c2 = c2 > 0 ? 1.0 : (c2 < 0 ? -1.0 : 0.0);
      const b2Transform& xf = wheel.body->GetTransform();
      const double local[8] = {-kWheelW * kSize, kWheelR * c1 * kSize, kWheelW * kSize,
                               kWheelR * c1 * kSize, kWheelW * kSize, kWheelR * c2 * kSize,
                               -kWheelW * kSize, kWheelR * c2 * kSize};
      double w[8];
      for (int k = 0; k < 4; ++k) {
        w[2 * k] = xf.q.c * local[2 * k] - xf.q.s * local[2 * k + 1] + xf.p.x;
        w[2 * k + 1] = xf.q.s * local[2 * k] + xf.q.c * local[2 * k + 1] + xf.p.y;
      }
      world_polygon(w, 4, kWheelWhite);
    }
    const b2Body* hull = sim.hull();
    body_polygon(hull, kHull1, 4, kHull);
    body_polygon(hull, kHull2, 4, kHull);
    body_polygon(hull, kHull3, 8, kHull);
    body_polygon(hull, kHull4, 4, kHull);
  }

  // A rectangle in the flipped 1000x800 screen's pixels, as pygame.draw.polygon
  // fills it: both end columns and rows included, so one pixel wider and taller.
  void screen_rect(double x0, double y0, double x1, double y1, uint8_t colour) {
    const double kx = PaletteCanvas::kSide / car_racing::kWindowW;
    const double ky = PaletteCanvas::kSide / car_racing::kWindowH;
    if (x1 < x0) std::swap(x0, x1);
    if (y1 < y0) std::swap(y0, y1);
    canvas_->fill_rect(x0 * kx, y0 * ky, (x1 + 1) * kx, (y1 + 1) * ky, colour);
  }

  // _render_indicators: the black bar, speed, the four wheels' spin, the
  // steering angle and the hull's angular velocity.
  void draw_indicators(const CarRacingSim& sim) {
    using car_racing::kWindowH;
    using car_racing::kWindowW;
    const double s = kWindowW / 40.0, h = kWindowH / 40.0;
    screen_rect(0, kWindowH - 5 * h, kWindowW, kWindowH, kBlack);
    auto vertical = [&](int place, double value, double scaled, uint8_t colour) {
      if (std::abs(value) > 1e-4) {
        screen_rect(place * s, kWindowH - (h + h * scaled), (place + 1) * s, kWindowH - h, colour);
      }
    };
    auto horizontal = [&](int place, double value, double scaled, uint8_t colour) {
      if (std::abs(value) > 1e-4) {
        screen_rect(place * s, kWindowH - 4 * h, (place + scaled) * s, kWindowH - 2 * h, colour);
      }
    };
    const b2Body* hull = sim.hull();
    const double vx = hull->GetLinearVelocity().x, vy = hull->GetLinearVelocity().y;
    const double speed = std::sqrt(vx * vx + vy * vy);
    vertical(5, speed, 0.02 * speed, kWhite);
    const auto& w = sim.wheels();
    vertical(7, w[0].omega, 0.01 * w[0].omega, kBlue);
    vertical(8, w[1].omega, 0.01 * w[1].omega, kBlue);
    vertical(9, w[2].omega, 0.01 * w[2].omega, kViolet);
    vertical(10, w[3].omega, 0.01 * w[3].omega, kViolet);
    const double steer = w[0].joint->GetJointAngle();
    horizontal(20, steer, -10.0 * steer, kGreen);
    const double spin = hull->GetAngularVelocity();
    horizontal(30, spin, -0.8 * spin, kRed);
  }

  // The score as f"{reward:04.0f}" centred on (60, 750), white on black.
  // Seven-segment glyphs sized like pygame's default 42-point font (advance
  // about 23 px, digits about 30 px tall); pygame's glyphs differ in shape.
  void draw_score(double score) {
    static constexpr uint8_t kSegments[10] = {0x3F, 0x06, 0x5B, 0x4F, 0x66,
                                              0x6D, 0x7D, 0x07, 0x7F, 0x6F};  // gfedcba
    char text[32];
    const int n = std::snprintf(text, sizeof(text), "%04.0f", score);
    if (n <= 0 || n >= static_cast<int>(sizeof(text))) return;
    constexpr double kAdvance = 23.5, kTop = 731.0, kHeight = 31.0, kStroke = 6.0;
    const double left = 60.0 - kAdvance * n / 2;
    for (int k = 0; k < n; ++k) {
      uint8_t mask = 0;
      if (text[k] >= '0' && text[k] <= '9') mask = kSegments[text[k] - '0'];
      if (text[k] == '-') mask = 0x40;
      const double x0 = left + k * kAdvance + 1.5, x1 = x0 + kAdvance - 3.0;
      const double y0 = kTop, y1 = kTop + kHeight, ym = (y0 + y1) / 2;
      if (mask & 0x01) screen_rect(x0, y0, x1, y0 + kStroke, kWhite);
      if (mask & 0x02) screen_rect(x1 - kStroke, y0, x1, ym, kWhite);
      if (mask & 0x04) screen_rect(x1 - kStroke, ym, x1, y1, kWhite);
      if (mask & 0x08) screen_rect(x0, y1 - kStroke, x1, y1, kWhite);
      if (mask & 0x10) screen_rect(x0, ym, x0 + kStroke, y1, kWhite);
      if (mask & 0x20) screen_rect(x0, y0, x0 + kStroke, ym, kWhite);
      if (mask & 0x40) screen_rect(x0, ym - kStroke / 2, x1, ym + kStroke / 2, kWhite);
    }
  }

  PaletteCanvas* canvas_ = nullptr;  // this thread's, during draw()
  Palette palette_{};
  // The world -> canvas affine map of the current frame.
  double xx_ = 0, xy_ = 0, x0_ = 0, yx_ = 0, yy_ = 0, y0_ = 0;
};

}  // namespace box2d
}  // namespace torchfrag
