"""Chapter 4 (part 1): the synthetic scenes, the soft and hard captioners, and their training."""

import pytest
import torch

from attnlab.attention import MovingAverageBaseline, reinforce_loss
from attnlab.data import COLOURS, SCENE_WORDS, caption_text, make_scene_splits, make_scenes
from attnlab.data.scenes import COMMA, END, PAD
from attnlab.models import CaptionerConfig, ConvEncoder, HardCaptioner, SoftCaptioner, region_cells
from attnlab.train import caption_loss, evaluate_captioner, gradient_noise, shift_captions, train_captioner

DEVICES = (
    ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) + (["mps"] if torch.backends.mps.is_available() else [])
)


def test_scenes_have_one_caption_per_image_in_reading_order():
    task = make_scenes(300, image_size=48, grid=4, min_objects=1, max_objects=3, seed=0)
    assert task.images.shape == (300, 3, 48, 48) and task.captions.shape == (300, 9) and len(task) == 300
    assert task.images.min() >= 0 and task.images.max() <= 1
    for i in range(300):
        n = int(task.lengths[i])
        caption = task.captions[i]
        assert caption[n - 1] == END and (caption[n:] == PAD).all() and n in (3, 6, 9)
        cells = task.cells[i, : n - 1 : 3]  # the cell of each object's colour word
        assert (cells[1:] > cells[:-1]).all()  # row by row, left to right, distinct
        assert torch.equal(task.cells[i, 1 : n - 1 : 3], cells)  # the shape word names the same object
        assert (caption[2 : n - 1 : 3] == COMMA).all()
        assert len(caption_text(caption).split()) == n - 1
    assert torch.equal(make_scenes(300, grid=4, seed=0).images, task.images)


def test_each_object_is_drawn_in_its_own_cell_in_its_colour():
    task = make_scenes(200, grid=4, noise=0.0, seed=1)
    palette = torch.tensor(list(COLOURS.values()))
    for i in range(200):
        image = task.images[i]
        painted = image.sum(0) > 0  # (48, 48)
        cells = {}
        for t in range(0, int(task.lengths[i]) - 1, 3):
            cell = int(task.cells[i, t])
            rgb = palette[int(task.captions[i, t]) - 4]
            row, col = divmod(cell, 4)
            block = image[:, 12 * row : 12 * row + 12, 12 * col : 12 * col + 12]  # (3, 12, 12)
            inside = block.sum(0) > 0
            assert inside.sum() >= 9  # a shape of at least 3 x 3 pixels
            torch.testing.assert_close(block[:, inside], rgb[:, None].expand(3, int(inside.sum())))
            cells[cell] = int(inside.sum())
        assert painted.sum() == sum(cells.values())  # nothing is drawn outside the objects' cells


def test_scene_splits_share_no_scene():
    train, test = make_scene_splits(3000, 500, grid=2, max_objects=2, seed=0)
    assert len(train) == 3000 and len(test) == 500
    seen = {(tuple(c.tolist()), tuple(p.tolist())) for c, p in zip(train.captions, train.cells, strict=True)}
    pairs = zip(test.captions, test.cells, strict=True)
    assert not any((tuple(c.tolist()), tuple(p.tolist())) in seen for c, p in pairs)


def test_scene_errors_name_the_argument():
    with pytest.raises(ValueError, match="could not find enough unseen scenes"):
        make_scene_splits(2000, 10, grid=2, max_objects=1)  # only 64 different scenes exist
    with pytest.raises(ValueError, match="image_size must be a multiple of grid"):
        make_scenes(4, image_size=50, grid=4)
    with pytest.raises(ValueError, match="max_objects must be at most"):
        make_scenes(4, grid=2, max_objects=5)
    with pytest.raises(TypeError, match="n must be an int"):
        make_scenes(4.0)
    with pytest.raises(ValueError, match=r"max_objects must be an int >= 2 \(min_objects\), got 1"):
        make_scenes(4, min_objects=2, max_objects=1)


