// BipedalWalker-v3 and BipedalWalkerHardcore-v3 with Gymnasium 1.4's dynamics.
//
// Driven as Gymnasium's bipedal_walker.py drives pybox2d (see lunar_lander.h
// for the general rules).  What this env adds:
// - Gymnasium keeps one b2World for the env's life and destroys the previous
//   episode's bodies at reset (terrain in reverse creation order, then the
//   hull and legs), so the broad-phase's recycled proxy ids, and with them
//   the contact order, follow from that history: this env does the same.
// - The terrain (and, in hardcore, stumps, stairs and pits) and the clouds
//   Gymnasium draws only for rendering consume the random stream in its order.
// - render() hands out what Gymnasium's render() draws besides the bodies'
//   transforms: the episode number (its lidar animation counts frames from a
//   reset), the terrain's heights, each terrain body's vertices and the clouds,
//   which torchfrag/envs/rendering.py puts into a Gymnasium BipedalWalker.
// - The action arrives as float32 and NumPy 2 keeps float32 arithmetic for
//   the motor torques and the torque cost, so those are computed in float.
#pragma once

#include <Box2D/Box2D.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "../../env.h"
#include "common.h"

namespace torchfrag {
namespace box2d {

namespace walker {
constexpr double kFps = 50.0;
constexpr double kScale = 30.0;
constexpr int kMotorsTorque = 80;
constexpr int kSpeedHip = 4;
constexpr int kSpeedKnee = 6;
constexpr double kLidarRange = 160 / kScale;
constexpr int kInitialRandom = 5;
constexpr double kLegDown = -8 / kScale;
constexpr double kLegW = 8 / kScale, kLegH = 34 / kScale;
constexpr double kViewportW = 600.0, kViewportH = 400.0;
constexpr double kTerrainStep = 14 / kScale;
constexpr int kTerrainLength = 200;
constexpr double kTerrainHeight = kViewportH / kScale / 4;
constexpr int kTerrainGrass = 10;
constexpr int kTerrainStartpad = 20;
constexpr double kFriction = 2.5;
}  // namespace walker

class BipedalWalker : public Env {
 public:
  static EnvSpec SpecFor(const Options* opts, bool hardcore_default) {
    EnvSpec s;
    s.options = {opt_bool("hardcore", hardcore_default,
                          "terrain with stumps, stairs and pits (BipedalWalkerHardcore-v3)")};
    const bool hardcore = opts ? opts->num("hardcore") != 0.0 : hardcore_default;
    ArraySpec obs;
    obs.name = "obs";
    obs.dtype = DType::kFloat32;
    obs.shape = {24};
    // Gymnasium's bounds, rounded to float32 as its Box holds them.
    const double pi = static_cast<float>(M_PI);
    obs.low = {-pi, -5, -5, -5, -pi, -5, -pi, -5, -0.0, -pi, -5, -pi, -5, -0.0};
    obs.high = {pi, 5, 5, 5, pi, 5, pi, 5, 5, pi, 5, pi, 5, 5};
    for (int k = 0; k < 10; ++k) {
      obs.low.push_back(-1.0);
      obs.high.push_back(1.0);
    }
    s.obs = obs;
    s.action = box_action({4}, {-1, -1, -1, -1}, {1, 1, 1, 1});
    s.max_episode_steps = hardcore ? 2000 : 1600;
    s.reward_threshold = 300.0;
    return s;
  }

  BipedalWalker(const EnvSpec&, const EnvOptions& o)
      : hardcore_(o.b("hardcore")), world_(std::make_unique<b2World>(b2Vec2(0.0f, -10.0f))) {}

  ~BipedalWalker() override { world_->SetContactListener(nullptr); }

