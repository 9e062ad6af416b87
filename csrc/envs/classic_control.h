// Classic-control envs with Gymnasium 1.x dynamics, reward and termination.
//
// Each env mirrors the arithmetic of its Gymnasium counterpart operation by
// operation (including where Gymnasium computes in float32 because NumPy 2
// keeps float32 scalars float32), so trajectories match step for step once
// the reference's state is synced to ours.  Every env also reports its
// internal float64 state as the info "state", which is what a reference
// needs to be synced.  Physical parameters accept one value per env.
#pragma once

#include <algorithm>
#include <cmath>

#include "../env.h"

namespace torchfrag {
namespace classic {

constexpr double kPi = 3.14159265358979323846;

inline ArraySpec f32_obs(std::vector<double> low, std::vector<double> high) {
  ArraySpec s;
  s.name = "obs";
  s.dtype = DType::kFloat32;
  s.shape = {static_cast<int64_t>(low.size())};
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

inline ArraySpec state_info(int64_t n) {
  ArraySpec s;
  s.name = "state";
  s.dtype = DType::kFloat64;
  s.shape = {n};
  return s;
}

// Reset bounds shared by the envs that sample a uniform initial state.
inline std::vector<OptionSpec> reset_bound_options(double low, double high) {
  return {opt_float("reset_low", low, "lower bound of the uniform initial state"),
          opt_float("reset_high", high, "upper bound of the uniform initial state")};
}

// ---------------------------------------------------------------- CartPole --
class CartPole : public Env {
 public:
  static EnvSpec Spec(const Options*) {
    EnvSpec s;
    const double theta_threshold = 12 * 2 * kPi / 360;
    s.obs = f32_obs({-4.8, -kInf, -theta_threshold * 2, -kInf},
                    {4.8, kInf, theta_threshold * 2, kInf});
    // Gymnasium declares bounds in float32; keep their exact float32 values.
    for (auto& v : s.obs.low) v = static_cast<float>(v);
    for (auto& v : s.obs.high) v = static_cast<float>(v);
    s.infos = {state_info(4)};
    s.action = discrete_action(2);
    s.max_episode_steps = 500;
    s.reward_threshold = 475.0;
    s.options = {opt_float("gravity", 9.8, "gravitational acceleration", true),
                 positive(opt_float("masscart", 1.0, "cart mass", true)),
                 positive(opt_float("masspole", 0.1, "pole mass", true)),
                 positive(opt_float("length", 0.5, "half the pole length", true)),
                 opt_float("force_mag", 10.0, "push force magnitude", true),
                 positive(opt_float("tau", 0.02, "seconds between state updates", true)),
                 opt_str("kinematics_integrator", "euler", "'euler' or 'semi-implicit'"),
                 opt_bool("sutton_barto_reward", false,
                          "reward 0 per step and -1 on termination (Gymnasium's option)")};
    for (auto& o : reset_bound_options(-0.05, 0.05)) s.options.push_back(o);
    return s;
  }

  CartPole(const EnvSpec&, const EnvOptions& o)
      : gravity_(o.f("gravity")),
        masscart_(o.f("masscart")),
        masspole_(o.f("masspole")),
        length_(o.f("length")),
        force_mag_(o.f("force_mag")),
        tau_(o.f("tau")),
        sutton_barto_(o.b("sutton_barto_reward")),
        reset_low_(o.f("reset_low")),
        reset_high_(o.f("reset_high")) {
    const std::string& integ = o.s("kinematics_integrator");
    if (integ != "euler" && integ != "semi-implicit") {
      throw std::invalid_argument("kinematics_integrator must be 'euler' or 'semi-implicit', got '" +
                                  integ + "'");
    }
    euler_ = integ == "euler";
    total_mass_ = masspole_ + masscart_;
    polemass_length_ = masspole_ * length_;
  }

  void reset(Rng& rng, const Row& out) override {
    for (double& v : s_) v = rng.uniform(reset_low_, reset_high_);
    write(out);
  }

  StepResult step(const Action& a, Rng&, const Row& out) override {
    double x = s_[0], x_dot = s_[1], theta = s_[2], theta_dot = s_[3];
    const double force = a.discrete == 1 ? force_mag_ : -force_mag_;
    const double costheta = std::cos(theta);
    const double sintheta = std::sin(theta);
    const double temp = (force + polemass_length_ * (theta_dot * theta_dot) * sintheta) / total_mass_;
    const double thetaacc =
        (gravity_ * sintheta - costheta * temp) /
        (length_ * (4.0 / 3.0 - masspole_ * (costheta * costheta) / total_mass_));
    const double xacc = temp - polemass_length_ * thetaacc * costheta / total_mass_;
    if (euler_) {
      x = x + tau_ * x_dot;
      x_dot = x_dot + tau_ * xacc;
      theta = theta + tau_ * theta_dot;
      theta_dot = theta_dot + tau_ * thetaacc;
    } else {
      x_dot = x_dot + tau_ * xacc;
      x = x + tau_ * x_dot;
      theta_dot = theta_dot + tau_ * thetaacc;
      theta = theta + tau_ * theta_dot;
    }
    s_[0] = x;
    s_[1] = x_dot;
    s_[2] = theta;
    s_[3] = theta_dot;
    const bool terminated =
        x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
    StepResult r;
    r.terminated = terminated;
    r.reward = terminated ? (sutton_barto_ ? -1.0 : 1.0) : (sutton_barto_ ? 0.0 : 1.0);
    write(out);
    return r;
  }

  bool render(RenderData* out) override {
    out->state.assign(s_, s_ + 4);
    return true;
  }

 private:
  static constexpr double kXThreshold = 2.4;
  static constexpr double kThetaThreshold = 12 * 2 * kPi / 360;

  void write(const Row& out) const {
    float* obs = out.obs<float>();
    double* state = out.info<double>(0);
    for (int k = 0; k < 4; ++k) {
      obs[k] = static_cast<float>(s_[k]);
      state[k] = s_[k];
    }
  }

  double gravity_, masscart_, masspole_, length_, force_mag_, tau_;
  bool sutton_barto_;
  double reset_low_, reset_high_;
  bool euler_ = true;
  double total_mass_ = 0, polemass_length_ = 0;
  double s_[4] = {0, 0, 0, 0};
};

// ----------------------------------------------------------------- Acrobot --
class Acrobot : public Env {
 public:
  static EnvSpec Spec(const Options*) {
    EnvSpec s;
    s.obs = f32_obs({-1, -1, -1, -1, -kMaxVel1, -kMaxVel2}, {1, 1, 1, 1, kMaxVel1, kMaxVel2});
    for (auto& v : s.obs.low) v = static_cast<float>(v);
    for (auto& v : s.obs.high) v = static_cast<float>(v);
    s.infos = {state_info(4)};
    s.action = discrete_action(3);
    s.max_episode_steps = 500;
    s.reward_threshold = -100.0;
    s.options = {positive(opt_float("link_length_1", 1.0, "length of link 1", true)),
                 positive(opt_float("link_mass_1", 1.0, "mass of link 1", true)),
                 positive(opt_float("link_mass_2", 1.0, "mass of link 2", true)),
                 in_range(opt_float("link_com_pos_1", 0.5, "centre of mass of link 1", true), 0.0, kInf),
                 in_range(opt_float("link_com_pos_2", 0.5, "centre of mass of link 2", true), 0.0, kInf),
                 positive(opt_float("link_moi", 1.0, "moment of inertia of both links", true)),
                 in_range(opt_float("torque_noise_max", 0.0, "uniform torque noise amplitude", true), 0.0, kInf),
                 opt_str("book_or_nips", "book", "dynamics variant: 'book' or 'nips'")};
    for (auto& o : reset_bound_options(-0.1, 0.1)) s.options.push_back(o);
    return s;
  }

  Acrobot(const EnvSpec&, const EnvOptions& o)
      : l1_(o.f("link_length_1")),
        m1_(o.f("link_mass_1")),
        m2_(o.f("link_mass_2")),
        lc1_(o.f("link_com_pos_1")),
        lc2_(o.f("link_com_pos_2")),
        moi_(o.f("link_moi")),
        noise_(o.f("torque_noise_max")),
        reset_low_(o.f("reset_low")),
        reset_high_(o.f("reset_high")) {
    const std::string& v = o.s("book_or_nips");
    if (v != "book" && v != "nips") {
      throw std::invalid_argument("book_or_nips must be 'book' or 'nips', got '" + v + "'");
    }
    book_ = v == "book";
  }

  void reset(Rng& rng, const Row& out) override {
    // Gymnasium stores the initial state as float32.
    for (double& v : s_) v = static_cast<float>(rng.uniform(reset_low_, reset_high_));
    fresh_ = true;
    write(out);
  }

  StepResult step(const Action& a, Rng& rng, const Row& out) override {
    double torque = static_cast<double>(a.discrete) - 1.0;  // AVAIL_TORQUE = [-1, 0, 1]
    if (noise_ > 0) torque += rng.uniform(-noise_, noise_);
    // rk4 over [0, dt] in one step, on the state augmented with the torque.
    const double dt = kDt;
    const double dt2 = dt / 2.0;
    double y0[4] = {s_[0], s_[1], s_[2], s_[3]};
    double k1[4], k2[4], k3[4], k4[4], y[4];
    dsdt(y0, torque, k1);
    for (int i = 0; i < 4; ++i) y[i] = y0[i] + dt2 * k1[i];
    dsdt(y, torque, k2);
    for (int i = 0; i < 4; ++i) y[i] = y0[i] + dt2 * k2[i];
    dsdt(y, torque, k3);
    for (int i = 0; i < 4; ++i) y[i] = y0[i] + dt * k3[i];
    dsdt(y, torque, k4);
    double ns[4];
    for (int i = 0; i < 4; ++i) {
      ns[i] = y0[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    }
    ns[0] = wrap(ns[0], -kPi, kPi);
    ns[1] = wrap(ns[1], -kPi, kPi);
    ns[2] = std::min(std::max(ns[2], -kMaxVel1), kMaxVel1);
    ns[3] = std::min(std::max(ns[3], -kMaxVel2), kMaxVel2);
    for (int i = 0; i < 4; ++i) s_[i] = ns[i];
    fresh_ = false;
    StepResult r;
    r.terminated = -std::cos(s_[0]) - std::cos(s_[1] + s_[0]) > 1.0;
    r.reward = r.terminated ? 0.0 : -1.0;
    write(out);
    return r;
  }

  // The state, then 1 while it is the reset's (Gymnasium keeps that one as
  // float32, which its picture's arithmetic then uses), 0 after a step.
  bool render(RenderData* out) override {
    out->state = {s_[0], s_[1], s_[2], s_[3], fresh_ ? 1.0 : 0.0};
    return true;
  }

 private:
  static constexpr double kDt = 0.2;
  static constexpr double kMaxVel1 = 4 * kPi;
  static constexpr double kMaxVel2 = 9 * kPi;

  static double wrap(double x, double m, double M) {
    const double diff = M - m;
    while (x > M) x = x - diff;
    while (x < m) x = x + diff;
    return x;
  }

  void dsdt(const double* s, double a, double* out) const {
    const double m1 = m1_, m2 = m2_, l1 = l1_, lc1 = lc1_, lc2 = lc2_, I1 = moi_, I2 = moi_;
    const double g = 9.8;
    const double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    const double d1 =
        m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * std::cos(theta2)) + I1 + I2;
    const double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * std::cos(theta2)) + I2;
    const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - kPi / 2.0);
    const double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * std::sin(theta2) -
                        2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                        (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - kPi / 2) + phi2;
    double ddtheta2;
    if (!book_) {
      ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
    } else {
      ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * std::sin(theta2) - phi2) /
                 (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
    }
    const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    out[0] = dtheta1;
    out[1] = dtheta2;
    out[2] = ddtheta1;
    out[3] = ddtheta2;
  }

