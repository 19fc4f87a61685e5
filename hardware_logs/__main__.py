"""python -m hardware_logs: the aow-replay command."""

from hardware_logs.cli import main

main()
