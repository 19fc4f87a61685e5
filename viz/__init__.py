"""Offscreen rendering shared by sim-to-sim and the bag replay: the robot with its velocity arrows,
joints over their limits coloured, a text strip, encoded to MP4.

:mod:`viz.gl` picks the OpenGL backend, :mod:`viz.render` draws frames (:class:`viz.render.RobotRenderer`),
:mod:`viz.video` writes and reads video files and holds the command-line options. Nothing is
imported here, so that ``viz.video`` and ``viz.gl``'s messages load without MuJoCo's renderer.
The deployment runtime (``aow_policy``) never imports this package.
"""
