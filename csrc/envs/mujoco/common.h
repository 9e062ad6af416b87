// Helpers shared by the MuJoCo task headers in this folder (one task each):
// the options several tasks declare (each with its own default), the
// target rejection loop of Pusher and Reacher, and the parts the locomotion
// tasks share (Health, Locomotion and its info fields).
#pragma once

#include <string>
#include <vector>

#include "../mujoco_env.h"

namespace torchfrag {
namespace mujoco_envs {

namespace detail {

inline bool flag(const Options& o, const char* name) { return o.num(name) != 0.0; }

inline void need(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

// Gymnasium's "exclude_current_positions_from_observation" option.
inline OptionSpec exclude_option() {
  return opt_bool("exclude_current_positions_from_observation", true,
                  "leave the x (and y) position of the root out of the observation");
}
// How many leading qpos entries the observation leaves out: `root` (the x,
// or x and y, of the root) when the option above is set.
inline int excluded(const Options& o, int root) {
  return flag(o, "exclude_current_positions_from_observation") ? root : 0;
}
inline int excluded(const EnvOptions& o, int root) {
  return o.b("exclude_current_positions_from_observation") ? root : 0;
}
// Gymnasium's rejection loop for a target on the plane: (x, y) with x from
// U(x_lo, x_hi) then y from U(y_lo, y_hi), drawn again until `accept` takes
// its distance from the origin; written to xy[0], xy[1].
template <typename Accept>
void draw_target(Rng& rng, double x_lo, double x_hi, double y_lo, double y_hi, Accept accept,
                 double* xy) {
  double p[2];
  do {
    p[0] = rng.uniform(x_lo, x_hi);
    p[1] = rng.uniform(y_lo, y_hi);
  } while (!accept(norm(p, 2)));
  xy[0] = p[0];
  xy[1] = p[1];
}
inline OptionSpec noise_option(double def) {
  return opt_float("reset_noise_scale", def,
                   "scale of the random perturbation of the initial state", true);
}
// A per-env float option named `<what>_weight`.
inline OptionSpec weight_option(const std::string& what, double def, const std::string& doc) {
  return opt_float(what + "_weight", def, "weight of the " + doc, true);
}
inline OptionSpec healthy_reward_option(double def,
                                        const char* doc = "reward per step while healthy") {
  return opt_float("healthy_reward", def, doc, true);
}
inline OptionSpec terminate_option() {
  return opt_bool("terminate_when_unhealthy", true, "end the episode when unhealthy");
}
// Gymnasium's tuple option `<name>_range=(lo, hi)` as `<name>_min`/`<name>_max`.
inline void add_range(std::vector<OptionSpec>& v, const std::string& name, double lo, double hi,
                      const std::string& what) {
  v.push_back(opt_float(name + "_min", lo, name + "_range[0]: lower " + what, true));
  v.push_back(opt_float(name + "_max", hi, name + "_range[1]: upper " + what, true));
}

}  // namespace detail

// The health options of Hopper, Walker2d, Ant and Humanoid (each task
// decides what healthy means: bounds inclusive or not, more checks).
struct Health {
  explicit Health(const EnvOptions& o)
      : reward(o.f("healthy_reward")),
        terminate(o.b("terminate_when_unhealthy")),
        z_min(o.f("healthy_z_min")),
        z_max(o.f("healthy_z_max")) {}

  double reward;
  bool terminate;
  double z_min, z_max;
};

// What the tasks rewarded for moving forward share (HalfCheetah, Hopper,
// Walker2d, Swimmer, Ant, Humanoid): the weights of the forward reward and
// the control cost, and the info values they report, under Gymnasium's names
// (each task lists the ones it reports in its info_fields(), from
// LocomotionInfo).  A public mixin base, so that info fields can point at
// these members.
struct Locomotion {
  explicit Locomotion(const EnvOptions& o)
      : forward_w(o.f("forward_reward_weight")), ctrl_w(o.f("ctrl_cost_weight")) {}

  // Sets x_velocity, reward_forward and reward_ctrl; returns the control cost.
  double forward_and_ctrl(double x_vel, const double* ctrl, int nu) {
    x_velocity = x_vel;
    reward_forward = forward_w * x_vel;
    const double ctrl_cost = ctrl_w * np_sum_sq(ctrl, nu);
    reward_ctrl = -ctrl_cost;
    return ctrl_cost;
  }
  // The step result of the tasks with a health check: sets reward_survive;
  // reward = (forward + survive) - costs, as Gymnasium groups it.
  StepResult healthy_step(bool healthy, const Health& h, double costs) {
    reward_survive = healthy ? h.reward : 0.0;
    StepResult r;
    r.reward = (reward_forward + reward_survive) - costs;
    r.terminated = !healthy && h.terminate;
    return r;
  }
  // x_position, y_position and distance_from_origin of a free or planar root.
  void set_planar_position(const double* qpos) {
    x_position = qpos[0];
    y_position = qpos[1];
    distance_from_origin = norm(qpos, 2);
  }

  double forward_w, ctrl_w;
  double x_position = 0, y_position = 0, distance_from_origin = 0, x_velocity = 0,
         y_velocity = 0, reward_forward = 0, reward_ctrl = 0, reward_survive = 0;
};

// Locomotion's info values as info fields of Task, each bound to its
// Gymnasium name here once.
template <typename Task>
struct LocomotionInfo {
  using F = InfoField<Task>;
  static constexpr F x_position{"x_position", &Task::x_position};
  static constexpr F y_position{"y_position", &Task::y_position};
  static constexpr F distance_from_origin{"distance_from_origin", &Task::distance_from_origin};
  static constexpr F x_velocity{"x_velocity", &Task::x_velocity};
  static constexpr F y_velocity{"y_velocity", &Task::y_velocity};
  static constexpr F reward_forward{"reward_forward", &Task::reward_forward};
  static constexpr F reward_ctrl{"reward_ctrl", &Task::reward_ctrl};
  static constexpr F reward_survive{"reward_survive", &Task::reward_survive};
};

}  // namespace mujoco_envs
}  // namespace torchfrag
