"""MDP terms of the constrained locomotion task: rewards, costs, observations, commands and
terminations, written once as small pure functions over batched torch tensors (batch first).

Every simulator backend feeds the same functions, so the task is identical on C MuJoCo,
MuJoCo Warp and Isaac Gym; only state access and stepping differ (see ``training.sim.backends``).
Quaternions are (w, x, y, z) throughout.
"""
