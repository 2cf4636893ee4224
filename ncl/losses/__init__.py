"""Pure-torch loss functions: (B, B) similarity matrix -> (B,) per-sample losses.

Rows of ``sims`` are images, columns captions, the diagonal holds the annotated pairs. Every
loss returns one value per pair; the caller (a method) reduces with sum or mean, as each
docstring says the official code does.

The one InfoNCE (every direction, temperature, ``eps``, weighting and reduction a method needs)
is :func:`~ncl.losses.contrastive.info_nce`; the hinge triplet is
:func:`~ncl.losses.triplet.triplet_loss`.
"""

from ncl.losses.contrastive import (
    RCL_EPS,
    InfoNCETerms,
    diagonal_info_nce,
    info_nce,
    log_matching_probabilities,
    row_log_softmax,
)
from ncl.losses.crcl import (
    OFFICIAL_COMPLEMENTARY_WEIGHT,
    ACLTerms,
    AclForm,
    active_complementary_loss,
    active_complementary_terms,
    average_matching_probability,
    robust_complementary_loss,
)
from ncl.losses.rcl import (
    RCL_ABLATION_REDUCTION,
    AblationVariant,
    ComplementaryKind,
    complementary_contrastive_loss,
    matching_probabilities,
    num_negatives_from_ratio,
    rcl_ablation_loss,
    sample_negatives,
    single_negative_loss,
)
from ncl.losses.triplet import (
    NcrMarginMode,
    Negatives,
    RecastKind,
    SoftMarginMode,
    hinge_matrices,
    ncr_soft_margins,
    ncr_soft_triplet,
    psi4_boundary,
    soft_margin,
    soft_margin_triplet_loss,
    triplet_loss,
)

__all__ = [
    "OFFICIAL_COMPLEMENTARY_WEIGHT",
    "RCL_EPS",
    "RCL_ABLATION_REDUCTION",
    "ACLTerms",
    "AclForm",
    "AblationVariant",
    "InfoNCETerms",
    "ComplementaryKind",
    "NcrMarginMode",
    "Negatives",
    "RecastKind",
    "SoftMarginMode",
    "active_complementary_loss",
    "active_complementary_terms",
    "average_matching_probability",
    "complementary_contrastive_loss",
    "diagonal_info_nce",
    "hinge_matrices",
    "info_nce",
    "log_matching_probabilities",
    "matching_probabilities",
    "ncr_soft_margins",
    "ncr_soft_triplet",
    "num_negatives_from_ratio",
    "psi4_boundary",
    "rcl_ablation_loss",
    "robust_complementary_loss",
    "row_log_softmax",
    "sample_negatives",
    "single_negative_loss",
    "soft_margin",
    "soft_margin_triplet_loss",
    "triplet_loss",
]

# ReCon (CVPR 2025): relation-consistency losses (Eq. 2-4, 13-15), ncl.losses.recon.
from ncl.losses.recon import (  # noqa: E402
    SUBSET_CLEAN,
    SUBSET_LOCAL,
    SUBSET_NOISY,
    IntraModalTerms,
    RelationKL,
    RowReduction,
    cross_modal_relation_loss,
    intra_modal_relation_loss,
    matrix_kl,
    proxy_relations,
    relation_consistency_objective,
)

__all__ += [
    "SUBSET_CLEAN",
    "SUBSET_LOCAL",
    "SUBSET_NOISY",
    "IntraModalTerms",
    "RelationKL",
    "RowReduction",
    "cross_modal_relation_loss",
    "intra_modal_relation_loss",
    "matrix_kl",
    "proxy_relations",
    "relation_consistency_objective",
]