  void reset(Rng& rng, const Row& out) override {
    using namespace walker;
    destroy();
    contacts_ = ContactFlags<2>{};
    world_->SetContactListener(&contacts_);
    prev_shaping_valid_ = false;
    ++episode_;
    generate_terrain(rng);
    // Gymnasium's clouds, drawn for rendering only, with its formulas in double.
    for (auto& cloud : clouds_) {
      const double x = rng.uniform(0.0, kTerrainLength) * kTerrainStep;
      const double y = kViewportH / kScale * 3 / 4;
      for (int a = 0; a < 5; ++a) {
        cloud[2 * a] = x + 15 * kTerrainStep * std::sin(3.14 * 2 * a / 5) +
                       rng.uniform(0.0, 5 * kTerrainStep);
        cloud[2 * a + 1] = y + 5 * kTerrainStep * std::cos(3.14 * 2 * a / 5) +
                           rng.uniform(0.0, 5 * kTerrainStep);
      }
    }

    const double init_x = kTerrainStep * kTerrainStartpad / 2;
    const double init_y = kTerrainHeight + 2 * kLegH;
    {
      hull_ = dynamic_body(world_.get(), init_x, init_y, 0.0);
      static constexpr int kHull[5][2] = {{-30, 9}, {6, 9}, {34, 1}, {34, -8}, {-30, -8}};
      b2Vec2 v[5];
      for (int k = 0; k < 5; ++k) {
        v[k].Set(static_cast<float>(kHull[k][0] / kScale), static_cast<float>(kHull[k][1] / kScale));
      }
      add_polygon(hull_, v, 5, 5.0f, 0.1f, {0x0020, 0x001});
    }
    const double push = rng.uniform(-kInitialRandom, kInitialRandom);
    hull_->ApplyForceToCenter(b2Vec2(static_cast<float>(push), 0.0f), true);

    for (int k = 0; k < 2; ++k) {
      const int i = k == 0 ? -1 : 1;
      b2Body* leg = limb(init_x, init_y - kLegH / 2 - kLegDown, i, kLegW / 2);
      joints_[2 * k] = joint(hull_, leg, kLegDown, kLegH / 2, i, -0.8, 1.1);
      legs_[2 * k] = leg;
      b2Body* lower = limb(init_x, init_y - kLegH * 3 / 2 - kLegDown, i, 0.8 * kLegW / 2);
      joints_[2 * k + 1] = joint(leg, lower, -kLegH / 2, kLegH / 2, 1, -1.6, -0.1);
      legs_[2 * k + 1] = lower;
    }
    contacts_.fatal = hull_;
    contacts_.tracked = {legs_[1], legs_[3]};

    static constexpr double kZero[4] = {0.0, 0.0, 0.0, 0.0};
    Action noop;
    noop.values = kZero;
    advance(noop, out);
  }

  StepResult step(const Action& a, Rng&, const Row& out) override { return advance(a, out); }

  bool render(RenderData* out) override {
    if (!hull_) return false;
    // Layout (read by torchfrag/envs/rendering.py): episode, hull and legs as
    // (x, y, angle), the lidar rays' (hit?, x, y), terrain_x, terrain_y, the
    // clouds' 5 points each, then per terrain body (Gymnasium's drawlist
    // order) its vertex count and vertices.
    std::vector<double>& s = out->state;
    s = {static_cast<double>(episode_), hull_->GetPosition().x, hull_->GetPosition().y,
         hull_->GetAngle()};
    for (b2Body* leg : legs_) {
      s.push_back(leg->GetPosition().x);
      s.push_back(leg->GetPosition().y);
      s.push_back(leg->GetAngle());
    }
    for (const auto& h : lidar_hits_) s.insert(s.end(), h.begin(), h.end());
    s.insert(s.end(), terrain_x_.begin(), terrain_x_.end());
    s.insert(s.end(), terrain_y_.begin(), terrain_y_.end());
    for (const auto& cloud : clouds_) s.insert(s.end(), cloud.begin(), cloud.end());
    for (b2Body* t : terrain_) {
      const b2Shape* shape = t->GetFixtureList()->GetShape();
      if (shape->GetType() == b2Shape::e_edge) {
        const auto* e = static_cast<const b2EdgeShape*>(shape);
        s.insert(s.end(), {2.0, e->m_vertex1.x, e->m_vertex1.y, e->m_vertex2.x, e->m_vertex2.y});
      } else {
        const auto* p = static_cast<const b2PolygonShape*>(shape);
        s.push_back(p->m_count);
        for (int k = 0; k < p->m_count; ++k) {
          s.push_back(p->m_vertices[k].x);
          s.push_back(p->m_vertices[k].y);
        }
      }
    }
    return true;
  }

