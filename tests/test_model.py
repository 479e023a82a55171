"""SAINT/SAINT+ model: mask convention, no leakage inside a task container (on real rows),
causality, the cache (incremental == block), banded attention by blocks (== dense), and
the receptive field (nothing further back moves a prediction)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.data.features import FlatSource, build_sequences, step_inputs, window_inputs
from common.data.past_features import MODEL_FEATURES
from common.model.predict import plan_student, to_tensors
from common.model.saint import SAINT, ModelConfig
from common.model.saint.attention import Rotary, attention_mask
from common.model.saint.attention_inputs import banded_blocks
from tests.helpers import preprocess_real_rows

ALL_FEATURES = ("elapsed", "lag", "explanation", "answer", "question")


def small_model(n_questions: int, **overrides) -> SAINT:
    torch.manual_seed(0)
    values = dict(
        n_questions=n_questions,
        d_model=32,
        n_heads=4,
        window=40,
        dropout=0.0,
        decoder_features=ALL_FEATURES,
    )
    values.update(overrides)
    return SAINT(ModelConfig(**values)).eval()


def run(model: SAINT, inputs: dict) -> np.ndarray:
    with torch.no_grad():
        return model(to_tensors(inputs, torch.device("cpu"))).numpy()


def test_attention_mask_convention():
    # one row: queries at positions 0..3 with limits (causal) 0..3; window 2
    position = torch.arange(4)[None]
    valid = torch.ones(1, 4, dtype=torch.bool)
    mask = attention_mask(position, valid, position, valid, window=2)[0, 0]
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(mask, expected)  # True = may attend, banded to the last 2 keys
    # a container limit: queries 1..3 in one container starting at 1 see keys <= 1 only
    limit = torch.tensor([[0, 1, 1, 1]])
    mask = attention_mask(limit, valid, position, valid, window=4)[0, 0]
    assert mask[3].tolist() == [True, True, False, False]
    # padded queries see every key (no empty softmax row); invalid keys are never seen
    key_valid = torch.tensor([[True, True, False, True]])
    query_valid = torch.tensor([[True, True, True, False]])
    mask = attention_mask(position, query_valid, position, key_valid, window=4)[0, 0]
    assert not mask[:3, 2].any() and mask[3].all()


def test_model_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="unknown ModelConfig keys"):
        ModelConfig.from_dict({"n_questions": 10, "d_modell": 32})
    with pytest.raises(ValueError, match="unknown decoder features"):
        ModelConfig(n_questions=10, decoder_features=("speed",))


@pytest.fixture(scope="module")
def real_sequences(tmp_path_factory):
    """The 5 real students with complete histories (../shared/data)."""
    tmp = tmp_path_factory.mktemp("real5")
    _, arrays, parts = preprocess_real_rows(tmp, "train_strict_format_5users.csv")
    return build_sequences(arrays, parts)


def _multi_question_containers(sequences, student, start, length):
    first = sequences.container_first[sequences.offsets[student] + np.arange(start, start + length)]
    values, counts = np.unique(first[first >= start], return_counts=True)
    return [int(v) for v, c in zip(values, counts, strict=True) if c >= 2]


@pytest.mark.parametrize("readout", ["none", "akt"])
def test_no_leakage_inside_a_task_container(real_sequences, readout):
    """Changing the outcome of a question (response, answer, elapsed time, explanation)
    leaves every other prediction of its container unchanged, and changes later ones
    (with the AKT-style read-out too, whose values carry outcomes)."""
    seq = real_sequences
    model = small_model(13523, readout=readout)
    student = int(np.argmax(seq.lengths()))
    start, length = 200, 40
    containers = _multi_question_containers(seq, student, start, length)
    assert containers, "the real rows should have bundles of several questions"
    inputs = window_inputs(seq, np.array([student]), np.array([start]), np.array([length]), 13523)
    base = run(model, inputs)[0]
    first = seq.container_first[seq.offsets[student] + np.arange(start, start + length)]
    for container in containers:
        members = np.flatnonzero(first == container)
        for member in members:
            flat = seq.offsets[student] + start + member
            saved = {
                k: getattr(seq, k)[flat].copy()
                for k in ("response", "answer", "elapsed", "explanation")
            }
            seq.response[flat] ^= 1
            seq.answer[flat] = (seq.answer[flat] + 1) % 4
            seq.elapsed[flat] = 250
            seq.explanation[flat] = 1 if seq.explanation[flat] != 1 else 2
            changed = window_inputs(
                seq, np.array([student]), np.array([start]), np.array([length]), 13523
            )
            for k, v in saved.items():
                getattr(seq, k)[flat] = v
            after = run(model, changed)[0]
            assert np.array_equal(after[members], base[members]), (container, member)
            assert np.array_equal(after[: members[0]], base[: members[0]])
            later = slice(members[-1] + 1, length)
            if members[-1] + 1 < length:
                assert not np.allclose(after[later], base[later]), "later containers must see it"


def test_encoder_is_causal(real_sequences):
    seq = real_sequences
    model = small_model(13523)
    student = int(np.argmax(seq.lengths()))
    args = (np.array([student]), np.array([0]), np.array([30]), 13523)
    inputs = window_inputs(seq, *args)
    base = run(model, inputs)[0]
    inputs["question"][0, 20] = (inputs["question"][0, 20] + 7) % 13523
    after = run(model, inputs)[0]
    assert np.array_equal(after[:20], base[:20])
    assert not np.allclose(after[20:], base[20:])


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_incremental_steps_equal_one_block(real_sequences, attention):
    """A block over the history, then container-sized steps through the cache, gives the
    same logits as one window over the same positions (the cache is exact)."""
    seq = real_sequences
    model = small_model(13523, attention=attention, kv_latent_dim=16)
    student = int(np.argmax(seq.lengths()))
    cf = seq.container_first[seq.offsets[student] : seq.offsets[student + 1]]
    first_starts = np.flatnonzero(cf == np.arange(len(cf)))
    begin = int(first_starts[first_starts >= 300][0])
    history = int(first_starts[first_starts >= begin + 15][0])
    end = int(first_starts[first_starts >= begin + 39][0])
    # the plan starts at history - context: let it start at `begin`
    plan = plan_student(cf, history, end, context=history - begin, chunk=3)
    assert plan.session_start == begin
    source = FlatSource(seq)
    owner, session = np.array([student]), np.array([plan.session_start])
    cache, outputs = model.empty_cache(1), []
    for q_from, q_count, k_from, k_count in plan.steps:
        inputs = step_inputs(
            source,
            owner,
            session,
            np.array([q_from]),
            np.array([q_count]),
            np.array([k_from]),
            np.array([k_count]),
            13523,
        )
        with torch.no_grad():
            logits = model(to_tensors(inputs, torch.device("cpu")), cache)
        outputs.append(logits[0, :q_count].numpy())
    stepped = np.concatenate(outputs)
    block = run(
        model, window_inputs(seq, owner, np.array([begin]), np.array([end - begin]), 13523)
    )[0]
    assert len(stepped) == end - begin
    np.testing.assert_allclose(stepped, block, atol=1e-5)


def test_unknown_question_ids_are_mapped(real_sequences):
    seq = real_sequences
    model = small_model(100)  # ids >= 100 are unknown to this model
    inputs = window_inputs(seq, np.array([0]), np.array([0]), np.array([10]), 100)
    assert inputs["question"].max() <= 100
    assert np.isfinite(run(model, inputs)).all()


@pytest.mark.parametrize("fraction", [1.0, 0.25])
def test_rotary_rotates_channel_pairs_by_position(fraction):
    """Channels (i, i + half) of the rotated part turn by position * base^(-2i/rotated) as
    a complex number; the rest pass through; the custom backward equals autograd's
    gradient of that reference; a query-key product depends on the distance only."""
    torch.manual_seed(0)
    head_dim = 16
    rotary = Rotary(head_dim, base=100.0, fraction=fraction)
    rotated = rotary.head_dim
    half = rotated // 2
    position = torch.tensor([[0, 3, 7, -1]])
    x = torch.randn(1, 4, 2, head_dim, dtype=torch.float64, requires_grad=True)
    table = rotary.table(position)

    def reference(x):
        angle = position.clamp(min=0)[..., None].double() * 100.0 ** (
            -torch.arange(0, rotated, 2, dtype=torch.float64) / rotated
        )
        turned = (
            torch.view_as_complex(
                torch.stack((x[..., :half], x[..., half:rotated]), -1).contiguous()
            )
            * torch.polar(torch.ones_like(angle), angle)[:, :, None]
        )
        pairs = torch.view_as_real(turned)
        return torch.cat((pairs[..., 0], pairs[..., 1], x[..., rotated:]), -1)

    out = Rotary.rotate(x, table)
    expected = reference(x)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)  # float32 table
    weight = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * weight).sum(), x)
    (expected_grad,) = torch.autograd.grad((expected * weight).sum(), x)
    torch.testing.assert_close(grad, expected_grad, atol=1e-6, rtol=1e-6)
    with torch.no_grad():
        q, k = torch.randn(2, head_dim, dtype=torch.float64)
        shifts = []
        for a, b in ((2, 0), (9, 7), (5, 3)):
            pos = torch.tensor([[a, b]])
            pair = Rotary.rotate(torch.stack((q, k))[None, :, None], rotary.table(pos))
            shifts.append(float(pair[0, 0, 0] @ pair[0, 1, 0]))
        assert shifts[0] == pytest.approx(shifts[1], abs=1e-5)
        assert shifts[0] == pytest.approx(shifts[2], abs=1e-5)


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_attention_by_blocks_equals_dense_attention(real_sequences, attention):
    """A long sequence's banded attention computed block by block (how training runs on
    sequences several windows long) gives the logits of dense attention under the same
    masks, and the same gradients, bundles of several questions included, whatever the
    block size (the rows' blocks share one buffer of keys: a row's first block must not
    read the row before it)."""
    seq = real_sequences
    model = small_model(13523, attention=attention, kv_latent_dim=16, window=12)
    student = int(np.argmax(seq.lengths()))
    args = (np.array([student, student]), np.array([100, 250]), np.array([150, 97]), 13523)
    inputs = window_inputs(seq, *args)
    assert (inputs["position"] - inputs["query_limit"]).max() >= 2  # bundles in view
    batch = to_tensors(inputs, torch.device("cpu"))
    assert banded_blocks(model.config, batch, block_size=10**6) is None  # one block: dense
    valid = inputs["valid"]  # padded positions' outputs are never read
    model.attention_block = 10**6
    dense, dense_gradient = logits_and_gradient(model, inputs)
    for size in (5, 12, 29):
        model.attention_block = size
        blocks = banded_blocks(model.config, batch, block_size=size)
        assert blocks is not None and blocks.n_blocks > 3
        logits, gradient = logits_and_gradient(model, inputs)
        np.testing.assert_allclose(logits[valid], dense[valid], atol=1e-5)
        np.testing.assert_allclose(gradient, dense_gradient, rtol=1e-4, atol=1e-5)


def test_attention_by_blocks_runs_where_torch_has_no_fused_attention(real_sequences, monkeypatch):
    """Without F.scaled_dot_product_attention (the competition's torch 1.7), blocks keep
    the boolean mask that the written-out attention reads (Blocks.mask_for): the same
    logits as with fused attention's additive mask."""
    seq = real_sequences
    model = small_model(13523, window=12)
    model.attention_block = 12
    student = int(np.argmax(seq.lengths()))
    args = (np.array([student, student]), np.array([100, 250]), np.array([150, 97]), 13523)
    inputs = window_inputs(seq, *args)
    fused = run(model, inputs)
    monkeypatch.delattr(torch.nn.functional, "scaled_dot_product_attention")
    valid = inputs["valid"]
    np.testing.assert_allclose(run(model, inputs)[valid], fused[valid], atol=1e-5)


def logits_and_gradient(
    model: SAINT, inputs: dict, trained_from: int = 0, skip: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The logits of `inputs` and the gradient, over every weight, of their sum over the
    valid positions from `trained_from` on (weights of 1 to 3 by position, so that
    positions do not cancel); skip: the pass computes only what those positions reach
    (its logits start at a column up to trained_from)."""
    model.zero_grad()
    batch = to_tensors(inputs, torch.device("cpu"))
    logits = model(batch, trained_from=trained_from if skip else 0)
    rows, length = batch["valid"].shape
    column = torch.arange(length - logits.shape[1], length)
    weight = 1 + (torch.arange(rows)[:, None] * length + column) % 3
    weight = weight * batch["valid"][:, column] * (column >= trained_from)
    (logits * weight).sum().backward()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logits.detach().numpy(), gradient.numpy()


@pytest.mark.parametrize("variant", ["mha", "mla", "readout and past head"])
def test_a_training_pass_computes_only_what_the_trained_positions_reach(real_sequences, variant):
    """A training pass from column c on (SAINT.forward's trained_from, what 03 gives it:
    the first position any row trains on) skips, per layer, the positions that no logit
    from c on can reach, and gives the logits and gradients of the whole pass: attention
    by blocks and dense, bundles in view."""
    seq = real_sequences
    overrides = {
        "mha": {},
        "mla": {"attention": "mla", "kv_latent_dim": 16},
        "readout and past head": {"readout": "akt", "past_features": "head"},
    }[variant]
    model = small_model(13523, window=12, **overrides)
    student = int(np.argmax(seq.lengths()))
    args = (np.array([student, student]), np.array([100, 250]), np.array([150, 97]), 13523)
    inputs = window_inputs(seq, *args)
    rng = np.random.default_rng(0)
    inputs["past"] = rng.random((*inputs["valid"].shape, len(MODEL_FEATURES)), dtype=np.float32)
    for size, trained_from in ((5, 53), (12, 50), (10**6, 41)):  # blocks of 5, 12; dense
        model.attention_block = size
        whole, whole_gradient = logits_and_gradient(model, inputs, trained_from)
        part, gradient = logits_and_gradient(model, inputs, trained_from, skip=True)
        start = whole.shape[1] - part.shape[1]
        assert 0 < start <= trained_from  # the layers below skipped more
        valid = inputs["valid"][:, start:]
        np.testing.assert_allclose(part[valid], whole[:, start:][valid], atol=1e-5)
        np.testing.assert_allclose(gradient, whole_gradient, rtol=1e-4, atol=1e-5)


def test_a_prediction_depends_on_the_receptive_field_only(real_sequences):
    """Questions more than receptive_field positions back never move a prediction: a
    sequence from position 0 and one from t - receptive_field give the same logit at t,
    while one from closer than that (a shorter history) does not."""
    seq = real_sequences
    model = small_model(13523, window=10, encoder_layers=2, decoder_layers=2)
    with torch.no_grad():  # weights large enough that distant inputs move the output
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    reach = model.config.receptive_field
    assert reach == 40
    student = int(np.argmax(seq.lengths()))
    end = 400
    owner = np.array([student])
    whole = run(model, window_inputs(seq, owner, np.array([0]), np.array([end]), 13523))[0]
    for back in (reach + 60, reach):
        start = end - 1 - back
        part = run(model, window_inputs(seq, owner, np.array([start]), np.array([back + 1]), 13523))
        np.testing.assert_allclose(part[0][-1], whole[-1], atol=1e-6)
    start = end - 1 - reach // 2
    short = run(model, window_inputs(seq, owner, np.array([start]), np.array([end - start]), 13523))
    assert abs(short[0][-1] - whole[-1]) > 1e-3
