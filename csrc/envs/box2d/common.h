// Pieces the Box2D envs share: how Gymnasium's scripts use pybox2d, in C++.
#pragma once

#include <Box2D/Box2D.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace torchfrag {
namespace box2d {

// Gymnasium's ContactDetector: any contact of `fatal` (the lander, the
// walker's hull) ends the game; the contact state of the `tracked` bodies (legs)
// is part of the observation.
template <size_t N>
struct ContactFlags : b2ContactListener {
  b2Body* fatal = nullptr;
  std::array<b2Body*, N> tracked{};
  bool game_over = false;
  std::array<bool, N> touching{};

  void BeginContact(b2Contact* c) override {
    const b2Body* a = c->GetFixtureA()->GetBody();
    const b2Body* b = c->GetFixtureB()->GetBody();
    if (fatal == a || fatal == b) game_over = true;
    mark(a, b, true);
  }
  void EndContact(b2Contact* c) override {
    mark(c->GetFixtureA()->GetBody(), c->GetFixtureB()->GetBody(), false);
  }

 private:
  void mark(const b2Body* a, const b2Body* b, bool value) {
    for (size_t i = 0; i < N; ++i) {
      if (tracked[i] == a || tracked[i] == b) touching[i] = value;
    }
  }
};

// A polygon fixture as Gymnasium's fixtureDef(shape=polygonShape(...), ...)
// builds it: pybox2d runs b2PolygonShape::Set on the vertices given.
struct Filter {
  uint16_t category = 0x0001;
  uint16_t mask = 0xFFFF;
};

inline void add_polygon(b2Body* body, const b2Vec2* vertices, int count, float density,
                        float friction, Filter filter) {
  b2PolygonShape poly;
  poly.Set(vertices, count);
  b2FixtureDef fd;
  fd.shape = &poly;
  fd.density = density;
  fd.friction = friction;
  fd.restitution = 0.0f;
  fd.filter.categoryBits = filter.category;
  fd.filter.maskBits = filter.mask;
  body->CreateFixture(&fd);
}

// A dynamic body from world.CreateDynamicBody(position=(x, y), angle=angle).
inline b2Body* dynamic_body(b2World* world, double x, double y, double angle) {
  b2BodyDef bd;
  bd.type = b2_dynamicBody;
  bd.position.Set(static_cast<float>(x), static_cast<float>(y));
  bd.angle = static_cast<float>(angle);
  return world->CreateBody(&bd);
}

// pybox2d's revoluteJointDef sets referenceAngle to bodyB.angle - bodyA.angle
// (Python doubles) when it is not given; every Gymnasium joint relies on that.
inline float pybox2d_reference_angle(const b2Body* a, const b2Body* b) {
  return static_cast<float>(static_cast<double>(b->GetAngle()) -
                            static_cast<double>(a->GetAngle()));
}

}  // namespace box2d
}  // namespace torchfrag
