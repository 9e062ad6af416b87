// DmcFamily: one table entry per suite task, built from the task classes'
// static members (kTraits, ObsSize) in dmc/.
#include "dmc.h"

#include "dmc/cartpole.h"
#include "dmc/cheetah_walker.h"
#include "dmc/fish_humanoid.h"
#include "dmc/hopper_finger_cup.h"
#include "dmc/manipulator.h"
#include "dmc/pendulum_acrobot.h"
#include "dmc/point_mass_reacher.h"
#include "dmc/swimmer.h"

namespace torchfrag {
namespace dmc {

namespace {

struct TaskEntry {
  DmcTraits traits;
  int64_t (*obs_size)(const mjModel*);
  std::unique_ptr<Env> (*make)(const EnvOptions&);
};

template <typename T>
TaskEntry entry() {
  return TaskEntry{T::kTraits, &T::ObsSize, [](const EnvOptions& o) -> std::unique_ptr<Env> {
                     return std::make_unique<T>(o);
                   }};
}

// EnvPool's order: domain by domain.
const std::vector<TaskEntry>& tasks() {
  static const std::vector<TaskEntry> table = {
      entry<AcrobotSwingup>(),  entry<AcrobotSwingupSparse>(),  entry<BallInCupCatch>(),
      entry<CartpoleBalance>(), entry<CartpoleBalanceSparse>(), entry<CartpoleSwingup>(),
      entry<CartpoleSwingupSparse>(), entry<CheetahRun>(),      entry<FingerSpin>(),
      entry<FingerTurnEasy>(),  entry<FingerTurnHard>(),        entry<FishSwim>(),
      entry<FishUpright>(),     entry<HopperHop>(),             entry<HopperStand>(),
      entry<HumanoidRun>(),     entry<HumanoidStand>(),         entry<HumanoidWalk>(),
      entry<ManipulatorBringBall>(), entry<ManipulatorBringPeg>(),
      entry<ManipulatorInsertBall>(), entry<ManipulatorInsertPeg>(),
      entry<PendulumSwingup>(), entry<PointMassEasy>(),         entry<PointMassHard>(),
      entry<ReacherEasy>(),     entry<ReacherHard>(),           entry<SwimmerSwimmer6>(),
      entry<SwimmerSwimmer15>(), entry<WalkerRun>(),             entry<WalkerStand>(),
      entry<WalkerWalk>()};
  return table;
}

const TaskEntry& task(const std::string& id) {
  for (const auto& t : tasks()) {
    if (id == t.traits.id) return t;
  }
  throw std::invalid_argument("DmcFamily does not provide '" + id + "'");
}

}  // namespace

std::vector<std::string> DmcFamily::ids() const {
  std::vector<std::string> out;
  for (const auto& t : tasks()) out.emplace_back(t.traits.id);
  return out;
}

EnvSpec DmcFamily::spec(const std::string& id, const Options*) const {
  const TaskEntry& t = task(id);
  EnvSpec s;
  s.id = id;
  const ModelPtr m = ModelCache::instance().model(suite_model_path(t.traits.xml));
  s.max_episode_steps = step_limit(t.traits, m->opt.timestep);
  s.obs = f64_array("obs", {t.obs_size(m.get())});
  s.infos = {f64_array("qpos0", {m->nq}), f64_array("qvel0", {m->nv})};
  if (t.traits.target_size > 0) s.infos.push_back(f64_array("target0", {t.traits.target_size}));
  std::vector<double> low, high;
  for (int k = 0; k < m->nu; ++k) {
    // dm_control's action spec: the ctrlrange where limited, else unbounded.
    const bool limited = m->actuator_ctrllimited[k] != 0;
    low.push_back(limited ? static_cast<float>(m->actuator_ctrlrange[2 * k]) : -kInf);
    high.push_back(limited ? static_cast<float>(m->actuator_ctrlrange[2 * k + 1]) : kInf);
  }
  s.action = box_action({m->nu}, low, high);
  return s;
}

std::unique_ptr<Env> DmcFamily::make(const std::string& id, const EnvSpec&,
                                     const EnvOptions& options) const {
  return task(id).make(options);
}

}  // namespace dmc
}  // namespace torchfrag
