// CarRacing-v3's physics and reward, as Gymnasium 1.4's car_racing.py and
// car_dynamics.py drive pybox2d (everything but the 96x96 picture).
//
// One b2World lives as long as the env, as Gymnasium's: reset destroys the
// road tiles and then the car in Gymnasium's order, so the world's free lists
// (and with them proxy ids and contact order) evolve the same way over many
// episodes.  The car's wheel model (engine, brakes, tyre friction against
// road or grass) is Python arithmetic in doubles, with the float32 casts
// where pybox2d makes them.  Tiles are sensors; a wheel touching one counts
// as on the road, and its first touch pays 1000 / len(track).
#pragma once

#include <Box2D/Box2D.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "../numpy_random.h"
#include "car_racing_track.h"
#include "common.h"

namespace torchfrag {
namespace box2d {

namespace car {
constexpr double kSize = 0.02;
constexpr double kEnginePower = 100000000 * kSize * kSize;
constexpr double kWheelMomentOfInertia = 4000 * kSize * kSize;
constexpr double kFrictionLimit = 1000000 * kSize * kSize;
constexpr int kWheelR = 27;
constexpr int kWheelW = 14;
constexpr double kFps = 50.0;
// car_dynamics.py's hull polygons, wheel positions and wheel box (units of
// kSize); the renderer draws the same shapes.
constexpr int kHull1[4][2] = {{-60, 130}, {60, 130}, {60, 110}, {-60, 110}};
constexpr int kHull2[4][2] = {{-15, 120}, {15, 120}, {20, 20}, {-20, 20}};
constexpr int kHull3[8][2] = {{25, 20},   {50, -10},  {50, -40},  {20, -90},
                              {-20, -90}, {-50, -40}, {-50, -10}, {-25, 20}};
constexpr int kHull4[4][2] = {{-50, -120}, {50, -120}, {50, -90}, {-50, -90}};
constexpr int kWheelPos[4][2] = {{-55, 80}, {55, 80}, {-55, -82}, {55, -82}};
constexpr int kWheelPoly[4][2] = {
    {-kWheelW, kWheelR}, {kWheelW, kWheelR}, {kWheelW, -kWheelR}, {-kWheelW, -kWheelR}};
}  // namespace car

class CarRacingSim {
 public:
  struct Wheel;

  // What a body's userData points at: Gymnasium tests `"road_friction" in
  // u.__dict__` (a tile) and `"tiles" in obj.__dict__` (a wheel).
  struct Tag {
    enum Kind { kTile, kWheel } kind;
    int index;
  };

  struct Wheel {
    b2Body* body = nullptr;
    b2RevoluteJoint* joint = nullptr;
    double wheel_rad = 0.0, gas = 0.0, brake = 0.0, steer = 0.0, phase = 0.0, omega = 0.0;
    int tiles = 0;  // road tiles touched now (all have road_friction 1)
  };

  explicit CarRacingSim(double lap_complete_percent = 0.95)
      : lap_complete_percent_(lap_complete_percent), listener_(this) {
    world_ = std::make_unique<b2World>(b2Vec2(0.0f, 0.0f));
    world_->SetContactListener(&listener_);
  }

  // Gymnasium's reset from the track generator on; `rng` is its np_random.
  void reset(NumpyRandom& rng) {
    destroy();
    reward_ = prev_reward_ = 0.0;
    tile_visited_count_ = 0;
    new_lap_ = false;
    track_ = create_track(rng);
    build_road();
    build_car(track_.points[0].beta, track_.points[0].x, track_.points[0].y);
    advance(nullptr);  // reset returns the state after step(None)
  }

  struct StepOut {
    double reward = 0.0;
    bool terminated = false;
    bool lap_finished = false;  // Gymnasium 1.x's info["lap_finished"]
    bool lap_complete = false;  // the lap test alone (Gymnasium 0.29's v2 truncated on it)
  };

  // One step with Gymnasium's continuous action (steer, gas, brake), in
  // float64 as `action.astype(np.float64)` gives.
  StepOut step(const std::array<double, 3>& action) { return advance(&action); }

  // Gymnasium's discrete actions (0 nothing, 1 left, 2 right, 3 gas, 4 brake)
  // as the continuous action giving the same wheel inputs: its
  // `steer(-0.6 * (a == 1) + 0.6 * (a == 2))` equals steer(-x) with
  // x = +-0.6, and a zero steer's sign never reaches the physics.
  static std::array<double, 3> discrete_action(int a) {
    return {a == 1 ? 0.6 : (a == 2 ? -0.6 : 0.0), a == 3 ? 0.2 : 0.0, a == 4 ? 0.8 : 0.0};
  }

  const Track& track() const { return track_; }
  const b2Body* hull() const { return hull_; }
  const std::array<Wheel, 4>& wheels() const { return wheels_; }
  int tile_visited_count() const { return tile_visited_count_; }
  // Whether tile i is drawn in the plain road colour (touched at least once).
  bool tile_plain(int i) const { return plain_[static_cast<size_t>(i)]; }
  double total_reward() const { return reward_; }

