// MujocoFamily: one table entry per task, built from the task classes'
// static members (see mujoco_tasks.h).  The info arrays come from each task's
// info_fields() (MujocoTask::Infos), after the shared qpos0/qvel0.
#include "mujoco.h"

#include "mujoco_tasks.h"

namespace torchfrag {
namespace mujoco_envs {

namespace {

struct TaskEntry {
  TaskTraits traits;
  std::vector<OptionSpec> (*task_options)();
  int64_t (*obs_size)(const ModelInfo&, const Options&);
  std::vector<ArraySpec> (*infos)(const ModelInfo&);
  void (*validate)(const ModelInfo&, const Options&);
  std::unique_ptr<Env> (*make)(const EnvOptions&);
};

template <typename T>
TaskEntry entry() {
  return TaskEntry{T::kTraits,   &T::TaskOptions, &T::ObsSize, &T::Infos, &T::Validate,
                   [](const EnvOptions& o) -> std::unique_ptr<Env> {
                     return std::make_unique<T>(o);
                   }};
}

const std::vector<TaskEntry>& tasks() {
  static const std::vector<TaskEntry> table = [] {
    return std::vector<TaskEntry>{entry<HalfCheetah>(),
                                entry<Hopper>(),
                                entry<Walker2d>(),
                                entry<Ant>(),
                                entry<Humanoid>(),
                                entry<HumanoidStandup>(),
                                entry<InvertedDoublePendulum>(),
                                entry<InvertedPendulum>(),
                                entry<Pusher>(),
                                entry<Reacher>(),
                                entry<Swimmer>()};
  }();
  return table;
}

const TaskEntry& task(const std::string& id) {
  for (const auto& t : tasks()) {
    if (id == t.traits.id) return t;
  }
  throw std::invalid_argument("MujocoFamily does not provide '" + id + "'");
}

std::vector<OptionSpec> declared_options(const TaskEntry& t) {
  std::vector<OptionSpec> v = {
      opt_str("xml_file", t.traits.xml,
              "MuJoCo model: a file in Gymnasium's mujoco/assets folder, or a path starting with "
              "'/', '.' or '~'"),
      opt_int("frame_skip", t.traits.frame_skip, "MuJoCo steps per env step")};
  for (auto& o : t.task_options()) v.push_back(std::move(o));
  return v;
}

}  // namespace

std::vector<std::string> MujocoFamily::ids() const {
  std::vector<std::string> out;
  for (const auto& t : tasks()) out.emplace_back(t.traits.id);
  return out;
}

EnvSpec MujocoFamily::spec(const std::string& id, const Options* options) const {
  const TaskEntry& t = task(id);
  EnvSpec s;
  s.options = declared_options(t);
  s.max_episode_steps = t.traits.max_episode_steps;
  s.reward_threshold = t.traits.reward_threshold;
  Options defaults;
  if (options == nullptr) {
    defaults = Options::resolve(s.options, {}, 1);
    options = &defaults;
  }
  if (options->num("frame_skip") < 1) {
    throw std::invalid_argument("frame_skip must be >= 1, got " +
                                std::to_string(static_cast<int64_t>(options->num("frame_skip"))));
  }
  const ModelInfo info = ModelCache::instance().info(expand_model_path(options->str("xml_file")));
  t.validate(info, *options);

  s.obs = f64_array("obs", {t.obs_size(info, *options)});
  s.infos = {f64_array("qpos0", {info.nq}), f64_array("qvel0", {info.nv})};
  for (auto& a : t.infos(info)) s.infos.push_back(std::move(a));
  s.action = box_action({info.nu}, info.ctrl_low, info.ctrl_high);
  return s;
}

std::unique_ptr<Env> MujocoFamily::make(const std::string& id, const EnvSpec&,
                                        const EnvOptions& options) const {
  return task(id).make(options);
}

}  // namespace mujoco_envs
}  // namespace torchfrag
