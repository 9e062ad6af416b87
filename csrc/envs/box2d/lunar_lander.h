// LunarLander-v3 (discrete and continuous) with Gymnasium 1.4's dynamics.
//
// The physics is Box2D 2.3, compiled from the `box2d` package's sources (see
// build_tools/box2d.py), driven exactly as Gymnasium's lunar_lander.py drives
// pybox2d: the same bodies, fixtures and joints created in the same order (a
// Box2D world's contact order follows creation order), the same values cast
// to float32 where SWIG casts them, and the Python-side arithmetic done in
// double in the same order.  The random numbers (terrain, initial push, engine
// dispersion, wind phase) are drawn from the pool's per-env Rng in the order
// Gymnasium draws them from its np_random, with the same formulas
// (`low + (high - low) * u`), so a reference whose np_random replays the same
// stream gives bit-identical episodes.
//
// Rendering (particles) is not simulated: Gymnasium creates particle bodies
// only when a render mode is set, and they do not touch the lander.  render()
// hands out the lander's and legs' transforms and the terrain's heights, which
// torchfrag/envs/rendering.py puts into a Gymnasium LunarLander to draw.
#pragma once

#include <Box2D/Box2D.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "../../env.h"
#include "common.h"

namespace torchfrag {
namespace box2d {

namespace lunar {
constexpr double kFps = 50.0;
constexpr double kScale = 30.0;
constexpr double kMainEnginePower = 13.0;
constexpr double kSideEnginePower = 0.6;
constexpr double kInitialRandom = 1000.0;
constexpr int kLegAway = 20;
constexpr int kLegDown = 18;
constexpr int kLegW = 2;
constexpr int kLegH = 8;
constexpr double kLegSpringTorque = 40.0;
constexpr int kSideEngineHeight = 14;
constexpr int kSideEngineAway = 12;
constexpr int kMainEngineYLocation = 4;
constexpr double kViewportW = 600.0;
constexpr double kViewportH = 400.0;
constexpr int kChunks = 11;
}  // namespace lunar

class LunarLander : public Env {
 public:
  static EnvSpec SpecFor(const Options* opts, bool continuous_default) {
    EnvSpec s;
    s.options = {
        opt_bool("continuous", continuous_default,
                 "Box(-1, 1, (2,)) throttles (main, lateral) instead of 4 discrete actions"),
        in_range(opt_float("gravity", -10.0, "gravity along y; Gymnasium requires -12 < g < 0"),
                 -12.0, 0.0, true),
        opt_bool("enable_wind", false, "apply Gymnasium's wind force and turbulence torque"),
        opt_float("wind_power", 15.0, "wind force magnitude (Gymnasium advises 0..20)"),
        opt_float("turbulence_power", 1.5, "turbulence torque magnitude (Gymnasium advises 0..2)")};
    const bool continuous = opts ? opts->num("continuous") != 0.0 : continuous_default;
    ArraySpec obs;
    obs.name = "obs";
    obs.dtype = DType::kFloat32;
    obs.shape = {8};
    // Gymnasium's bounds, rounded to float32 as its Box holds them.
    const double two_pi = static_cast<float>(2 * M_PI);
    obs.low = {-2.5, -2.5, -10.0, -10.0, -two_pi, -10.0, -0.0, -0.0};
    obs.high = {2.5, 2.5, 10.0, 10.0, two_pi, 10.0, 1.0, 1.0};
    s.obs = obs;
    s.action = continuous ? box_action({2}, {-1.0, -1.0}, {1.0, 1.0}) : discrete_action(4);
    s.max_episode_steps = 1000;
    s.reward_threshold = 200.0;
    return s;
  }

  LunarLander(const EnvSpec&, const EnvOptions& o)
      : continuous_(o.b("continuous")),
        gravity_(o.f("gravity")),
        enable_wind_(o.b("enable_wind")),
        wind_power_(o.f("wind_power")),
        turbulence_power_(o.f("turbulence_power")) {
    // Gymnasium asserts the open interval; the declared range leaves 0 in.
    if (!(gravity_ > -12.0 && gravity_ < 0.0)) {
      throw std::invalid_argument("gravity must be in (-12, 0), got " + format_number(gravity_));
    }
  }

