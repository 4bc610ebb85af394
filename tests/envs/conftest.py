import numpy as np
import pytest


@pytest.fixture
def hand_built_view():
    """A BabyAI agent view (7x7, the agent at the bottom middle facing up) built by hand."""
    from minigrid.core.constants import COLOR_TO_IDX as C, OBJECT_TO_IDX as O

    img = np.zeros((7, 7, 3), dtype=np.uint8)
    for x in range(7):
        for y in range(7):
            img[x, y] = (O["empty"], 0, 0)
    img[3, 5] = (O["door"], C["blue"], 1)              # closed door right ahead
    img[3, 3] = (O["wall"], C["grey"], 0)              # wall 3 ahead
    img[1, 6] = (O["wall"], C["grey"], 0)              # wall 2 to the left
    img[4, 6] = (O["unseen"], 0, 0)                    # right side hidden
    img[2, 4] = (O["ball"], C["red"], 0)               # 2 ahead, 1 left
    img[6, 0] = (O["key"], C["yellow"], 0)             # 6 ahead, 3 right
    return img
