"""L2RM cost network, key points and image queue (notes 4.1, 4.2, 4.5, 5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ncl.transport import (
    CostNetwork,
    ImageQueue,
    draw_key_points,
    insert_key_points,
    key_point_cost_loss,
    learned_cost_plan,
    max_key_points,
    own_image_mask,
    partial_ot,
)

# ---------------------------------------------------------------- cost network


def test_initial_cost_is_relu_one_minus_s():
    net = CostNetwork(4)
    assert net.width == 4
    sims = torch.tensor([[0.2, 0.9, 1.5, -0.3], [1.0, 0.0, 0.5, 0.99], [0.1, 0.2, 0.3, 0.4]])
    expected = [[max(0.0, 1.0 - x) for x in row] for row in sims.tolist()]
    assert torch.allclose(net(sims), torch.tensor(expected), atol=1e-7, rtol=0)


def test_cost_network_mixes_captions_after_training():
    # the layer acts on the caption axis: changing caption 0's similarity changes other costs
    # once W is no longer diagonal
    net = CostNetwork(3)
    with torch.no_grad():
        net.weight[1, 0] = 0.5
    base = torch.full((2, 3), 0.3)
    bumped = base.clone()
    bumped[:, 0] += 0.2
    diff = net(bumped) - net(base)
    assert torch.allclose(diff[:, 1], torch.full((2,), 0.1))
    assert torch.allclose(diff[:, 2], torch.zeros(2))


@pytest.mark.parametrize("shape", [(3, 5), (4,), (2, 4, 4)])
def test_cost_network_wrong_width_raises(shape):
    with pytest.raises(ValueError, match="`sims`"):
        CostNetwork(4)(torch.rand(shape))
    with pytest.raises(ValueError, match="`width`"):
        CostNetwork(0)


def test_key_point_loss_trains_the_layer_and_lowers_key_costs():
    torch.manual_seed(0)
    net = CostNetwork(6)
    sims = 0.2 + 0.6 * torch.rand(8, 6)
    rows, cols = torch.tensor([0, 3, 7]), torch.tensor([5, 1, 2])
    costs = net(sims)
    loss = key_point_cost_loss(costs, rows, cols)
    expected = sum(float(1 - sims[r, c]) for r, c in zip(rows.tolist(), cols.tolist()))
    assert float(loss) == pytest.approx(expected, abs=1e-6)  # sum, no normalisation
    loss.backward()
    assert net.weight.grad is not None and net.weight.grad.abs().sum() > 0
    # d loss / d b_j = number of key points in column j
    assert net.bias.grad.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    torch.optim.SGD(net.parameters(), lr=0.1).step()
    after = key_point_cost_loss(net(sims), rows, cols)
    assert float(after) < float(loss) - 0.1


def test_key_point_loss_checks_indices():
    costs = torch.rand(4, 3)
    with pytest.raises(ValueError, match="`rows`"):
        key_point_cost_loss(costs, torch.tensor([4]), torch.tensor([0]))
    with pytest.raises(ValueError, match="`cols`"):
        key_point_cost_loss(costs, torch.tensor([0]), torch.tensor([3]))
    with pytest.raises(ValueError, match="`rows`"):
        key_point_cost_loss(costs, torch.tensor([0.0]), torch.tensor([0]))
    with pytest.raises(ValueError, match="same length"):
        key_point_cost_loss(costs, torch.tensor([0, 1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="`costs`"):
        key_point_cost_loss(torch.rand(4), torch.tensor([0]), torch.tensor([0]))


# ---------------------------------------------------------------- key points


def test_max_key_points():
    assert max_key_points(128) == 12  # official: k in 1..12 at B = 128
    assert max_key_points(10) == 1
    assert max_key_points(5) == 1  # floor(0.5) = 0 -> at least one
    assert max_key_points(40, fraction=0.25) == 10


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_draw_key_points_ranges_distinct_and_deterministic(kind):
    def gen(seed):
        if kind == "numpy":
            return np.random.default_rng([seed, 0, 3, 0])
        return torch.Generator().manual_seed(seed)

    batch, queue = 30, 20
    counts = set()
    for seed in range(60):
        slots, positions = draw_key_points(batch, queue, gen(seed))
        assert slots.dtype == positions.dtype == torch.int64
        k = slots.numel()
        assert positions.numel() == k and 1 <= k <= 3
        counts.add(k)
        assert len(set(slots.tolist())) == k and len(set(positions.tolist())) == k
        assert 0 <= int(slots.min()) and int(slots.max()) < queue
        assert 0 <= int(positions.min()) and int(positions.max()) < batch
        again = draw_key_points(batch, queue, gen(seed))
        assert torch.equal(again[0], slots) and torch.equal(again[1], positions)
    assert counts == {1, 2, 3}  # k is uniform on 1..floor(0.1 B)
    # different seeds give different draws
    draws = {tuple(draw_key_points(batch, queue, gen(s))[0].tolist()) for s in range(10)}
    assert len(draws) > 5


def test_draw_key_points_at_least_one_and_bad_args():
    slots, positions = draw_key_points(4, 4, np.random.default_rng(0))
    assert slots.numel() == positions.numel() == 1
    with pytest.raises(ValueError, match="`queue_length`"):
        draw_key_points(128, 8, np.random.default_rng(0))  # k_max = 12 > 8
    with pytest.raises(ValueError, match="`fraction`"):
        draw_key_points(8, 8, np.random.default_rng(0), fraction=0.0)
    with pytest.raises(ValueError, match="`batch_size`"):
        draw_key_points(0, 8, np.random.default_rng(0))
    with pytest.raises(ValueError, match="`generator`"):
        draw_key_points(8, 8, 0)


def test_insert_key_points_copies():
    queue = torch.arange(5 * 2 * 3, dtype=torch.float32).reshape(5, 2, 3)
    images = -torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3) - 1
    before = queue.clone()
    out = insert_key_points(queue, images, torch.tensor([4, 1]), torch.tensor([0, 3]))
    assert torch.equal(queue, before)  # input unchanged
    assert torch.equal(out[4], images[0]) and torch.equal(out[1], images[3])
    for slot in (0, 2, 3):
        assert torch.equal(out[slot], queue[slot])
    with pytest.raises(ValueError, match="`slots`"):
        insert_key_points(queue, images, torch.tensor([1, 1]), torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="`positions`"):
        insert_key_points(queue, images, torch.tensor([1]), torch.tensor([4]))
    with pytest.raises(ValueError, match="`images`"):
        insert_key_points(queue, images[:, :1], torch.tensor([1]), torch.tensor([0]))


# ---------------------------------------------------------------- image queue


def batch_of(start: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features whose every entry is the pair index, shape (size, 2, 3)."""
    idx = torch.arange(start, start + size)
    return idx.float().view(-1, 1, 1).expand(size, 2, 3).clone(), idx


