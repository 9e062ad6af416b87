// Every env family the extension ships: one line each.
#include "../registry.h"
#include "atari.h"
#include "classic_control.h"
#include "debug.h"
#include "mujoco.h"

TORCHFRAG_REGISTER_ENV(torchfrag::classic::CartPole, "CartPole-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::Acrobot, "Acrobot-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::MountainCar, "MountainCar-v0");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::MountainCarContinuous, "MountainCarContinuous-v0");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::Pendulum, "Pendulum-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::DebugEnv, "Debug-v0");
TORCHFRAG_REGISTER_FAMILY(torchfrag::mujoco_envs::MujocoFamily);
TORCHFRAG_REGISTER_FAMILY(torchfrag::atari::AtariFamily);