  void write(const Row& out) const {
    float* obs = out.obs<float>();
    obs[0] = static_cast<float>(std::cos(s_[0]));
    obs[1] = static_cast<float>(std::sin(s_[0]));
    obs[2] = static_cast<float>(std::cos(s_[1]));
    obs[3] = static_cast<float>(std::sin(s_[1]));
    obs[4] = static_cast<float>(s_[2]);
    obs[5] = static_cast<float>(s_[3]);
    double* state = out.info<double>(0);
    for (int k = 0; k < 4; ++k) state[k] = s_[k];
  }

  double l1_, m1_, m2_, lc1_, lc2_, moi_, noise_, reset_low_, reset_high_;
  bool book_ = true;
  bool fresh_ = true;  // s_ is the reset's (float32 in Gymnasium)
  double s_[4] = {0, 0, 0, 0};
};

// ------------------------------------------------------------- MountainCar --
class MountainCar : public Env {
 public:
  static EnvSpec Spec(const Options*) {
    EnvSpec s;
    s.obs = f32_obs({-1.2, -0.07}, {0.6, 0.07});
    for (auto& v : s.obs.low) v = static_cast<float>(v);
    for (auto& v : s.obs.high) v = static_cast<float>(v);
    s.infos = {state_info(2)};
    s.action = discrete_action(3);
    s.max_episode_steps = 200;
    s.reward_threshold = -110.0;
    s.options = {opt_float("force", 0.001, "engine force", true),
                 opt_float("gravity", 0.0025, "gravity", true),
                 opt_float("goal_velocity", 0.0, "minimum velocity at the goal", true)};
    for (auto& o : reset_bound_options(-0.6, -0.4)) s.options.push_back(o);
    return s;
  }