def test_region_cells_maps_the_encoder_grid_onto_the_layout():
    config = CaptionerConfig(grid=4)
    assert torch.equal(region_cells(config, 4), torch.arange(16))
    expected = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]).flatten()
    assert torch.equal(region_cells(config, 2), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", [SoftCaptioner, HardCaptioner])
def test_captioner_shapes_and_weights(kind, device):
    torch.manual_seed(0)
    model = kind(CaptionerConfig()).to(device)
    task = make_scenes(5, grid=4, seed=0)
    images, captions = task.images.to(device), task.captions.to(device)
    annotations = model.encoder(images)
    assert annotations.shape == (5, 16, 32)
    model.train()
    out = model(images, shift_captions(captions), generator=torch.Generator(device=device).manual_seed(0))
    assert out.logits.shape == (5, 9, len(SCENE_WORDS)) and out.weights.shape == (5, 9, 16)
    assert out.locations.shape == (5, 9)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(5, 9, device=device))
    if kind is HardCaptioner:
        assert out.log_prob.shape == (5, 9)  # the probability of the drawn location
        torch.testing.assert_close(out.log_prob, out.weights.gather(-1, out.locations[..., None]).squeeze(-1).log())
    else:
        assert out.log_prob is None
    model.eval()
    generated = model.generate(images, 9)
    assert generated.tokens.shape == (5, 9) and generated.tokens.device.type == device
    assert torch.equal(generated.locations, generated.weights.argmax(-1))


def test_soft_context_is_the_weighted_sum_and_hard_context_one_annotation():
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(4, 16), -1)
    annotations = torch.randn(4, 16, 8)
    z, location, log_prob = SoftCaptioner().attend(weights, annotations, None)
    torch.testing.assert_close(z, torch.einsum("bl,bld->bd", weights, annotations))
    hard = HardCaptioner().train()
    z, location, log_prob = hard.attend(weights, annotations, torch.Generator().manual_seed(0))
    torch.testing.assert_close(z, annotations[torch.arange(4), location])
    torch.testing.assert_close(log_prob, weights[torch.arange(4), location].log())
    hard.eval()
    z, location, log_prob = hard.attend(weights, annotations, None)
    assert torch.equal(location, weights.argmax(-1)) and log_prob is None
    mixed = HardCaptioner(expected_prob=1.0).train()  # Xu et al.'s trick, always on
    z, location, log_prob = mixed.attend(weights, annotations, torch.Generator().manual_seed(0))
    torch.testing.assert_close(z, torch.einsum("bl,bld->bd", weights, annotations))
    assert (log_prob == 0).all()


def test_greedy_generation_matches_teacher_forcing_on_its_own_words():
    torch.manual_seed(0)
    model = SoftCaptioner().eval()
    images = make_scenes(6, grid=4, seed=2).images
    generated = model.generate(images, 9)
    forced = model(images, shift_captions(generated.tokens))
    torch.testing.assert_close(forced.logits, generated.logits)
    torch.testing.assert_close(forced.weights, generated.weights)


def test_sampling_blocks_backprop_so_hard_attention_learns_only_from_reinforce():
    torch.manual_seed(0)
    task = make_scenes(16, grid=4, seed=0)
    model = HardCaptioner().train()
    out = model(task.images, shift_captions(task.captions), generator=torch.Generator().manual_seed(0))
    real = task.captions != PAD
    nll = torch.nn.functional.cross_entropy(out.logits.transpose(1, 2), task.captions, reduction="none")[real].mean()
    grads = torch.autograd.grad(nll, list(model.f_att.parameters()), allow_unused=True, retain_graph=True)
    assert all(g is None or (g == 0).all() for g in grads)  # the likelihood alone does not reach f_att
    loss, _ = caption_loss(model, task.images, task.captions, generator=torch.Generator().manual_seed(0))
    grads = torch.autograd.grad(loss, list(model.f_att.parameters()), allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)  # the REINFORCE term does
    soft = SoftCaptioner()
    loss, _ = caption_loss(soft, task.images, task.captions)
    grads = torch.autograd.grad(loss, list(soft.f_att.parameters()), allow_unused=True)
    assert all(g is not None and g.abs().sum() > 0 for g in grads[:2])  # soft: plain backprop


def test_per_step_baseline_and_masked_reinforce_loss():
    baseline = MovingAverageBaseline(0.5)
    reward = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    torch.testing.assert_close(baseline.update(reward, mask), torch.tensor([2.0, 2.0]))
    baseline.update(torch.tensor([[4.0, 4.0], [4.0, 4.0]]), mask)
    torch.testing.assert_close(baseline.value, torch.tensor([3.0, 3.0]))
    log_prob = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]], requires_grad=True)
    loss = reinforce_loss(log_prob, reward, torch.tensor([1.0, 1.0]), mask=mask)
    assert loss.item() == pytest.approx(-(0 * -1.0 + 1 * -2.0 + 2 * -0.5) / 3)
    with pytest.raises(ValueError, match=r"reward must have shape \(B,\) or \(B, L\), got shape \(2, 2, 2\)"):
        baseline.update(torch.zeros(2, 2, 2))