 private:
  struct Listener : b2ContactListener {
    explicit Listener(CarRacingSim* s) : sim(s) {}
    void BeginContact(b2Contact* c) override { sim->contact(c, true); }
    void EndContact(b2Contact* c) override { sim->contact(c, false); }
    CarRacingSim* sim;
  };

  void contact(b2Contact* c, bool begin) {
    const Tag* u1 = static_cast<const Tag*>(c->GetFixtureA()->GetBody()->GetUserData());
    const Tag* u2 = static_cast<const Tag*>(c->GetFixtureB()->GetBody()->GetUserData());
    const Tag* tile = nullptr;
    const Tag* obj = nullptr;
    if (u1 && u1->kind == Tag::kTile) {
      tile = u1;
      obj = u2;
    }
    if (u2 && u2->kind == Tag::kTile) {
      tile = u2;
      obj = u1;
    }
    if (!tile) return;
    // Gymnasium's `tile.color[:] = self.env.road_color`: a tile anything
    // touched (the hull too) loses its shade in the picture.
    plain_[static_cast<size_t>(tile->index)] = true;
    if (!obj || obj->kind != Tag::kWheel) return;
    Wheel& w = wheels_[static_cast<size_t>(obj->index)];
    if (!begin) {
      --w.tiles;
      return;
    }
    ++w.tiles;
    const size_t idx = static_cast<size_t>(tile->index);
    if (!visited_[idx]) {
      visited_[idx] = true;
      const double n = static_cast<double>(track_.points.size());
      reward_ += 1000.0 / n;
      ++tile_visited_count_;
      if (tile->index == 0 && tile_visited_count_ / n > lap_complete_percent_) new_lap_ = true;
    }
  }

  void destroy() {
    if (road_.empty()) return;
    for (b2Body* t : road_) world_->DestroyBody(t);
    road_.clear();
    world_->DestroyBody(hull_);  // its joints go with it
    hull_ = nullptr;
    for (Wheel& w : wheels_) world_->DestroyBody(w.body);
    wheels_ = {};
  }

  void build_road() {
    const size_t n = track_.points.size();
    tile_tags_.assign(n, Tag{Tag::kTile, 0});
    visited_.assign(n, false);
    plain_.assign(n, false);
    for (const TrackPolygon& poly : track_.polygons) {
      if (poly.kind != TrackPolygon::kRoad) continue;
      b2Vec2 v[4];
      for (int k = 0; k < 4; ++k) {
        v[k].Set(static_cast<float>(poly.xy[2 * k]), static_cast<float>(poly.xy[2 * k + 1]));
      }
      b2PolygonShape shape;
      shape.Set(v, 4);
      b2FixtureDef fd;  // Gymnasium's fd_tile: a default fixtureDef
      fd.shape = &shape;
      b2BodyDef bd;
      b2Body* t = world_->CreateBody(&bd);
      t->CreateFixture(&fd);
      Tag& tag = tile_tags_[static_cast<size_t>(poly.tile)];
      tag.index = poly.tile;
      t->SetUserData(&tag);
      t->GetFixtureList()->SetSensor(true);
      road_.push_back(t);
    }
  }

  void build_car(double angle, double x, double y) {
    using namespace car;
    hull_ = dynamic_body(world_.get(), x, y, angle);
    auto add = [this](const int (*pts)[2], int count) {
      b2Vec2 v[8];
      for (int k = 0; k < count; ++k) {
        v[k].Set(static_cast<float>(pts[k][0] * kSize), static_cast<float>(pts[k][1] * kSize));
      }
      b2PolygonShape shape;
      shape.Set(v, count);
      b2FixtureDef fd;
      fd.shape = &shape;
      fd.density = 1.0f;
      hull_->CreateFixture(&fd);
    };
    add(kHull1, 4);
    add(kHull2, 4);
    add(kHull3, 8);
    add(kHull4, 4);
    for (int i = 0; i < 4; ++i) {
      const double front_k = 1.0;
      const int wx = kWheelPos[i][0], wy = kWheelPos[i][1];
      Wheel& w = wheels_[static_cast<size_t>(i)];
      w.body = dynamic_body(world_.get(), x + wx * kSize, y + wy * kSize, angle);
      b2Vec2 v[4];
      for (int k = 0; k < 4; ++k) {
        v[k].Set(static_cast<float>(kWheelPoly[k][0] * front_k * kSize),
                 static_cast<float>(kWheelPoly[k][1] * front_k * kSize));
      }
      add_polygon(w.body, v, 4, 0.1f, 0.2f, {0x0020, 0x001});
      w.wheel_rad = front_k * kWheelR * kSize;
      b2RevoluteJointDef rjd;
      rjd.bodyA = hull_;
      rjd.bodyB = w.body;
      rjd.referenceAngle = pybox2d_reference_angle(hull_, w.body);
      rjd.localAnchorA.Set(static_cast<float>(wx * kSize), static_cast<float>(wy * kSize));
      rjd.localAnchorB.Set(0.0f, 0.0f);
      rjd.enableMotor = true;
      rjd.enableLimit = true;
      rjd.maxMotorTorque = static_cast<float>(180 * 900 * kSize * kSize);
      rjd.motorSpeed = 0.0f;
      rjd.lowerAngle = -0.4f;
      rjd.upperAngle = 0.4f;
      w.joint = static_cast<b2RevoluteJoint*>(world_->CreateJoint(&rjd));
      wheel_tags_[static_cast<size_t>(i)] = Tag{Tag::kWheel, i};
      w.body->SetUserData(&wheel_tags_[static_cast<size_t>(i)]);
    }
  }