  MountainCar(const EnvSpec&, const EnvOptions& o)
      : force_(o.f("force")),
        gravity_(o.f("gravity")),
        goal_velocity_(o.f("goal_velocity")),
        reset_low_(o.f("reset_low")),
        reset_high_(o.f("reset_high")) {}

  void reset(Rng& rng, const Row& out) override {
    pos_ = rng.uniform(reset_low_, reset_high_);
    vel_ = 0.0;
    write(out);
  }

  StepResult step(const Action& a, Rng&, const Row& out) override {
    double velocity = vel_;
    double position = pos_;
    velocity += static_cast<double>(a.discrete - 1) * force_ + std::cos(3 * position) * (-gravity_);
    velocity = std::min(std::max(velocity, -kMaxSpeed), kMaxSpeed);
    position += velocity;
    position = std::min(std::max(position, kMinPosition), kMaxPosition);
    if (position == kMinPosition && velocity < 0) velocity = 0;
    pos_ = position;
    vel_ = velocity;
    StepResult r;
    r.terminated = position >= kGoalPosition && velocity >= goal_velocity_;
    r.reward = -1.0;
    write(out);
    return r;
  }

  bool render(RenderData* out) override {
    out->state = {pos_, vel_};
    return true;
  }

 private:
  static constexpr double kMinPosition = -1.2;
  static constexpr double kMaxPosition = 0.6;
  static constexpr double kMaxSpeed = 0.07;
  static constexpr double kGoalPosition = 0.5;