  void reset(Rng& rng, const Row& out) override {
    using namespace lunar;
    // A fresh world per episode, as Gymnasium's reset: the broad-phase proxy
    // ids (and so the contact order) then start from the same state.
    world_.reset();
    contacts_ = ContactFlags<2>{};
    world_ = std::make_unique<b2World>(b2Vec2(0.0f, static_cast<float>(gravity_)));
    world_->SetContactListener(&contacts_);
    prev_shaping_valid_ = false;

    const double W = kViewportW / kScale;
    const double H = kViewportH / kScale;
    std::array<double, kChunks + 1> height;
    for (double& h : height) h = rng.uniform(0.0, H / 2);
    std::array<double, kChunks> chunk_x;
    for (int i = 0; i < kChunks; ++i) chunk_x[i] = W / (kChunks - 1) * i;
    helipad_y_ = H / 4;
    for (int i = kChunks / 2 - 2; i <= kChunks / 2 + 2; ++i) height[i] = helipad_y_;
    std::array<double, kChunks>& smooth_y = smooth_y_;
    for (int i = 0; i < kChunks; ++i) {
      // Python's height[i - 1] at i = 0 is the last element.
      const double prev = height[(i + kChunks) % (kChunks + 1)];
      smooth_y[i] = 0.33 * (prev + height[i] + height[i + 1]);
    }

    b2BodyDef moon_def;
    b2Body* moon = world_->CreateBody(&moon_def);
    {
      b2EdgeShape edge;
      edge.Set(b2Vec2(0.0f, 0.0f), b2Vec2(static_cast<float>(W), 0.0f));
      b2FixtureDef fd;  // pybox2d's CreateFixturesFromShapes: a default fixture
      fd.shape = &edge;
      moon->CreateFixture(&fd);
    }
    for (int i = 0; i < kChunks - 1; ++i) {
      b2EdgeShape edge;
      edge.Set(b2Vec2(static_cast<float>(chunk_x[i]), static_cast<float>(smooth_y[i])),
               b2Vec2(static_cast<float>(chunk_x[i + 1]), static_cast<float>(smooth_y[i + 1])));
      b2FixtureDef fd;
      fd.shape = &edge;
      fd.density = 0.0f;
      fd.friction = 0.1f;
      moon->CreateFixture(&fd);
    }

    const double initial_y = kViewportH / kScale;
    const double initial_x = kViewportW / kScale / 2;
    {
      lander_ = dynamic_body(world_.get(), initial_x, initial_y, 0.0);
      static constexpr int kPoly[6][2] = {{-14, 17}, {-17, 0}, {-17, -10},
                                          {17, -10}, {17, 0},  {14, 17}};
      b2Vec2 verts[6];
      for (int k = 0; k < 6; ++k) {
        verts[k].Set(static_cast<float>(kPoly[k][0] / kScale),
                     static_cast<float>(kPoly[k][1] / kScale));
      }
      add_polygon(lander_, verts, 6, 5.0f, 0.1f, {0x0010, 0x001});
    }
    const double fx = rng.uniform(-kInitialRandom, kInitialRandom);
    const double fy = rng.uniform(-kInitialRandom, kInitialRandom);
    lander_->ApplyForceToCenter(b2Vec2(static_cast<float>(fx), static_cast<float>(fy)), true);

    if (enable_wind_) {
      // np_random.integers(-9999, 9999): [-9999, 9999).
      wind_idx_ = -9999 + static_cast<int64_t>(rng.integer(19998));
      torque_idx_ = -9999 + static_cast<int64_t>(rng.integer(19998));
    }

    for (int k = 0; k < 2; ++k) {
      const int i = k == 0 ? -1 : 1;
      b2Body* leg = dynamic_body(world_.get(), initial_x - i * kLegAway / kScale, initial_y,
                                 i * 0.05);
      b2PolygonShape box;
      box.SetAsBox(static_cast<float>(kLegW / kScale), static_cast<float>(kLegH / kScale));
      b2FixtureDef fd;
      fd.shape = &box;
      fd.density = 1.0f;
      fd.restitution = 0.0f;
      fd.filter.categoryBits = 0x0020;
      fd.filter.maskBits = 0x001;
      leg->CreateFixture(&fd);
      b2RevoluteJointDef rjd;
      rjd.bodyA = lander_;
      rjd.bodyB = leg;
      rjd.referenceAngle = pybox2d_reference_angle(lander_, leg);
      rjd.localAnchorA.Set(0.0f, 0.0f);
      rjd.localAnchorB.Set(static_cast<float>(i * kLegAway / kScale),
                           static_cast<float>(kLegDown / kScale));
      rjd.enableMotor = true;
      rjd.enableLimit = true;
      rjd.maxMotorTorque = static_cast<float>(kLegSpringTorque);
      rjd.motorSpeed = static_cast<float>(0.3 * i);
      if (i == -1) {
        rjd.lowerAngle = static_cast<float>(0.9 - 0.5);
        rjd.upperAngle = 0.9f;
      } else {
        rjd.lowerAngle = -0.9f;
        rjd.upperAngle = static_cast<float>(-0.9 + 0.5);
      }
      world_->CreateJoint(&rjd);
      legs_[k] = leg;
    }
    contacts_.fatal = lander_;
    contacts_.tracked = legs_;

    // Gymnasium's reset returns the observation of a first no-op step.
    static constexpr double kNoop[2] = {0.0, 0.0};
    Action noop;
    noop.discrete = 0;
    noop.values = kNoop;
    advance(noop, rng, out);
  }