def test_reward_to_go_and_sequence_reward_differ_only_in_what_they_count():
    torch.manual_seed(0)
    task = make_scenes(8, grid=4, seed=3)
    model = HardCaptioner().train()
    losses = [
        caption_loss(model, task.images, task.captions, reward=r, generator=torch.Generator().manual_seed(1))[0]
        for r in ("to_go", "sequence")
    ]
    assert not torch.isclose(losses[0], losses[1])
    with pytest.raises(ValueError, match="reward must be 'to_go' or 'sequence'"):
        caption_loss(model, task.images, task.captions, reward="final")


# How well the captioners learn and where they look is asserted where chapter 4.1 trains them,
# under nbval; here the training loop's bookkeeping on a tiny case.
def test_train_captioner_records_its_steps_and_its_evaluation():
    train, test = make_scenes(64, grid=2, max_objects=1, seed=0), make_scenes(20, grid=2, max_objects=1, seed=1)
    torch.manual_seed(0)
    model = SoftCaptioner(CaptionerConfig(grid=2, channels=(8, 8)))
    history = train_captioner(model, train, steps=6, batch_size=16, lr=1e-2, eval_data=test, progress=False)
    result = history.evals[-1]
    assert history.eval_steps == [6] and len(history.loss) == 6 and len(history.eval_seconds) == 1
    assert 0 < history.eval_seconds[0] <= history.seconds
    assert result.tokens.shape == (20, 3) and result.weights.shape == (20, 3, 4)
    again = evaluate_captioner(model, test, batch_size=7)  # the last evaluation is of the final model
    assert (result.exact_match, result.token_accuracy, result.grounding, result.grounded_words) == (
        again.exact_match,
        again.token_accuracy,
        again.grounding,
        again.grounded_words,
    )
    assert torch.equal(result.tokens, again.tokens)
    torch.testing.assert_close(result.weights, again.weights)


def test_hard_gradient_is_noisier_than_soft():
    train = make_scenes(1000, grid=4, seed=0)
    torch.manual_seed(0)
    soft, hard = SoftCaptioner(), HardCaptioner()
    hard.load_state_dict(soft.state_dict())
    assert gradient_noise(hard, train, batches=8) > 2 * gradient_noise(soft, train, batches=8)


def test_captioner_errors_name_the_argument():
    with pytest.raises(ValueError, match="must be a multiple of grid"):
        CaptionerConfig(image_size=48, grid=5)
    with pytest.raises(ValueError, match=r"channels must be a tuple of ints, non-empty, each >= 1; got \(\)"):
        CaptionerConfig(channels=())
    with pytest.raises(TypeError, match=r"channels must be a tuple of ints, got list \(\[16, 32\]\)"):
        CaptionerConfig(channels=[16, 32])
    with pytest.raises(ValueError, match=r"images must have shape \(B, 3, 48, 48\), got \(2, 3, 32, 32\)"):
        ConvEncoder(CaptionerConfig())(torch.zeros(2, 3, 32, 32))
    with pytest.raises(TypeError, match=r"captions_in must be a torch\.long tensor, got torch\.float32"):
        SoftCaptioner()(torch.zeros(2, 3, 48, 48), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="images and captions_in must have the same batch size, got 3 and 2"):
        SoftCaptioner()(torch.zeros(3, 3, 48, 48), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"expected_prob must be a number in \[0, 1\], got 2"):
        HardCaptioner(expected_prob=2)
    with pytest.raises(ValueError, match="32-pixel images"):
        evaluate_captioner(
            SoftCaptioner(CaptionerConfig(image_size=32, grid=4, channels=(8, 8, 8))), make_scenes(3, grid=4)
        )
    with pytest.raises(TypeError, match="SceneTask"):
        train_captioner(SoftCaptioner(), [1, 2], steps=1)


def test_location_rewards_count_the_caption_from_each_step_on_or_whole():
    from attnlab.train.captioning import _location_reward

    nll = torch.tensor([[1.0, 2.0, 3.0, 0.0]])  # the last step is padding (nll 0)
    torch.testing.assert_close(_location_reward(nll, "to_go"), torch.tensor([[-6.0, -5.0, -3.0, 0.0]]))
    torch.testing.assert_close(_location_reward(nll, "sequence"), torch.tensor([[-6.0, -6.0, -6.0, -6.0]]))