  void write(const Row& out) const {
    float* obs = out.obs<float>();
    obs[0] = static_cast<float>(pos_);
    obs[1] = static_cast<float>(vel_);
    double* state = out.info<double>(0);
    state[0] = pos_;
    state[1] = vel_;
  }

  double force_, gravity_, goal_velocity_, reset_low_, reset_high_;
  double pos_ = 0, vel_ = 0;
};

// --------------------------------------------------- MountainCarContinuous --
// Gymnasium keeps this env's state as float32 after the first step (the first
// step still computes in float64 from the float64 reset state); the float32
// rounding is reproduced so terminations happen on the same step.
class MountainCarContinuous : public Env {
 public:
  static EnvSpec Spec(const Options*) {
    EnvSpec s;
    s.obs = f32_obs({-1.2, -0.07}, {0.6, 0.07});
    for (auto& v : s.obs.low) v = static_cast<float>(v);
    for (auto& v : s.obs.high) v = static_cast<float>(v);
    s.infos = {state_info(2)};
    s.action = box_action({1}, {-1.0}, {1.0});
    s.max_episode_steps = 999;
    s.reward_threshold = 90.0;
    s.options = {opt_float("power", 0.0015, "engine power", true),
                 opt_float("goal_velocity", 0.0, "minimum velocity at the goal", true)};
    for (auto& o : reset_bound_options(-0.6, -0.4)) s.options.push_back(o);
    return s;
  }

