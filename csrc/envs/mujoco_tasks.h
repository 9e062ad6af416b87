// The Gymnasium v5 MuJoCo tasks, one class per header in mujoco/
// (gymnasium/envs/mujoco/*_v5.py).
//
// Every class mirrors its Python counterpart statement by statement: the same
// reset distribution (on our own Rng), observation layout, health checks,
// reward terms and info entries, computed in the same order so that rounding
// matches.  A task derives from MujocoTask<Task> (mujoco_env.h), passes its
// ResetNoise to it (the reset body itself is shared) and provides, as statics
// used by MujocoFamily:
//   kTraits                               id, model file, frame skip, limits,
//   TaskOptions()                         options besides xml_file/frame_skip,
//   ObsSize(info, options)                observation length,
//   info_fields()                         its info entries, name -> value,
//                                         once, in Gymnasium's order (the
//                                         spec's Infos() derive from it),
//   Validate(info, options)               model/option checks before any env.
#pragma once

#include "mujoco/half_cheetah.h"
#include "mujoco/hopper.h"
#include "mujoco/walker2d.h"
#include "mujoco/ant.h"
#include "mujoco/humanoid.h"
#include "mujoco/humanoid_standup.h"
#include "mujoco/inverted_double_pendulum.h"
#include "mujoco/inverted_pendulum.h"
#include "mujoco/pusher.h"
#include "mujoco/reacher.h"
#include "mujoco/swimmer.h"