@pytest.mark.parametrize("ratio", [2, 1])
def test_queue_fifo_order(ratio):
    b = 3
    q = ratio * b
    queue = ImageQueue(q)
    assert not queue.ready
    queue.fill(*batch_of(100, q))
    assert queue.ready
    queue.push(*batch_of(0, b))
    queue.push(*batch_of(10, b))
    if ratio == 2:
        expected = [10, 11, 12, 0, 1, 2]  # newest batch first, then the previous one
    else:
        expected = [10, 11, 12]  # Q = B: the queue is the current batch
    assert queue.indices.tolist() == expected
    assert queue.features[:, 0, 0].tolist() == [float(i) for i in expected]
    assert queue.features.shape == (q, 2, 3)


def test_queue_push_before_fill_and_q_smaller_than_b_raise():
    with pytest.raises(ValueError, match="fill"):
        ImageQueue(4).push(*batch_of(0, 2))
    queue = ImageQueue(2)
    queue.fill(*batch_of(0, 2))
    with pytest.raises(ValueError, match="queue length"):
        queue.push(*batch_of(0, 3))
    with pytest.raises(ValueError, match="`features`"):
        queue.fill(*batch_of(0, 3))
    with pytest.raises(ValueError, match="`length`"):
        ImageQueue(0)


def test_queue_state_round_trip_keeps_indices_only():
    queue = ImageQueue(4)
    queue.fill(*batch_of(50, 4))
    queue.push(*batch_of(7, 2))
    state = queue.state_dict()
    assert set(state) == {"length", "indices"} and state["indices"].tolist() == [7, 8, 50, 51]
    fresh = ImageQueue(4)
    fresh.load_state_dict(state)
    assert fresh.indices.tolist() == [7, 8, 50, 51]
    assert not fresh.ready  # features are re-read from the data by the caller
    feats, _ = batch_of(0, 4)
    fresh.fill(feats, fresh.indices)
    assert fresh.ready and fresh.indices.tolist() == [7, 8, 50, 51]
    with pytest.raises(ValueError, match="length"):
        ImageQueue(3).load_state_dict(state)


def test_queue_fill_copies_its_input():
    feats, idx = batch_of(0, 3)
    queue = ImageQueue(3)
    queue.fill(feats, idx)
    feats.zero_()
    idx.zero_()
    assert queue.indices.tolist() == [0, 1, 2] and queue.features[2, 0, 0] == 2.0


# ---------------------------------------------------------------- own-image mask


def test_own_image_mask_pattern():
    mask = own_image_mask(5, 3, "cpu")
    assert mask.shape == (5, 3) and mask.dtype == torch.bool
    expected = torch.ones(5, 3, dtype=torch.bool)
    expected[0, 0] = expected[1, 1] = expected[2, 2] = False
    assert torch.equal(mask, expected)
    assert int((~own_image_mask(4, 4)).sum()) == 4
    with pytest.raises(ValueError, match="`queue_length`"):
        own_image_mask(2, 3)


def test_a_lazy_cost_network_takes_its_width_from_materialize_or_a_checkpoint() -> None:
    lazy = CostNetwork()
    assert lazy.width is None and lazy.has_uninitialized_params()
    trained = CostNetwork(5)
    with torch.no_grad():
        trained.weight.add_(0.25)
    lazy.load_state_dict(trained.state_dict())  # the checkpoint's shape and values
    assert lazy.width == 5 and torch.equal(lazy.weight, trained.weight)
    fresh = CostNetwork()
    fresh.materialize(3)
    assert torch.equal(fresh(torch.full((2, 3), 0.25)), torch.full((2, 3), 0.75))
    with pytest.raises(ValueError, match="already has width 3"):
        fresh.materialize(4)


@pytest.mark.parametrize("masked", [False, True])
def test_learned_cost_plan_is_partial_ot_of_the_clamped_cost(masked: bool) -> None:
    net, sims = CostNetwork(3), torch.rand(5, 3) * 2  # relu(1 - S): some costs clamp to 1e-10
    plan = learned_cost_plan(net, sims, masked, 0.1, 0.07, 1000, 1e-3, 100.0)
    mask = own_image_mask(5, 3) if masked else None
    expected = partial_ot(net(sims).detach().clamp_min(1e-10), 0.1, 0.07, mask, 1000, 1e-3, 100.0)
    assert torch.equal(plan.plan, expected.plan) and not plan.plan.requires_grad
    assert not masked or bool((plan.plan.diagonal() == 0).all())

