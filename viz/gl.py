"""Which OpenGL backend renders offscreen, and a clear error when none does.

MuJoCo's Python renderer (:class:`mujoco.Renderer`) takes its OpenGL context class from the
``MUJOCO_GL`` environment variable, read once when ``mujoco`` is first imported. Unset, that is
GLFW, which needs a display: on a headless machine (CI, a robot's computer over ssh) it fails.

* ``MUJOCO_GL`` set (``egl``, ``osmesa``, ``glfw``, ``glx``): that backend is used as MuJoCo chose it;
  if it fails, the error says so and names the fix.
* ``MUJOCO_GL`` unset: GLFW when a display is there (``DISPLAY`` / ``WAYLAND_DISPLAY``), else EGL,
  else OSMesa, the first that creates a context. EGL with Mesa's drivers renders on the CPU
  (llvmpipe) where no GPU is present; Debian: ``apt-get install libegl1 libgl1-mesa-dri``.
  OSMesa (``libosmesa6``) is the fallback where EGL cannot be had.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import mujoco

FIX = (
    "offscreen rendering needs an OpenGL backend: install EGL with Mesa's drivers "
    "(Debian: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) and run with MUJOCO_GL=egl, or install OSMesa "
    "(apt-get install libosmesa6) and run with MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa"
)


class RenderBackendError(RuntimeError):
    """No OpenGL backend could create an offscreen context; the message names the fix."""


def _context_class(backend: str) -> type:
    if backend == "egl":
        from mujoco.egl import GLContext
    elif backend == "osmesa":
        from mujoco.osmesa import GLContext
    else:
        from mujoco.glfw import GLContext
    return GLContext


@contextmanager
def _renderer_context_class(cls: type) -> Iterator[None]:
    """Have mujoco.Renderer build its context from ``cls`` while in the block.

    The Renderer looks up ``gl_context.GLContext`` when it is constructed; that name was bound
    from MUJOCO_GL at import time, so choosing a backend afterwards means swapping it for the
    construction (the renderer keeps the context object it made, so the swap can end at once).
    """
    from mujoco.rendering.classic import gl_context

    previous = getattr(gl_context, "GLContext", None)
    gl_context.GLContext = cls
    try:
        yield
    finally:
        gl_context.GLContext = previous


def candidate_backends() -> list[str]:
    """The backends tried, in order, when MUJOCO_GL is unset."""
    display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return (["glfw"] if display else []) + ["egl", "osmesa"]


def make_renderer(model: mujoco.MjModel, width: int, height: int) -> tuple[mujoco.Renderer, str]:
    """(an offscreen mujoco.Renderer of width x height pixels, the backend's name).

    Raises :class:`RenderBackendError` naming the fix when no backend works, and ValueError when
    the size exceeds the model's offscreen buffer.
    """
    import mujoco  # here: this module's messages must load even where MuJoCo's GL import fails

    requested = os.environ.get("MUJOCO_GL", "").strip().lower()
    if requested:
        try:
            return mujoco.Renderer(model, height, width), requested
        except ValueError:
            raise
        except Exception as e:  # ImportError, mujoco.FatalError, EGL/GLFW errors: all mean "no context"
            raise RenderBackendError(f"MUJOCO_GL={requested} failed ({type(e).__name__}: {e}); {FIX}") from e
    errors = []
    for backend in candidate_backends():
        try:
            cls = _context_class(backend)
            with _renderer_context_class(cls):
                return mujoco.Renderer(model, height, width), backend
        except ValueError:
            raise
        except Exception as e:
            errors.append(f"{backend}: {type(e).__name__}: {e}")
    raise RenderBackendError(f"no OpenGL backend works ({'; '.join(errors)}); {FIX}")
