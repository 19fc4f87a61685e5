"""Message definitions that are not part of the standard ROS 2 typestores (grid_map_msgs).

grid_map_msgs is not installable here, so code that reads or writes bags or builds messages
without ROS registers these definitions (the ROS 2 branches of ANYbotics grid_map; in ROS 1 the
header sat inside GridMapInfo, which is not what a ROS 2 bag holds).
"""

from __future__ import annotations

from typing import Any

GRID_MAP_INFO = "grid_map_msgs/msg/GridMapInfo"
GRID_MAP = "grid_map_msgs/msg/GridMap"

GRID_MAP_INFO_MSG = """\
# Resolution of the grid [m/cell].
float64 resolution
# Length in x-direction [m].
float64 length_x
# Length in y-direction [m].
float64 length_y
# Pose of the grid map center in the frame defined in header [m].
geometry_msgs/Pose pose
"""

GRID_MAP_MSG = """\
# Header (time and frame)
std_msgs/Header header
# Grid map header
GridMapInfo info
# Grid map layer names.
string[] layers
# Grid map basic layer names (optional). The basic layers
# determine which layers from `layers` need to be valid
# in order for a cell of the grid map to be valid.
string[] basic_layers
# Grid map data.
std_msgs/Float32MultiArray[] data
# Row start index (default 0).
uint16 outer_start_index
# Column start index (default 0).
uint16 inner_start_index
"""

# Dependencies first: GridMap refers to GridMapInfo.
MSG_DEFINITIONS: dict[str, str] = {GRID_MAP_INFO: GRID_MAP_INFO_MSG, GRID_MAP: GRID_MAP_MSG}


def register_grid_map_types(typestore: Any) -> Any:
    """Register grid_map_msgs in a rosbags typestore (idempotent) and return the typestore.

    rosbags is imported here only: the runtime itself does not depend on it.
    """
    from rosbags.typesys import get_types_from_msg

    types: dict[str, Any] = {}
    for name, text in MSG_DEFINITIONS.items():
        if name not in typestore.types:
            types.update(get_types_from_msg(text, name))
    if types:
        typestore.register(types)
    return typestore
