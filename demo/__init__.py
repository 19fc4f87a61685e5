"""`make demo`: train -> export -> sim-to-sim with a recorded bag -> replay report, on one machine."""