  MountainCarContinuous(const EnvSpec&, const EnvOptions& o)
      : power_(o.f("power")),
        goal_velocity_(o.f("goal_velocity")),
        reset_low_(o.f("reset_low")),
        reset_high_(o.f("reset_high")) {}

  void reset(Rng& rng, const Row& out) override {
    pos_ = rng.uniform(reset_low_, reset_high_);
    vel_ = 0.0;
    first_ = true;
    write(out);
  }

  StepResult step(const Action& a, Rng&, const Row& out) override {
    const float action = static_cast<float>(a.values[0]);
    // force = min(max(action, -1.0), 1.0): a Python float when clipped,
    // otherwise the float32 action.
    const bool clipped = action < -1.0f || action > 1.0f;
    double position = pos_;
    double velocity = vel_;
    if (first_) {
      // float64 state: velocity += (force*power - 0.0025*cos(3*pos)) in float64,
      // where force*power is float32 when not clipped.
      const double fp = clipped ? (action < 0 ? -1.0 : 1.0) * power_
                                : static_cast<double>(action * static_cast<float>(power_));
      const double g = 0.0025 * std::cos(3 * position);
      const double inc = clipped ? fp - g : static_cast<double>(static_cast<float>(fp) - static_cast<float>(g));
      velocity += inc;
    } else {
      // float32 state: every NumPy operation stays float32.
      const float posf = static_cast<float>(position);
      const double g = 0.0025 * std::cos(static_cast<double>(3.0f * posf));
      float inc;
      if (clipped) {
        inc = static_cast<float>((action < 0 ? -1.0 : 1.0) * power_ - g);
      } else {
        const float fp = action * static_cast<float>(power_);
        inc = fp - static_cast<float>(g);
      }
      velocity = static_cast<double>(static_cast<float>(velocity) + inc);
    }
    // After a clip a value is a Python float again; otherwise it stays float32
    // (after the first step), and NumPy compares float32 against the Python
    // constant demoted to float32.
    bool vel_f32 = !first_;
    bool pos_f32 = !first_;
    if (velocity > kMaxSpeed) { velocity = kMaxSpeed; vel_f32 = false; }
    if (velocity < -kMaxSpeed) { velocity = -kMaxSpeed; vel_f32 = false; }
    if (first_) {
      position += velocity;
    } else {
      // float32 + (float32, or the Python float max_speed demoted to float32)
      position = static_cast<double>(static_cast<float>(position) + static_cast<float>(velocity));
    }
    if (position > kMaxPosition) { position = kMaxPosition; pos_f32 = false; }
    if (position < kMinPosition) { position = kMinPosition; pos_f32 = false; }
    if (position == kMinPosition && velocity < 0) { velocity = 0; vel_f32 = false; }
    const bool at_goal = pos_f32 ? static_cast<float>(position) >= static_cast<float>(kGoalPosition)
                                 : position >= kGoalPosition;
    const bool fast_enough = vel_f32
                                 ? static_cast<float>(velocity) >= static_cast<float>(goal_velocity_)
                                 : velocity >= goal_velocity_;
    StepResult r;
    r.terminated = at_goal && fast_enough;
    double reward = r.terminated ? 100.0 : 0.0;
    reward -= std::pow(static_cast<double>(action), 2) * 0.1;
    r.reward = reward;
    pos_ = static_cast<float>(position);
    vel_ = static_cast<float>(velocity);
    first_ = false;
    write(out);
    return r;
  }

  // Position, velocity, then 1 once Gymnasium holds them as float32 (after
  // the first step), which its picture's arithmetic then uses.
  bool render(RenderData* out) override {
    out->state = {pos_, vel_, first_ ? 0.0 : 1.0};
    return true;
  }

 private:
  static constexpr double kMinPosition = -1.2;
  static constexpr double kMaxPosition = 0.6;
  static constexpr double kMaxSpeed = 0.07;
  static constexpr double kGoalPosition = 0.45;

