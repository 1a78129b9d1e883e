import numpy as np
import pytest
import torch

from lightning_gnn_dist.costmodel.timing import _step_input
from lightning_gnn_dist.data.local import build_local_partitions
from tests.helpers import random_graph


@pytest.mark.parametrize("width, dtype, own", [(8, torch.float32, True), (5, torch.float32, False)])
def test_a_timed_step_feeds_the_parts_features_where_they_fit(width, dtype, own):
    """``rdm`` redistributes the part's own features once (static input), random ones every
    step: the timed step must see what training passes."""
    data = random_graph(40, 120, seed=0, features=8)
    part = next(build_local_partitions(data, np.arange(40) % 2, 2))
    x = _step_input(part, width)
    assert (x is part.x) is own
    assert tuple(x.shape) == (part.num_owned, width) and x.dtype == dtype


def test_features_of_another_dtype_are_not_fed():
    data = random_graph(40, 120, seed=0, features=8)
    part = next(build_local_partitions(data, np.arange(40) % 2, 2))
    part.x = part.x.double()
    assert _step_input(part, 8).dtype == torch.float32
