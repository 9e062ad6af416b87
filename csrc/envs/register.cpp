// Every env family the extension ships: one line each.
#include "../registry.h"
#include "atari.h"
#include "box2d/bipedal_walker.h"
#include "box2d/car_racing.h"
#include "box2d/lunar_lander.h"
#include "classic_control.h"
#include "debug.h"
#include "dmc.h"
#include "minigrid.h"
#include "mujoco.h"
#include "toy_text.h"

TORCHFRAG_REGISTER_ENV(torchfrag::classic::CartPole, "CartPole-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::Acrobot, "Acrobot-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::MountainCar, "MountainCar-v0");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::MountainCarContinuous, "MountainCarContinuous-v0");
TORCHFRAG_REGISTER_ENV(torchfrag::classic::Pendulum, "Pendulum-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::toy_text::FrozenLake4x4, "FrozenLake-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::toy_text::FrozenLake8x8, "FrozenLake8x8-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::toy_text::Taxi, "Taxi-v4");
TORCHFRAG_REGISTER_ENV(torchfrag::toy_text::CliffWalkingDry, "CliffWalking-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::toy_text::CliffWalkingSlippery, "CliffWalkingSlippery-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::toy_text::Blackjack, "Blackjack-v1");
TORCHFRAG_REGISTER_ENV(torchfrag::box2d::LunarLanderDiscrete, "LunarLander-v3");
TORCHFRAG_REGISTER_ENV(torchfrag::box2d::LunarLanderContinuous, "LunarLanderContinuous-v3");
TORCHFRAG_REGISTER_ENV(torchfrag::box2d::BipedalWalkerNormal, "BipedalWalker-v3");
TORCHFRAG_REGISTER_ENV(torchfrag::box2d::BipedalWalkerHardcore, "BipedalWalkerHardcore-v3");
TORCHFRAG_REGISTER_ENV(torchfrag::box2d::CarRacingV3, "CarRacing-v3");
TORCHFRAG_REGISTER_ENV(torchfrag::box2d::CarRacingV2, "CarRacing-v2");
TORCHFRAG_REGISTER_ENV(torchfrag::DebugEnv, "Debug-v0");
TORCHFRAG_REGISTER_FAMILY(torchfrag::mujoco_envs::MujocoFamily);
TORCHFRAG_REGISTER_FAMILY(torchfrag::atari::AtariFamily);
TORCHFRAG_REGISTER_FAMILY(torchfrag::minigrid::MiniGridFamily);
TORCHFRAG_REGISTER_FAMILY(torchfrag::dmc::DmcFamily);