  void write(const Row& out) const {
    float* obs = out.obs<float>();
    obs[0] = static_cast<float>(pos_);
    obs[1] = static_cast<float>(vel_);
    double* state = out.info<double>(0);
    state[0] = pos_;
    state[1] = vel_;
  }

  double power_, goal_velocity_, reset_low_, reset_high_;
  double pos_ = 0, vel_ = 0;
  bool first_ = true;
};

// ---------------------------------------------------------------- Pendulum --
class Pendulum : public Env {
 public:
  static EnvSpec Spec(const Options*) {
    EnvSpec s;
    s.obs = f32_obs({-1.0, -1.0, -8.0}, {1.0, 1.0, 8.0});
    s.infos = {state_info(2)};
    s.action = box_action({1}, {-2.0}, {2.0});
    s.max_episode_steps = 200;
    s.options = {opt_float("g", 10.0, "gravitational acceleration", true),
                 positive(opt_float("m", 1.0, "pendulum mass", true)),
                 positive(opt_float("l", 1.0, "pendulum length", true)),
                 opt_float("x_init", kPi, "initial angle is uniform in [-x_init, x_init]"),
                 opt_float("y_init", 1.0, "initial angular velocity is uniform in [-y_init, y_init]")};
    return s;
  }

  Pendulum(const EnvSpec&, const EnvOptions& o)
      : g_(o.f("g")), m_(o.f("m")), l_(o.f("l")), x_init_(o.f("x_init")), y_init_(o.f("y_init")) {}

  void reset(Rng& rng, const Row& out) override {
    th_ = rng.uniform(-x_init_, x_init_);
    thdot_ = rng.uniform(-y_init_, y_init_);
    last_u_ = std::nan("");  // Gymnasium's last_u = None: no torque arrow
    write(out);
  }

  StepResult step(const Action& a, Rng&, const Row& out) override {
    // u is a float32 scalar in Gymnasium; products with Python floats stay float32.
    float u = static_cast<float>(a.values[0]);
    u = std::min(std::max(u, -kMaxTorque), kMaxTorque);
    const double th = th_, thdot = thdot_;
    const double an = angle_normalize(th);
    const float u_cost = 0.001f * (u * u);
    const double costs = an * an + 0.1 * (thdot * thdot) + static_cast<double>(u_cost);
    const float torque_term = static_cast<float>(3.0 / (m_ * (l_ * l_))) * u;
    double newthdot =
        thdot + (3 * g_ / (2 * l_) * std::sin(th) + static_cast<double>(torque_term)) * kDt;
    newthdot = std::min(std::max(newthdot, -kMaxSpeed), kMaxSpeed);
    const double newth = th + newthdot * kDt;
    th_ = newth;
    thdot_ = newthdot;
    last_u_ = u;
    StepResult r;
    r.reward = -costs;
    write(out);
    return r;
  }

  // th, thdot, then the last clipped torque (NaN after a reset), which
  // Gymnasium's picture draws as an arrow.
  bool render(RenderData* out) override {
    out->state = {th_, thdot_, static_cast<double>(last_u_)};
    return true;
  }

 private:
  static constexpr float kMaxTorque = 2.0f;
  static constexpr double kMaxSpeed = 8.0;
  static constexpr double kDt = 0.05;

  // ((x + pi) % (2 pi)) - pi with Python's floored modulo.
  static double angle_normalize(double x) {
    const double m = 2 * kPi;
    double r = std::fmod(x + kPi, m);
    if (r != 0.0 && ((r < 0) != (m < 0))) r += m;
    return r - kPi;
  }

  void write(const Row& out) const {
    float* obs = out.obs<float>();
    obs[0] = static_cast<float>(std::cos(th_));
    obs[1] = static_cast<float>(std::sin(th_));
    obs[2] = static_cast<float>(thdot_);
    double* state = out.info<double>(0);
    state[0] = th_;
    state[1] = thdot_;
  }

  double g_, m_, l_, x_init_, y_init_;
  double th_ = 0, thdot_ = 0;
  float last_u_ = 0.0f;
};

}  // namespace classic
}  // namespace torchfrag
