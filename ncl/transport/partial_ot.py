"""Entropic partial optimal transport through a dummy row and column (L2RM, CVPR 2024).

Convention: ``cost`` is a (Q, B) matrix, rows = (queue) images, columns = captions.

L2RM transports only a fraction ``rho`` of the mass between Q images and B captions. The
official code (notes 4.5) reduces this partial problem to a balanced one on a (Q+1) x (B+1)
augmented problem and solves it with a log-domain Sinkhorn:

* marginals ``a~ = [1/Q, ..., 1/Q, 1 - rho]`` and ``b~ = [1/B, ..., 1/B, 1 - rho]`` (total
  ``2 - rho`` on both sides);
* cost ``C~ = [[C, xi 1], [xi 1^T, 2 xi + A]]`` with ``A = max C`` and
  ``xi = dummy_scale * A`` (the official code uses 100);
* masked (disallowed) real entries are forced to ``-1e6`` in the kernel exponent, so they
  are exactly 0 in the plan; the dummy row and column are always allowed.

Why it is partial OT: in any plan with these marginals the real block carries ``rho + t``,
where ``t`` is the corner's mass, and the linear cost equals
``<C, T_real> + 2 xi (1 - rho) + A t``. ``xi`` is a shift of the dummy row and column of the
cost, which balanced (entropic) OT ignores, so ``dummy_scale`` does **not** change the
converged plan; it only moves the Sinkhorn's starting point (potentials 0) relative to the
solution, hence the plan where the official loose threshold stops (``dummy_scale`` 1 and 100
agree to ~1e-7, 0 differs by up to ~1e-2). The corner price ``A`` is what keeps ``t`` near 0:
converged, the real mass is ``rho`` to ~1e-6 at reg 0.07. At the official threshold (1e-3 on
the potentials) the real mass is larger, by about 0.001 at Q = B = 128 and reg 0.07, and by
0.007 at reg 0.01; on small matrices by up to ~0.03 (the tests measure it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

#: Value the official code writes into the kernel exponent of a masked entry (exp -> 0).
MASKED_EXPONENT = -1e6
#: Constant the official log-sum-exp adds inside the log.
LSE_EPS = 1e-10


@dataclass(frozen=True)
class PartialPlan:
    """Result of :func:`partial_ot` with solver diagnostics.

    Attributes:
        plan: (Q, B) transport plan, dummy row and column removed, no gradient.
        iterations: Sinkhorn iterations run (1 <= iterations <= max_iter).
        converged: whether the last ``||u_new - u_old||_2`` was below ``threshold``.
        mass: total mass of ``plan`` (about ``rho``), as a Python float.
        last_change: the last ``||u_new - u_old||_2``.
    """

    plan: Tensor
    iterations: int
    converged: bool
    mass: float
    last_change: float


def _check_args(
    cost: Tensor,
    rho: float,
    reg: float,
    mask: Tensor | None,
    max_iter: int,
    threshold: float,
    dummy_scale: float,
) -> None:
    if not isinstance(cost, Tensor):
        raise ValueError(  # noqa: TRY004 - the toolbox raises ValueError for every bad argument
            f"`cost` must be a torch.Tensor, got {type(cost).__name__}"
        )
    if not cost.is_floating_point():
        raise ValueError(f"`cost` must be a floating-point tensor, got dtype {cost.dtype}")
    if cost.dim() != 2 or cost.numel() == 0:
        raise ValueError(
            "`cost` must be a non-empty (Q, B) matrix (rows = images, columns = captions), "
            f"got shape {tuple(cost.shape)}"
        )
    if not bool(torch.isfinite(cost).all()):
        raise ValueError("`cost` must be finite (no NaN or Inf)")
    if bool((cost < 0).any()):
        raise ValueError("`cost` must be non-negative")
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 < rho < 1.0:
        # rho = 1 gives a dummy marginal of 0, whose log is -inf: the log-domain iteration
        # turns it into NaN. Full transport is a plain balanced Sinkhorn on C.
        raise ValueError(f"`rho` must be a number in (0, 1) (rho = 1 is not supported), got {rho}")
    if isinstance(reg, bool) or not (math.isfinite(float(reg)) and float(reg) > 0.0):
        raise ValueError(f"`reg` must be a finite number > 0, got {reg}")
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise ValueError("`mask` must be a bool tensor (True = allowed) or None")
        if tuple(mask.shape) != tuple(cost.shape):
            raise ValueError(
                f"`mask` must have the shape of `cost` {tuple(cost.shape)}, "
                f"got {tuple(mask.shape)}"
            )
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"`max_iter` must be an int >= 1, got {max_iter}")
    if not (math.isfinite(float(threshold)) and float(threshold) >= 0.0):
        raise ValueError(f"`threshold` must be a finite number >= 0, got {threshold}")
    if not (math.isfinite(float(dummy_scale)) and float(dummy_scale) >= 0.0):
        raise ValueError(f"`dummy_scale` must be a finite number >= 0, got {dummy_scale}")


def _lse(x: Tensor, dim: int) -> Tensor:
    """Official log-sum-exp: ``log(sum exp(x - max) + 1e-10) + max`` along ``dim``."""
    top = x.amax(dim=dim, keepdim=True)
    return (torch.log(torch.exp(x - top).sum(dim=dim, keepdim=True) + LSE_EPS) + top).squeeze(dim)


def augmented_problem(
    cost: Tensor, rho: float, dummy_scale: float = 100.0
) -> tuple[Tensor, Tensor, Tensor]:
    """The balanced (Q+1) x (B+1) problem the official code solves (no input checks).

    Args:
        cost: (Q, B) non-negative costs.
        rho: transported mass, in (0, 1).
        dummy_scale: ``xi = dummy_scale * max C``.

    Returns:
        ``(a~, b~, C~)`` of shapes (Q+1,), (B+1,), (Q+1, B+1), in the dtype of ``cost``.
    """
    q, b = cost.shape
    top = cost.max()
    xi = dummy_scale * top
    aug = torch.empty((q + 1, b + 1), dtype=cost.dtype, device=cost.device)
    aug[:q, :b] = cost
    aug[q, :b] = xi
    aug[:q, b] = xi
    aug[q, b] = 2 * xi + top
    a = torch.full((q + 1,), 1.0 / q, dtype=cost.dtype, device=cost.device)
    bb = torch.full((b + 1,), 1.0 / b, dtype=cost.dtype, device=cost.device)
    a[q] = 1.0 - rho
    bb[b] = 1.0 - rho
    return a, bb, aug


@torch.no_grad()
def partial_ot(
    cost: Tensor,
    rho: float = 0.1,
    reg: float = 0.07,
    mask: Tensor | None = None,
    max_iter: int = 1000,
    threshold: float = 1e-3,
    dummy_scale: float = 100.0,
) -> PartialPlan:
    """Entropic partial OT plan of L2RM with diagnostics (notes 4.5, 8.3).

    Log-domain Sinkhorn on the augmented problem of :func:`augmented_problem`, potentials
    ``u`` (Q+1) and ``v`` (B+1) starting at 0. Each iteration, with
    ``M(u, v)_ij = (-C~_ij + u_i + v_j) / reg`` (masked real entries set to -1e6):

    ``u <- u + reg (log a~ - lse_rows(M(u, v)))``, then
    ``v <- v + reg (log b~ - lse_cols(M(u, v)))`` with the new ``u``,

    where ``lse(x) = log(sum exp(x - max x) + 1e-10) + max x`` (the official +1e-10). It stops
    when ``||u_new - u_old||_2 < threshold`` (absolute) or after ``max_iter`` iterations. The
    plan is ``exp(M(u, v))`` without the dummy row and column. Since ``v`` is updated last, the
    augmented plan's column sums equal ``b~``; its row sums are only as exact as the
    convergence (the official 1e-3 threshold leaves row errors of about 1e-3 at reg 0.07).

    Computed in float64 on ``cost``'s device with no gradient (``cost`` is detached). The
    official code clamps the cost at 1e-10 before calling its solver; that clamp belongs to
    the caller and only matters when every cost is 0. In that case ``xi`` and the corner
    cost are 0 too, nothing prices the dummy, and the plan is the independent coupling
    ``a~ b~^T / (2 - rho)``: every unmasked real entry ``1 / (Q B (2 - rho))``, real mass
    ``1 / (2 - rho)`` rather than ``rho``. It is finite (no NaN).

    Args:
        cost: (Q, B) non-negative, finite costs; rows = images, columns = captions.
        rho: transported mass ``s``, in (0, 1); official 0.1. ``rho = 1`` is refused (the
            dummy marginal would be 0 and its log -inf).
        reg: entropic regularisation ``eps`` > 0; official 0.07 (0.01 in the F30K script).
        mask: optional (Q, B) bool, True = allowed; False entries are exactly 0 in the plan.
        max_iter: iteration cap (official 1000).
        threshold: stopping threshold on ``||u_new - u_old||_2`` (official 1e-3).
        dummy_scale: ``xi = dummy_scale * max C`` (official 100). It does not change the
            converged plan, only where a loose threshold stops (see the module docstring).

    Returns:
        :class:`PartialPlan`; ``plan`` is (Q, B) float32, or float64 for a float64 ``cost``.

    Raises:
        ValueError: on a bad ``cost``, ``rho``, ``reg``, ``mask``, ``max_iter``,
            ``threshold`` or ``dummy_scale``, naming the argument.
    """
    _check_args(cost, rho, reg, mask, max_iter, threshold, dummy_scale)
    out_dtype = torch.float64 if cost.dtype == torch.float64 else torch.float32
    c = cost.detach().to(torch.float64)
    q, b = c.shape
    a_aug, b_aug, c_aug = augmented_problem(c, float(rho), float(dummy_scale))
    log_a, log_b = torch.log(a_aug), torch.log(b_aug)
    blocked = None
    if mask is not None:
        blocked = torch.zeros((q + 1, b + 1), dtype=torch.bool, device=c.device)
        blocked[:q, :b] = ~mask.to(c.device)

    def exponent(u: Tensor, v: Tensor) -> Tensor:
        m = (-c_aug + u.unsqueeze(1) + v.unsqueeze(0)) / reg
        return m if blocked is None else m.masked_fill(blocked, MASKED_EXPONENT)

    u = torch.zeros(q + 1, dtype=torch.float64, device=c.device)
    v = torch.zeros(b + 1, dtype=torch.float64, device=c.device)
    change = math.inf
    iterations = 0
    for iterations in range(1, max_iter + 1):
        u_old = u
        u = u + reg * (log_a - _lse(exponent(u, v), dim=1))
        v = v + reg * (log_b - _lse(exponent(u, v), dim=0))
        # one host sync per iteration, as the official stopping rule needs the value
        change = float(torch.linalg.vector_norm(u - u_old))
        if change < threshold:
            break
    plan = torch.exp(exponent(u, v))[:q, :b]
    return PartialPlan(
        plan=plan.to(out_dtype),
        iterations=iterations,
        converged=change < threshold,
        mass=float(plan.sum()),
        last_change=change,
    )


def partial_ot_plan(
    cost: Tensor,
    rho: float = 0.1,
    reg: float = 0.07,
    mask: Tensor | None = None,
    max_iter: int = 1000,
    threshold: float = 1e-3,
    dummy_scale: float = 100.0,
) -> Tensor:
    """The (Q, B) plan of :func:`partial_ot` only (same arguments, same checks).

    Returns:
        (Q, B) plan without gradient, float32 (float64 for a float64 ``cost``), on
        ``cost``'s device; masked entries are exactly 0 and the total mass is about ``rho``.
    """
    return partial_ot(cost, rho, reg, mask, max_iter, threshold, dummy_scale).plan
