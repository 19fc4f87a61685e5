"""Constrained RL for the wheeled-legged ANYmal C: simulation, MDP terms, algorithms and the runner."""