  static double sign(double v) { return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : 0.0); }

  // Car.step(dt): steering motors, engine, brakes, tyre forces.
  void car_step(double dt) {
    using namespace car;
    for (Wheel& w : wheels_) {
      const double joint_angle = w.joint->GetJointAngle();
      const double dir = sign(w.steer - joint_angle);
      const double val = std::abs(w.steer - joint_angle);
      w.joint->SetMotorSpeed(static_cast<float>(dir * std::min(50.0 * val, 3.0)));
      double friction_limit = kFrictionLimit * 0.6;  // grass
      if (w.tiles > 0) friction_limit = std::max(friction_limit, kFrictionLimit * 1.0);
      const b2Vec2 forw = w.body->GetWorldVector(b2Vec2(0.0f, 1.0f));
      const b2Vec2 side = w.body->GetWorldVector(b2Vec2(1.0f, 0.0f));
      const b2Vec2 v = w.body->GetLinearVelocity();
      const double vf = static_cast<double>(forw.x) * v.x + static_cast<double>(forw.y) * v.y;
      const double vs = static_cast<double>(side.x) * v.x + static_cast<double>(side.y) * v.y;
      w.omega += dt * kEnginePower * w.gas / kWheelMomentOfInertia / (std::abs(w.omega) + 5.0);
      if (w.brake >= 0.9) {
        w.omega = 0;
      } else if (w.brake > 0) {
        const double bdir = -sign(w.omega);
        double bval = 15 * w.brake;
        if (std::abs(bval) > std::abs(w.omega)) bval = std::abs(w.omega);
        w.omega += bdir * bval;
      }
      w.phase += w.omega * dt;
      const double vr = w.omega * w.wheel_rad;
      double f_force = -vf + vr;
      double p_force = -vs;
      f_force *= 205000 * kSize * kSize;
      p_force *= 205000 * kSize * kSize;
      double force = std::sqrt(f_force * f_force + p_force * p_force);
      if (std::abs(force) > friction_limit) {
        f_force /= force;
        p_force /= force;
        force = friction_limit;
        f_force *= force;
        p_force *= force;
      }
      w.omega -= dt * f_force * w.wheel_rad / kWheelMomentOfInertia;
      w.body->ApplyForceToCenter(
          b2Vec2(static_cast<float>(p_force * side.x + f_force * forw.x),
                 static_cast<float>(p_force * side.y + f_force * forw.y)),
          true);
    }
  }

  StepOut advance(const std::array<double, 3>* action) {
    if (action) {
      const double steer = -(*action)[0];
      wheels_[0].steer = steer;
      wheels_[1].steer = steer;
      const double gas = std::min(std::max((*action)[1], 0.0), 1.0);
      for (size_t i = 2; i < 4; ++i) {
        double diff = gas - wheels_[i].gas;
        if (diff > 0.1) diff = 0.1;  // gradually increase, but stop immediately
        wheels_[i].gas += diff;
      }
      for (Wheel& w : wheels_) w.brake = (*action)[2];
    }
    car_step(1.0 / car::kFps);
    world_->Step(static_cast<float>(1.0 / car::kFps), 6 * 30, 2 * 30);
    StepOut out;
    if (!action) return out;
    reward_ -= 0.1;
    out.reward = reward_ - prev_reward_;
    prev_reward_ = reward_;
    const double n = static_cast<double>(track_.points.size());
    if (tile_visited_count_ == static_cast<int>(n) || new_lap_) {
      out.terminated = true;
      out.lap_finished = true;
      out.lap_complete = true;
    }
    const b2Vec2 p = hull_->GetPosition();
    if (std::abs(static_cast<double>(p.x)) > car_racing::kPlayfield ||
        std::abs(static_cast<double>(p.y)) > car_racing::kPlayfield) {
      out.terminated = true;
      out.lap_finished = false;
      out.reward = -100;
    }
    return out;
  }

  double lap_complete_percent_;
  Listener listener_;
  // Declared after listener_ so the world (which calls it while destroying
  // contacts) goes first.
  std::unique_ptr<b2World> world_;
  Track track_;
  std::vector<b2Body*> road_;
  std::vector<Tag> tile_tags_;
  std::vector<bool> visited_;
  std::vector<bool> plain_;
  std::array<Tag, 4> wheel_tags_{};
  b2Body* hull_ = nullptr;
  std::array<Wheel, 4> wheels_{};
  double reward_ = 0.0, prev_reward_ = 0.0;
  int tile_visited_count_ = 0;
  bool new_lap_ = false;
};

}  // namespace box2d
}  // namespace torchfrag