 private:
  // Gymnasium's lidar callback: ground hits only, keep the closest.
  struct Lidar : b2RayCastCallback {
    float fraction = 1.0f;
    bool hit = false;
    b2Vec2 point{0.0f, 0.0f};  // the last (closest) ground hit: Gymnasium draws the ray to it
    float32 ReportFixture(b2Fixture* fixture, const b2Vec2& p, const b2Vec2&,
                          float32 f) override {
      if ((fixture->GetFilterData().categoryBits & 1) == 0) return -1.0f;
      fraction = f;
      hit = true;
      point = p;
      return f;
    }
  };

  // Gymnasium's _destroy: listener off, terrain (already reversed), hull, legs.
  void destroy() {
    if (terrain_.empty()) return;
    world_->SetContactListener(nullptr);
    for (b2Body* t : terrain_) world_->DestroyBody(t);
    terrain_.clear();
    world_->DestroyBody(hull_);
    hull_ = nullptr;
    for (b2Body*& leg : legs_) {
      world_->DestroyBody(leg);
      leg = nullptr;
    }
  }

  b2Body* limb(double x, double y, int i, double half_width) {
    b2Body* body = dynamic_body(world_.get(), x, y, i * 0.05);
    b2PolygonShape box;
    box.SetAsBox(static_cast<float>(half_width), static_cast<float>(walker::kLegH / 2));
    b2FixtureDef fd;
    fd.shape = &box;
    fd.density = 1.0f;
    fd.restitution = 0.0f;
    fd.filter.categoryBits = 0x0020;
    fd.filter.maskBits = 0x001;
    body->CreateFixture(&fd);
    return body;
  }

  b2RevoluteJoint* joint(b2Body* a, b2Body* b, double anchor_a_y, double anchor_b_y, int speed,
                         double lower, double upper) {
    b2RevoluteJointDef rjd;
    rjd.bodyA = a;
    rjd.bodyB = b;
    rjd.referenceAngle = pybox2d_reference_angle(a, b);
    rjd.localAnchorA.Set(0.0f, static_cast<float>(anchor_a_y));
    rjd.localAnchorB.Set(0.0f, static_cast<float>(anchor_b_y));
    rjd.enableMotor = true;
    rjd.enableLimit = true;
    rjd.maxMotorTorque = static_cast<float>(walker::kMotorsTorque);
    rjd.motorSpeed = static_cast<float>(speed);
    rjd.lowerAngle = static_cast<float>(lower);
    rjd.upperAngle = static_cast<float>(upper);
    return static_cast<b2RevoluteJoint*>(world_->CreateJoint(&rjd));
  }

  void static_polygon(const double (&p)[4][2]) {
    b2Vec2 v[4];
    for (int k = 0; k < 4; ++k) v[k].Set(static_cast<float>(p[k][0]), static_cast<float>(p[k][1]));
    b2BodyDef bd;
    b2Body* body = world_->CreateBody(&bd);
    add_polygon(body, v, 4, 0.0f, static_cast<float>(walker::kFriction), Filter{});
    terrain_.push_back(body);
  }