  StepResult step(const Action& a, Rng& rng, const Row& out) override {
    return advance(a, rng, out);
  }

  bool render(RenderData* out) override {
    if (!lander_) return false;
    const b2Vec2 p = lander_->GetPosition();
    out->state = {p.x, p.y, lander_->GetAngle(), legs_[0]->GetPosition().x,
                  legs_[0]->GetPosition().y, legs_[0]->GetAngle(), legs_[1]->GetPosition().x,
                  legs_[1]->GetPosition().y, legs_[1]->GetAngle()};
    out->state.insert(out->state.end(), smooth_y_.begin(), smooth_y_.end());
    return true;
  }

 private:
  StepResult advance(const Action& a, Rng& rng, const Row& out) {
    using namespace lunar;
    if (enable_wind_ && !(contacts_.touching[0] || contacts_.touching[1])) {
      const double wind_mag =
          std::tanh(std::sin(0.02 * wind_idx_) + std::sin(M_PI * 0.01 * wind_idx_)) * wind_power_;
      ++wind_idx_;
      lander_->ApplyForceToCenter(b2Vec2(static_cast<float>(wind_mag), 0.0f), true);
      const double torque_mag =
          std::tanh(std::sin(0.02 * torque_idx_) + std::sin(M_PI * 0.01 * torque_idx_)) *
          turbulence_power_;
      ++torque_idx_;
      lander_->ApplyTorque(static_cast<float>(torque_mag), true);
    }
    double a0 = 0.0, a1 = 0.0;
    if (continuous_) {
      a0 = std::min(std::max(a.values[0], -1.0), 1.0);
      a1 = std::min(std::max(a.values[1], -1.0), 1.0);
    }
    const double angle = lander_->GetAngle();
    const double tip0 = std::sin(angle), tip1 = std::cos(angle);
    const double side0 = -tip1, side1 = tip0;
    const double d0 = rng.uniform(-1.0, 1.0) / kScale;
    const double d1 = rng.uniform(-1.0, 1.0) / kScale;

    double m_power = 0.0;
    if ((continuous_ && a0 > 0.0) || (!continuous_ && a.discrete == 2)) {
      m_power = continuous_ ? (std::min(std::max(a0, 0.0), 1.0) + 1.0) * 0.5 : 1.0;
      const double lever = kMainEngineYLocation / kScale + 2 * d0;
      const double ox = tip0 * lever + side0 * d1;
      const double oy = -tip1 * lever - side1 * d1;
      const b2Vec2 pos = lander_->GetPosition();
      const double px = pos.x + ox, py = pos.y + oy;
      lander_->ApplyLinearImpulse(
          b2Vec2(static_cast<float>(-ox * kMainEnginePower * m_power),
                 static_cast<float>(-oy * kMainEnginePower * m_power)),
          b2Vec2(static_cast<float>(px), static_cast<float>(py)), true);
    }
    double s_power = 0.0;
    if ((continuous_ && std::abs(a1) > 0.5) ||
        (!continuous_ && (a.discrete == 1 || a.discrete == 3))) {
      double direction;
      if (continuous_) {
        direction = a1 > 0.0 ? 1.0 : -1.0;
        s_power = std::min(std::max(std::abs(a1), 0.5), 1.0);
      } else {
        direction = static_cast<double>(a.discrete - 2);
        s_power = 1.0;
      }
      const double lateral = 3 * d1 + direction * kSideEngineAway / kScale;
      const double ox = tip0 * d0 + side0 * lateral;
      const double oy = -tip1 * d0 - side1 * lateral;
      const b2Vec2 pos = lander_->GetPosition();
      const double px = pos.x + ox - tip0 * 17 / kScale;
      const double py = pos.y + oy + tip1 * kSideEngineHeight / kScale;
      lander_->ApplyLinearImpulse(
          b2Vec2(static_cast<float>(-ox * kSideEnginePower * s_power),
                 static_cast<float>(-oy * kSideEnginePower * s_power)),
          b2Vec2(static_cast<float>(px), static_cast<float>(py)), true);
    }

    world_->Step(static_cast<float>(1.0 / kFps), 6 * 30, 2 * 30);

    const b2Vec2 pos = lander_->GetPosition();
    const b2Vec2 vel = lander_->GetLinearVelocity();
    const double state[8] = {
        (pos.x - kViewportW / kScale / 2) / (kViewportW / kScale / 2),
        (pos.y - (helipad_y_ + kLegDown / kScale)) / (kViewportH / kScale / 2),
        vel.x * (kViewportW / kScale / 2) / kFps,
        vel.y * (kViewportH / kScale / 2) / kFps,
        static_cast<double>(lander_->GetAngle()),
        20.0 * lander_->GetAngularVelocity() / kFps,
        contacts_.touching[0] ? 1.0 : 0.0,
        contacts_.touching[1] ? 1.0 : 0.0};
    const double shaping = -100 * std::sqrt(state[0] * state[0] + state[1] * state[1]) -
                           100 * std::sqrt(state[2] * state[2] + state[3] * state[3]) -
                           100 * std::abs(state[4]) + 10 * state[6] + 10 * state[7];
    StepResult r;
    double reward = 0.0;
    if (prev_shaping_valid_) reward = shaping - prev_shaping_;
    prev_shaping_ = shaping;
    prev_shaping_valid_ = true;
    reward -= m_power * 0.30;
    reward -= s_power * 0.03;
    if (contacts_.game_over || std::abs(state[0]) >= 1.0) {
      r.terminated = true;
      reward = -100;
    }
    if (!lander_->IsAwake()) {
      r.terminated = true;
      reward = 100;
    }
    r.reward = reward;
    float* o = out.obs<float>();
    for (int k = 0; k < 8; ++k) o[k] = static_cast<float>(state[k]);
    return r;
  }

  bool continuous_;
  double gravity_;
  bool enable_wind_;
  double wind_power_, turbulence_power_;
  ContactFlags<2> contacts_;
  // Declared after contacts_ so the world (which calls the listener while
  // destroying contacts) goes first.
  std::unique_ptr<b2World> world_;
  b2Body* lander_ = nullptr;
  std::array<b2Body*, 2> legs_{nullptr, nullptr};
  double helipad_y_ = 0.0;
  std::array<double, lunar::kChunks> smooth_y_{};  // the terrain's heights (Gymnasium's smooth_y)
  double prev_shaping_ = 0.0;
  bool prev_shaping_valid_ = false;
  int64_t wind_idx_ = 0, torque_idx_ = 0;
};

struct LunarLanderDiscrete : LunarLander {
  using LunarLander::LunarLander;
  static EnvSpec Spec(const Options* o) { return SpecFor(o, false); }
};

struct LunarLanderContinuous : LunarLander {
  using LunarLander::LunarLander;
  static EnvSpec Spec(const Options* o) { return SpecFor(o, true); }
};

}  // namespace box2d
}  // namespace torchfrag
