"""Learnability probes on real Atari pixels (gymnasium envs for Stampede's tests).

StampedeProbe/PongTrack-v0 is ALE Pong seen as the Atari configs see it (frame skip 4,
84x84 grayscale, a stack of 4 frames, oldest first, uint8 [4, 84, 84]), with Pong's score
replaced by a dense reward read from the console's RAM: 1 for each step that ends with the
agent's paddle level with the ball (rows within ALIGNED of each other), 0 otherwise (and
while no ball is in play). Episodes are 250 steps. A random policy scores about 25 an
episode, a policy that follows the ball up and down (seen only in the pixels) about 180.
A pipeline that delivers frames, actions and rewards intact learns it in a few hundred
thousand frames; one that scrambles any of them does not.

Registered by register(), which a config names as gym_module "stampede_probes:register"
(this folder is on the embedded interpreter's path).
"""
import gymnasium as gym
import numpy as np
from gymnasium import spaces

# Pong's RAM (the Atari annotated RAM of Anand et al. 2019): the agent's paddle and the
# ball's vertical positions; the ball's is 0 while no ball is in play.
PLAYER_Y, BALL_Y = 51, 54
ALIGNED = 12
_ROWS = (np.arange(84) * 210 / 84).astype(np.intp)
_COLS = (np.arange(84) * 160 / 84).astype(np.intp)


class PongTrack(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, frameskip=4, blank_background=False):
        # blank_background: the playfield's grey (87) shown as 0, so only the paddles, the
        # ball, the walls and the score are lit (a check of how much the bright, constant
        # background hides from a freshly initialised network).
        self.blank = bool(blank_background)
        import ale_py  # noqa: F401  (registers the ALE ids)
        gym.register_envs(ale_py)
        self.env = gym.make("ALE/Pong-v5", frameskip=int(frameskip), repeat_action_probability=0.0,
                            obs_type="grayscale", full_action_space=False)
        self.ale = self.env.unwrapped.ale
        self.observation_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.action_space = self.env.action_space
        self.stack = np.zeros((4, 84, 84), np.uint8)

    def _small(self, frame):
        small = frame[_ROWS][:, _COLS]
        if self.blank:
            small = np.where(small == 87, 0, small).astype(np.uint8)
        return small

    def _aligned(self):
        ram = self.ale.getRAM()
        ball = int(ram[BALL_Y])
        return ball != 0 and abs(ball - int(ram[PLAYER_Y])) < ALIGNED

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        frame, info = self.env.reset(seed=seed)
        self.stack[:] = self._small(frame)
        return self.stack.copy(), info

    def step(self, action):
        frame, _, terminated, truncated, info = self.env.step(action)
        self.stack[:-1] = self.stack[1:]
        self.stack[-1] = self._small(frame)
        return self.stack.copy(), float(self._aligned()), terminated, truncated, info

    def close(self):
        self.env.close()


def register():
    if "StampedeProbe/PongTrack-v0" not in gym.registry:
        # frameskip in the registration's kwargs: the bridge counts 4 ALE frames a step.
        gym.register("StampedeProbe/PongTrack-v0", entry_point=PongTrack, max_episode_steps=250,
                     kwargs={"frameskip": 4})