  void generate_terrain(Rng& rng) {
    using namespace walker;
    enum { kGrass, kStump, kStairs, kPit, kStates };
    int state = kGrass;
    double velocity = 0.0, y = kTerrainHeight, original_y = 0.0;
    int64_t counter = kTerrainStartpad;
    bool oneshot = false;
    int64_t stair_steps = 0, stair_width = 0, stair_height = 0;
    std::array<double, kTerrainLength>& tx = terrain_x_;
    std::array<double, kTerrainLength>& ty = terrain_y_;
    // np_random.integers(low, high): [low, high).
    auto integers = [&rng](int64_t low, int64_t high) {
      return low + static_cast<int64_t>(rng.integer(static_cast<uint64_t>(high - low)));
    };
    for (int i = 0; i < kTerrainLength; ++i) {
      const double x = i * kTerrainStep;
      tx[i] = x;
      if (state == kGrass && !oneshot) {
        const double d = kTerrainHeight - y;
        const double sign = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0);
        velocity = 0.8 * velocity + 0.01 * sign;
        if (i > kTerrainStartpad) velocity += rng.uniform(-1.0, 1.0) / kScale;
        y += velocity;
      } else if (state == kPit && oneshot) {
        counter = integers(3, 5);
        const double poly[4][2] = {{x, y},
                                   {x + kTerrainStep, y},
                                   {x + kTerrainStep, y - 4 * kTerrainStep},
                                   {x, y - 4 * kTerrainStep}};
        static_polygon(poly);
        double moved[4][2];
        for (int k = 0; k < 4; ++k) {
          moved[k][0] = poly[k][0] + kTerrainStep * counter;
          moved[k][1] = poly[k][1];
        }
        static_polygon(moved);
        counter += 2;
        original_y = y;
      } else if (state == kPit && !oneshot) {
        y = original_y;
        if (counter > 1) y -= 4 * kTerrainStep;
      } else if (state == kStump && oneshot) {
        counter = integers(1, 3);
        const double poly[4][2] = {{x, y},
                                   {x + counter * kTerrainStep, y},
                                   {x + counter * kTerrainStep, y + counter * kTerrainStep},
                                   {x, y + counter * kTerrainStep}};
        static_polygon(poly);
      } else if (state == kStairs && oneshot) {
        stair_height = rng.uniform() > 0.5 ? 1 : -1;
        stair_width = integers(4, 5);
        stair_steps = integers(3, 5);
        original_y = y;
        for (int64_t s = 0; s < stair_steps; ++s) {
          const double poly[4][2] = {
              {x + (s * stair_width) * kTerrainStep, y + (s * stair_height) * kTerrainStep},
              {x + ((1 + s) * stair_width) * kTerrainStep, y + (s * stair_height) * kTerrainStep},
              {x + ((1 + s) * stair_width) * kTerrainStep,
               y + (-1 + s * stair_height) * kTerrainStep},
              {x + (s * stair_width) * kTerrainStep, y + (-1 + s * stair_height) * kTerrainStep}};
          static_polygon(poly);
        }
        counter = stair_steps * stair_width;
      } else if (state == kStairs && !oneshot) {
        const int64_t s = stair_steps * stair_width - counter - stair_height;
        const double n = static_cast<double>(s) / static_cast<double>(stair_width);
        y = original_y + (n * stair_height) * kTerrainStep;
      }
      oneshot = false;
      ty[i] = y;
      counter -= 1;
      if (counter == 0) {
        counter = integers(kTerrainGrass / 2, kTerrainGrass);
        if (state == kGrass && hardcore_) {
          state = static_cast<int>(integers(1, kStates));
        } else {
          state = kGrass;
        }
        oneshot = true;
      }
    }
    for (int i = 0; i < kTerrainLength - 1; ++i) {
      b2EdgeShape edge;
      edge.Set(b2Vec2(static_cast<float>(tx[i]), static_cast<float>(ty[i])),
               b2Vec2(static_cast<float>(tx[i + 1]), static_cast<float>(ty[i + 1])));
      b2FixtureDef fd;
      fd.shape = &edge;
      fd.friction = static_cast<float>(kFriction);
      fd.filter.categoryBits = 0x0001;
      b2BodyDef bd;
      b2Body* body = world_->CreateBody(&bd);
      body->CreateFixture(&fd);
      terrain_.push_back(body);
    }
    std::reverse(terrain_.begin(), terrain_.end());
  }

