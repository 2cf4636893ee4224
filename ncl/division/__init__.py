"""Sample division and label rectification of NCR / LNC as pure tensor functions.

Everything here maps tensors (or a seed / ``torch.Generator``) to tensors; there is no
state and no Lightning. Equation numbers refer to the LNC paper (IJCV 2024, the journal
extension of NCR, NeurIPS 2021); "spec" is ``shared/spec/reference_spec.md``.

Which function implements what:

* :func:`minmax_normalize` - spec 4.2.4 normalisation of the per-sample losses.
* :func:`gmm_clean_probability` - Eq. 3: 2-component GMM on the normalised losses (Eq.
  1-2); clean confidence ``w_i`` = posterior of the low-mean component (spec 4.2.4).
* :func:`split_by_probability` - co-divide threshold (Alg. 1 l. 14-15; spec 4.2.3) with
  the official 1 % fallback; :func:`partition_indices` - labelled/unlabelled index lists
  (spec 4.2.5).
* :func:`memorization_prediction` / :func:`memorization_prediction_from_loss` /
  :func:`normalize_by_top_fraction` - the prediction function P, Eq. 9 (spec 4.2.1
  "predict"); :func:`mr_prediction` - the same values with the normaliser detached, for the
  momentum regulariser (Eq. 4).
* :func:`rectify_labels` - Eq. 8, clean subset, per sample;
  :func:`rectify_labels_official_2023` - the released code's B x B broadcast (spec 4.2.7);
  :func:`rectify_labels_official_2022` - the earlier code's ``P_0`` for the whole batch;
  :func:`rectify_noisy_labels` - Eq. 8, noisy subset ``(P^A + P^B) / 2``;
  :func:`rectify_by_mode` - the clean-subset rule of each ``ncr_margin_mode``.
* :func:`initial_momentum_targets`, :func:`momentum_update` - Eq. 5 (``gamma^0 = 1``);
  :func:`momentum_regularizer` - Eq. 4 per sample (caller: ``lambda * .mean()``, Eq. 6).
* :func:`doubly_noisy_mask`, :func:`noise_abandon_mask` - Randomly Noise Abandon, Eq. 7 and
  Alg. 1 l. 6-9.

Paper versus official NCR code (spec 4.2.7, 9.1-9.2), as switches a method should expose:

1. ``ncr_margin_mode`` - clean-subset label: paper ``y_hat_i = w_i + (1 - w_i) P_i``
   (:func:`rectify_labels`, ``per_sample``) versus the code's ``T_ij = w_i + (1 - w_i) P_j``
   (:func:`rectify_labels_official_2023`). Older code (before 2023-11) used ``P_0`` for the
   whole batch (:func:`rectify_labels_official_2022`, ``official_2022_p0``) and, before
   2022-06, ignored the soft margins for a fixed one (``official_2021_fixed``, method-level).
2. ``prediction_form: Literal["hinge", "linear"]`` - P from the per-sample mean hinge
   with margin 0.2 (code) versus Eq. 9's linear ``s = S(v, t) - (row + column negative
   sums / b) / 2``. They differ by ``(alpha - S_ii) / B`` where no hinge term is clamped;
   they differ more where negatives are already ``alpha`` below the positive (the hinge
   ignores them, Eq. 9 does not). tau: the code averages the ``B // 10 + 1`` largest
   clipped scores, the paper says "top 10 %" (equal counts unless B is a multiple of 10);
   both forms here use the code's count.
3. ``clean_rule: Literal["greater", "greater_equal"]`` - clean iff ``w > 0.5`` (code) or
   ``w >= 0.5`` (LNC Alg. 1). Measure-zero difference; default "greater" because the
   official fallback is defined with ``>``.
4. ``gmm_seed: int | None`` - ``None`` reproduces the official use of numpy's global RNG
   (result depends on all earlier numpy draws); an int makes the GMM deterministic.
5. ``momentum_regularization: bool`` with ``mr_momentum`` (beta) and ``mr_weight``
   (lambda), and ``noise_abandon: bool`` with ``abandon_fraction`` (0.5) - LNC-only warm-up
   additions (Eq. 4-7). The official NCR code has neither; the paper gives no values for
   beta and lambda nor whether gamma moves per step or per epoch.
6. Schedules (method-level, not in this package): LNC Table 12 warm-up/epochs/lr_update
   (F30K 3/40/30, COCO 10/20/10, CC152K 5/30/10) versus NCR's supplement Table 1 and README
   (F30K 5/40/30, COCO 10/20/10, CC152K 10/40/30); the code adds the noisy-subset loss only
   from co-training epoch ``num_epochs // 2`` with a second, separate optimiser step,
   whereas LNC Alg. 1 l. 19 minimises ``L_soft`` on both rectified batches from the start.
7. Noisy-subset margin column (loss-level, not here): the code's (B, 1) label column
   indexes the text-to-image hinge by the negative image instead of the anchor caption.

"Division" means one thing in ncl: splitting the training pairs by how likely they are
clean. This package holds its pure functions; :class:`ncl.callbacks.GMMDivision` makes one
(the per-sample pass, the mixture, rank 0's fit broadcast). Besides the functions above:
:mod:`ncl.division.co_divide` (NCR/LNC's :class:`~ncl.division.co_divide.Division` record, the
mean-hinge pass, the mixture per network, the split and the abandon draw),
:mod:`ncl.division.three_way` (ReCon's three-way division), :mod:`ncl.division.stats` (the
diagnostics of divisions and soft labels) and :mod:`ncl.division.detection` (the one
noise-detection schema every dividing method logs, ``train/detection/*``).

CRCL's Self-refining Correspondence Correction (CRCL Eq. 10-12, spec 4.4.2) lives in
:mod:`ncl.division.correction` (:func:`correct_labels` with ``rule: Literal["paper",
"official", "prediction"]``); see ``docs/methods/crcl.md``.

Edge cases where this package deliberately differs from the code (no switch):

* all losses equal: :func:`minmax_normalize` returns zeros and
  :func:`gmm_clean_probability` returns ones (code: NaN);
* every clipped P is 0: predictions are zeros (code: NaN margins);
* empty clean set: :func:`split_by_probability` keeps all samples (or raises), the code
  trains on an empty labelled loader.
"""

