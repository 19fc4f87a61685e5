"""Simulator back-ends for the AoW: the MuJoCo model built from the robot contract, state access and stepping."""
