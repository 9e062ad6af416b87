// CarRacing-v3's track generator, draw for draw and rounding for rounding as
// Gymnasium 1.4's car_racing.py `_create_track`.
//
// Gymnasium draws the 12 checkpoints from its np_random (NumPy's PCG64, here
// NumpyRandom), walks a point towards them with a bounded turn rate, keeps the
// second full lap, and retries with fresh draws when the lap does not close.
// All arithmetic is Python's: doubles, in the script's order, with libm's
// atan2/cos/sin (CPython's math module calls the same functions), so a track
// built from the same seed is bit-identical.  This header holds the geometry
// only (centre line, border flags, the road and kerb polygons); the Box2D
// tiles and the car are not built here yet.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

#include "../numpy_random.h"

namespace torchfrag {
namespace box2d {

namespace car_racing {
constexpr double kScale = 6.0;
constexpr double kTrackRad = 900 / kScale;
constexpr double kPlayfield = 2000 / kScale;
constexpr double kTrackDetailStep = 21 / kScale;
constexpr double kTrackTurnRate = 0.31;
constexpr double kTrackWidth = 40 / kScale;
constexpr double kBorder = 8 / kScale;
constexpr int kBorderMinCount = 4;
constexpr int kCheckpoints = 12;
}  // namespace car_racing

// One centre-line sample: Gymnasium's (alpha, beta, x, y) tuple.
struct TrackPoint {
  double alpha, beta, x, y;
};

// A quadrilateral of the drawn road: a tile (kind kRoad, its index in the
// track) or a kerb stripe on a hard turn (kWhite on even tiles, kRed on odd).
struct TrackPolygon {
  enum Kind { kRoad, kWhite, kRed };
  std::array<double, 8> xy;  // (x, y) of road1_l, road1_r, road2_r, road2_l
  Kind kind;
  int tile;
};

struct Track {
  std::vector<TrackPoint> points;
  std::vector<bool> border;
  std::vector<TrackPolygon> polygons;  // in Gymnasium's road_poly order
  int attempts = 0;                    // _create_track calls, the successful one included
};

namespace detail {

inline double py_sign(double v) { return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : 0.0); }

// Python's seq[i] for i in [-n, n).
template <typename T>
inline const T& py_at(const std::vector<T>& v, long i) {
  const long n = static_cast<long>(v.size());
  return v[static_cast<size_t>(i < 0 ? i + n : i)];
}

// One `_create_track` attempt; false where Gymnasium's returns False.
inline bool try_create_track(NumpyRandom& rng, Track& out) {
  using namespace car_racing;
  constexpr double kPi = M_PI;
  std::array<std::array<double, 3>, kCheckpoints> checkpoints;
  double start_alpha = 0.0;
  for (int c = 0; c < kCheckpoints; ++c) {
    const double noise = rng.uniform(0, 2 * kPi * 1 / kCheckpoints);
    double alpha = 2 * kPi * c / kCheckpoints + noise;
    double rad = rng.uniform(kTrackRad / 3, kTrackRad);
    if (c == 0) {
      alpha = 0;
      rad = 1.5 * kTrackRad;
    }
    if (c == kCheckpoints - 1) {
      alpha = 2 * kPi * c / kCheckpoints;
      start_alpha = 2 * kPi * (-0.5) / kCheckpoints;
      rad = 1.5 * kTrackRad;
    }
    checkpoints[c] = {alpha, rad * std::cos(alpha), rad * std::sin(alpha)};
  }

  double x = 1.5 * kTrackRad, y = 0.0, beta = 0.0;
  long dest_i = 0;
  int laps = 0;
  int no_freeze = 2500;
  bool visited_other_side = false;
  std::vector<TrackPoint> track;
  while (true) {
    double alpha = std::atan2(y, x);
    if (visited_other_side && alpha > 0) {
      ++laps;
      visited_other_side = false;
    }
    if (alpha < 0) {
      visited_other_side = true;
      alpha += 2 * kPi;
    }
    double dest_x = 0.0, dest_y = 0.0;
    while (true) {  // the destination: the first checkpoint not behind alpha
      bool failed = true;
      while (true) {
        const auto& cp = checkpoints[dest_i % kCheckpoints];
        dest_x = cp[1];
        dest_y = cp[2];
        if (alpha <= cp[0]) {
          failed = false;
          break;
        }
        ++dest_i;
        if (dest_i % kCheckpoints == 0) break;
      }
      if (!failed) break;
      alpha -= 2 * kPi;
    }
    const double r1x = std::cos(beta), r1y = std::sin(beta);
    const double p1x = -r1y, p1y = r1x;
    const double dest_dx = dest_x - x, dest_dy = dest_y - y;
    double proj = r1x * dest_dx + r1y * dest_dy;
    while (beta - alpha > 1.5 * kPi) beta -= 2 * kPi;
    while (beta - alpha < -1.5 * kPi) beta += 2 * kPi;
    const double prev_beta = beta;
    proj *= kScale;
    if (proj > 0.3) beta -= std::min(kTrackTurnRate, std::abs(0.001 * proj));
    if (proj < -0.3) beta += std::min(kTrackTurnRate, std::abs(0.001 * proj));
    x += p1x * kTrackDetailStep;
    y += p1y * kTrackDetailStep;
    track.push_back({alpha, prev_beta * 0.5 + beta * 0.5, x, y});
    if (laps > 4) break;
    if (--no_freeze == 0) break;
  }

  // The closed lap: between the last two passes through start_alpha.
  long i1 = -1, i2 = -1;
  for (long i = static_cast<long>(track.size());;) {
    if (--i == 0) return false;
    const bool pass = track[i].alpha > start_alpha && track[i - 1].alpha <= start_alpha;
    if (pass && i2 == -1) {
      i2 = i;
    } else if (pass && i1 == -1) {
      i1 = i;
      break;
    }
  }
  std::vector<TrackPoint> lap(track.begin() + i1, track.begin() + (i2 - 1));
  const double first_perp_x = std::cos(lap.front().beta);
  const double first_perp_y = std::sin(lap.front().beta);
  const double gx = first_perp_x * (lap.front().x - lap.back().x);
  const double gy = first_perp_y * (lap.front().y - lap.back().y);
  if (std::sqrt(gx * gx + gy * gy) > kTrackDetailStep) return false;

  // Kerbs on hard turns: BORDER_MIN_COUNT consecutive same-sign sharp steps.
  const long n = static_cast<long>(lap.size());
  std::vector<bool> border(static_cast<size_t>(n), false);
  for (long i = 0; i < n; ++i) {
    bool good = true;
    double oneside = 0.0;
    for (long neg = 0; neg < kBorderMinCount; ++neg) {
      const double beta1 = py_at(lap, i - neg).beta;
      const double beta2 = py_at(lap, i - neg - 1).beta;
      good = good && std::abs(beta1 - beta2) > kTrackTurnRate * 0.2;
      oneside += py_sign(beta1 - beta2);
    }
    border[static_cast<size_t>(i)] = good && std::abs(oneside) == kBorderMinCount;
  }
  for (long i = 0; i < n; ++i) {
    for (long neg = 0; neg < kBorderMinCount; ++neg) {
      const long j = i - neg < 0 ? i - neg + n : i - neg;
      border[static_cast<size_t>(j)] = border[static_cast<size_t>(j)] || border[static_cast<size_t>(i)];
    }
  }

  std::vector<TrackPolygon> polygons;
  for (long i = 0; i < n; ++i) {
    const TrackPoint& p1 = lap[static_cast<size_t>(i)];
    const TrackPoint& p2 = py_at(lap, i - 1);
    const double c1 = std::cos(p1.beta), s1 = std::sin(p1.beta);
    const double c2 = std::cos(p2.beta), s2 = std::sin(p2.beta);
    polygons.push_back({{p1.x - kTrackWidth * c1, p1.y - kTrackWidth * s1,
                         p1.x + kTrackWidth * c1, p1.y + kTrackWidth * s1,
                         p2.x + kTrackWidth * c2, p2.y + kTrackWidth * s2,
                         p2.x - kTrackWidth * c2, p2.y - kTrackWidth * s2},
                        TrackPolygon::kRoad, static_cast<int>(i)});
    if (border[static_cast<size_t>(i)]) {
      const double side = py_sign(p2.beta - p1.beta);
      polygons.push_back({{p1.x + side * kTrackWidth * c1, p1.y + side * kTrackWidth * s1,
                           p1.x + side * (kTrackWidth + kBorder) * c1,
                           p1.y + side * (kTrackWidth + kBorder) * s1,
                           p2.x + side * (kTrackWidth + kBorder) * c2,
                           p2.y + side * (kTrackWidth + kBorder) * s2,
                           p2.x + side * kTrackWidth * c2, p2.y + side * kTrackWidth * s2},
                          i % 2 == 0 ? TrackPolygon::kWhite : TrackPolygon::kRed,
                          static_cast<int>(i)});
    }
  }
  out.points = std::move(lap);
  out.border = std::move(border);
  out.polygons = std::move(polygons);
  return true;
}

}  // namespace detail

// Gymnasium's reset loop: `_create_track` until one succeeds, each attempt
// continuing the same np_random stream.
inline Track create_track(NumpyRandom& rng) {
  Track track;
  do {
    ++track.attempts;
  } while (!detail::try_create_track(rng, track));
  return track;
}

}  // namespace box2d
}  // namespace torchfrag