  StepResult advance(const Action& a, const Row& out) {
    using namespace walker;
    float clipped[4];
    for (int k = 0; k < 4; ++k) {
      const float v = static_cast<float>(a.values[k]);
      clipped[k] = std::min(std::max(std::abs(v), 0.0f), 1.0f);
      const float sign = v > 0 ? 1.0f : (v < 0 ? -1.0f : 0.0f);
      const int speed = (k % 2 == 0) ? kSpeedHip : kSpeedKnee;
      joints_[k]->SetMotorSpeed(static_cast<float>(speed) * sign);
      joints_[k]->SetMaxMotorTorque(static_cast<float>(kMotorsTorque) * clipped[k]);
    }
    world_->Step(static_cast<float>(1.0 / kFps), 6 * 30, 2 * 30);

    const b2Vec2 pos = hull_->GetPosition();
    const b2Vec2 vel = hull_->GetLinearVelocity();
    float* o = out.obs<float>();
    for (int i = 0; i < 10; ++i) {
      Lidar lidar;
      const b2Vec2 p2(static_cast<float>(pos.x + std::sin(1.5 * i / 10.0) * kLidarRange),
                      static_cast<float>(pos.y - std::cos(1.5 * i / 10.0) * kLidarRange));
      world_->RayCast(&lidar, pos, p2);
      o[14 + i] = lidar.fraction;
      lidar_hits_[i] = {lidar.hit ? 1.0 : 0.0, lidar.point.x, lidar.point.y};
    }
    const double state[14] = {
        static_cast<double>(hull_->GetAngle()),
        2.0 * hull_->GetAngularVelocity() / kFps,
        0.3 * vel.x * (kViewportW / kScale) / kFps,
        0.3 * vel.y * (kViewportH / kScale) / kFps,
        static_cast<double>(joints_[0]->GetJointAngle()),
        static_cast<double>(joints_[0]->GetJointSpeed()) / kSpeedHip,
        joints_[1]->GetJointAngle() + 1.0,
        static_cast<double>(joints_[1]->GetJointSpeed()) / kSpeedKnee,
        contacts_.touching[0] ? 1.0 : 0.0,
        static_cast<double>(joints_[2]->GetJointAngle()),
        static_cast<double>(joints_[2]->GetJointSpeed()) / kSpeedHip,
        joints_[3]->GetJointAngle() + 1.0,
        static_cast<double>(joints_[3]->GetJointSpeed()) / kSpeedKnee,
        contacts_.touching[1] ? 1.0 : 0.0};
    for (int k = 0; k < 14; ++k) o[k] = static_cast<float>(state[k]);

    double shaping = 130 * static_cast<double>(pos.x) / kScale;
    shaping -= 5.0 * std::abs(state[0]);
    // `reward - np.float32` is float32 under NumPy 2: the cost is taken in float.
    float reward = prev_shaping_valid_ ? static_cast<float>(shaping - prev_shaping_) : 0.0f;
    prev_shaping_ = shaping;
    prev_shaping_valid_ = true;
    const float cost = static_cast<float>(0.00035 * kMotorsTorque);
    for (float c : clipped) reward -= cost * c;
    StepResult r;
    r.reward = reward;
    if (contacts_.game_over || pos.x < 0) {
      r.reward = -100;
      r.terminated = true;
    }
    if (pos.x > (kTerrainLength - kTerrainGrass) * kTerrainStep) r.terminated = true;
    return r;
  }

  bool hardcore_;
  ContactFlags<2> contacts_;
  // After contacts_: the world is destroyed first (its destructor may still
  // reach the listener, which is switched off in ~BipedalWalker anyway).
  std::unique_ptr<b2World> world_;
  std::vector<b2Body*> terrain_;
  b2Body* hull_ = nullptr;
  std::array<b2Body*, 4> legs_{};
  std::array<b2RevoluteJoint*, 4> joints_{};
  double prev_shaping_ = 0.0;
  bool prev_shaping_valid_ = false;
  // Drawn only (render()): the terrain's points, the clouds, the episode number.
  std::array<double, walker::kTerrainLength> terrain_x_{}, terrain_y_{};
  std::array<std::array<double, 10>, walker::kTerrainLength / 20> clouds_{};
  int64_t episode_ = 0;
  std::array<std::array<double, 3>, 10> lidar_hits_{};  // (hit?, x, y) of the last step's rays
};

struct BipedalWalkerNormal : BipedalWalker {
  using BipedalWalker::BipedalWalker;
  static EnvSpec Spec(const Options* o) { return SpecFor(o, false); }
};

struct BipedalWalkerHardcore : BipedalWalker {
  using BipedalWalker::BipedalWalker;
  static EnvSpec Spec(const Options* o) { return SpecFor(o, true); }
};

}  // namespace box2d
}  // namespace torchfrag
