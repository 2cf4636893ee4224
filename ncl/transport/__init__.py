"""Optimal-transport pieces of L2RM (CVPR 2024) as pure tensor functions and small objects.

Convention: similarity, cost and plan matrices are (Q, B), rows = (queue) images, columns =
captions.

* :func:`partial_ot_plan` / :func:`partial_ot` - entropic partial OT of mass ``rho`` through
  a dummy row and column, log-domain Sinkhorn as in the official code (notes 4.5).
* :class:`CostNetwork` - the learned cost ``relu(W S + b)`` initialised to ``relu(1 - S)``.
* :func:`draw_key_points`, :func:`insert_key_points`, :func:`key_point_cost_loss` - the
  key-point supervision of the cost network (notes 4.1, 5).
* :class:`ImageQueue`, :func:`own_image_mask` - the FIFO of noisy images and the mask that
  forbids each noisy caption's own image (notes 4.2, 4.5).
* :func:`learned_cost_plan` - the rematching plan of the learned cost (the model step).
"""

from ncl.transport.cost import (
    CostNetwork,
    ImageQueue,
    draw_key_points,
    insert_key_points,
    key_point_cost_loss,
    learned_cost_plan,
    max_key_points,
    own_image_mask,
)
from ncl.transport.partial_ot import (
    PartialPlan,
    augmented_problem,
    partial_ot,
    partial_ot_plan,
)

__all__ = [
    "CostNetwork",
    "ImageQueue",
    "PartialPlan",
    "augmented_problem",
    "draw_key_points",
    "insert_key_points",
    "key_point_cost_loss",
    "learned_cost_plan",
    "max_key_points",
    "own_image_mask",
    "partial_ot",
    "partial_ot_plan",
]