from ncl.division.abandon import doubly_noisy_mask, noise_abandon_mask
from ncl.division.correction import (
    CorrectedLabels,
    CorrectionRule,
    correct_labels,
    filter_confident_noise,
    initial_correspondence_labels,
    momentum_correction,
)
from ncl.division.gmm import gmm_clean_probability, minmax_normalize
from ncl.division.momentum import initial_momentum_targets, momentum_regularizer, momentum_update
from ncl.division.prediction import (
    PredictionForm,
    memorization_prediction,
    memorization_prediction_from_loss,
    mr_prediction,
    normalize_by_top_fraction,
)
from ncl.division.rectify import (
    rectify_by_mode,
    rectify_labels,
    rectify_labels_official_2022,
    rectify_labels_official_2023,
    rectify_noisy_labels,
)
from ncl.division.split import CleanRule, OnEmptyClean, partition_indices, split_by_probability

__all__ = [
    "CleanRule",
    "CorrectedLabels",
    "CorrectionRule",
    "OnEmptyClean",
    "PredictionForm",
    "correct_labels",
    "doubly_noisy_mask",
    "filter_confident_noise",
    "gmm_clean_probability",
    "initial_correspondence_labels",
    "initial_momentum_targets",
    "memorization_prediction",
    "memorization_prediction_from_loss",
    "minmax_normalize",
    "momentum_correction",
    "momentum_regularizer",
    "momentum_update",
    "mr_prediction",
    "noise_abandon_mask",
    "normalize_by_top_fraction",
    "partition_indices",
    "rectify_by_mode",
    "rectify_labels",
    "rectify_labels_official_2022",
    "rectify_labels_official_2023",
    "rectify_noisy_labels",
    "split_by_probability",
]

# ReCon (CVPR 2025): three-way division into clean / locally associated / noisy pairs with
# momentum pseudo-labels (Eq. 6-11), ncl.division.three_way.
from ncl.division.three_way import (  # noqa: E402
    PseudoLabelInit,
    PseudoLabelScope,
    ThreeWayConfig,
    ThreeWayDivision,
    divide_three_way,
    final_labels,
    initial_pseudo_labels,
    intra_modal_discrepancy,
    penalty_factor,
    three_way_split,
    update_pseudo_labels,
)

__all__ += [
    "PseudoLabelInit",
    "PseudoLabelScope",
    "ThreeWayConfig",
    "ThreeWayDivision",
    "divide_three_way",
    "final_labels",
    "initial_pseudo_labels",
    "intra_modal_discrepancy",
    "penalty_factor",
    "three_way_split",
    "update_pseudo_labels",
]
