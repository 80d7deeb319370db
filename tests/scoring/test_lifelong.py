"""Lifelong streams: checkpoints, the probes measured after k edits, weight growth,
curves and collapse points, each against a hand-worked case or a plain computation."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from kebench.editing.delta import Delta, ParamDelta, apply_delta
from kebench.scoring.lifelong import (
    CheckpointStore,
    LifelongSettings,
    WeightDrift,
    build_stream,
    collapse_points,
    curves,
)

COLUMNS = [
    "probe_id",
    "case_id",
    "source",
    "probe_type",
    "risk",
    "subject",
    "prompt",
    "question",
    "answer_old",
    "answer_new",
    "rule_id",
    "hops",
    "fact_subject_uri",
    "fact_relation",
    "aliases_old",
    "aliases_new",
    "tier",
    "kind",
    "echo",
]


def probe(probe_id, probe_type, subject, fact, answers=("x", "y"), tier="deductive"):  # noqa: PLR0913, PLR0917 - one per varied column
    """A probe row; an entailed one is a deductive composition unless ``tier`` says
    inductive (a mined rule's)."""
    case = probe_id.split("/")[0]
    entailed = probe_type == "entailed"
    return {
        "probe_id": probe_id,
        "case_id": case,
        "source": "hand",
        "probe_type": probe_type,
        "risk": "counterfactual",
        "subject": subject,
        "prompt": f"{subject} is in",
        "question": None,
        "answer_old": answers[0],
        "answer_new": answers[0] if probe_type == "locality" else answers[1],
        "rule_id": "r1" if probe_type == "entailed" else None,
        "hops": 1,
        "fact_subject_uri": fact[0],
        "fact_relation": fact[1],
        "aliases_old": None,
        "aliases_new": None,
        "tier": tier if entailed else None,
        "kind": ("composition" if tier == "deductive" else "rule")
        if entailed
        else None,
        "echo": False,
    }


# A, B and C are edited in this order. A's entailed probe asks a fact that C's edit
# implies; B's locality probe asks A's edited fact; A's multihop probe is no measure,
# nor is its mined rule's consequence (the lifelong Consistency is the deductive one).
PROBES = pd.DataFrame(
    [
        probe("A/direct/0", "direct", "Alice", ("dbr:Alice", "city")),
        probe("A/entailed/0", "entailed", "Alice", ("dbr:Alice", "country")),
        probe(
            "A/entailed/1",
            "entailed",
            "Alice",
            ("dbr:Alice", "language"),
            tier="inductive",
        ),
        probe("A/multihop/0", "multihop", "Alice", (None, None)),
        probe("B/direct/0", "direct", "Bob", ("dbr:Bob", "city")),
        probe("B/locality/0", "locality", "Alice", ("dbr:Alice", "city")),
        probe("C/direct/0", "direct", "Carol", ("dbr:Carol", "city")),
    ],
    columns=COLUMNS,
)
REWRITTEN = pd.DataFrame(
    [
        ("A", "dbr:Alice", "city", "direct"),
        ("B", "dbr:Bob", "city", "direct"),
        ("C", "dbr:Carol", "city", "direct"),
        ("C", "dbr:Alice", "country", "consequence"),
    ],
    columns=["case_id", "fact_subject_uri", "fact_relation", "kind"],
)


def test_a_schedule_keeps_the_checkpoints_reached_and_ends_on_the_last_edit():
    settings = LifelongSettings(checkpoints=(1, 10, 50))
    assert settings.schedule(30) == [1, 10, 30]
    assert settings.schedule(50) == [1, 10, 50]
    assert settings.schedule(1) == [1]


@pytest.mark.parametrize("checkpoints", [[0, 10], ["ten"], []])
def test_bad_checkpoints_are_named(checkpoints):
    params = {"checkpoints": checkpoints, "batch_size": 4, "collapse_below": 0.5}
    with pytest.raises(ValueError, match=r"lifelong\.checkpoints"):
        LifelongSettings.from_params(params)


def test_the_unedited_checkpoint_is_measured_once_for_every_method(tmp_path):
    store = CheckpointStore(tmp_path)
    record = {"method": "ROME", "checkpoint": 0, "key": "k0", "failed": 0}
    store.save(record)
    store.save({"method": "MEMIT", "checkpoint": 0, "key": "old", "failed": 0})
    store.save({"method": "ROME", "checkpoint": 1, "key": "k0", "failed": 0})
    # another method's checkpoint 0 under the same key, as this method's
    assert store.unedited("FT-L", "k0") == record | {"method": "FT-L"}
    assert store.unedited("MEMIT", "k0") == record | {"method": "MEMIT"}
    # the own record first; a later checkpoint or another key is never taken
    assert store.unedited("ROME", "k0") == record
    assert store.unedited("FT-L", "k1") is None


def test_the_probes_after_k_edits_are_those_of_the_edits_so_far_not_rewritten():
    stream = build_stream(PROBES, REWRITTEN, n_edits=3)
    assert [r.case_id for r in stream.requests] == ["A", "B", "C"]
    assert set(stream.probes_at(1)["probe_id"]) == {"A/direct/0", "A/entailed/0"}
    # B's locality probe asks Alice's city, which A (edited before it) changed
    assert set(stream.probes_at(2)["probe_id"]) == {
        "A/direct/0",
        "A/entailed/0",
        "B/direct/0",
    }
    # C's edit implies Alice's new country: A's entailed probe no longer holds
    assert set(stream.probes_at(3)["probe_id"]) == {
        "A/direct/0",
        "B/direct/0",
        "C/direct/0",
    }


def test_a_stream_is_topped_up_only_past_the_dataset_and_never_twice():
    top_up = pd.DataFrame(
        [
            probe("A/direct/0", "direct", "Alice", (None, None)),
            probe("D/direct/0", "direct", "Dan", (None, None)),
        ],
        columns=COLUMNS,
    )
    longer = build_stream(PROBES, REWRITTEN, n_edits=5, top_up=top_up)
    assert [r.case_id for r in longer.requests] == ["A", "B", "C", "D"]
    shorter = build_stream(PROBES, REWRITTEN, n_edits=2, top_up=top_up)
    assert [r.case_id for r in shorter.requests] == ["A", "B"]
    with pytest.raises(ValueError, match="at least one edit"):
        build_stream(PROBES, REWRITTEN, n_edits=0)


def test_weight_growth_is_the_norm_of_every_change_over_the_unedited_weights():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    unedited = {n: p.detach().clone() for n, p in model.named_parameters()}
    deltas = [
        Delta(
            {
                "0.weight": ParamDelta(
                    "low_rank",
                    {"left": torch.randn(3, 1), "right": torch.randn(4, 1)},
                )
            }
        ),
        Delta(
            {
                "0.weight": ParamDelta("dense", {"values": torch.randn(3, 4)}),
                "1.weight": ParamDelta("dense", {"values": 0.1 * torch.randn(2, 3)}),
            }
        ),
    ]
    drift = WeightDrift(model)
    assert drift.growth() == (0.0, 0.0)
    for delta in deltas:
        apply_delta(model, delta)
        drift.track(delta)
    names = ["0.weight", "1.weight"]
    now = {n: p.detach() for n, p in model.named_parameters()}
    moved = [float((now[n] - unedited[n]).norm()) for n in names]
    sizes = [float(unedited[n].norm()) for n in names]
    total, largest = drift.growth()
    expected = (sum(m**2 for m in moved) / sum(s**2 for s in sizes)) ** 0.5
    assert total == pytest.approx(expected, rel=1e-5)
    assert largest == pytest.approx(max(m / s for m, s in zip(moved, sizes)), rel=1e-5)


def outcome_rows(method, checkpoint, values):
    return [
        (method, checkpoint, f"{method}{i}/direct/0", f"{method}{i}", "direct", v)
        for i, v in enumerate(values)
    ]


def test_curves_and_the_collapse_point_of_each_method():
    outcomes = pd.DataFrame(
        outcome_rows("M", 1, [1.0])
        + outcome_rows("M", 4, [1.0, 1.0, 0.0, 1.0])
        + outcome_rows("M", 10, [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
        + outcome_rows("N", 1, [1.0])
        + outcome_rows("N", 10, [1.0] * 6 + [0.0] * 4),
        columns=[
            "method",
            "checkpoint",
            "probe_id",
            "case_id",
            "probe_type",
            "outcome",
        ],
    )
    checkpoints = pd.DataFrame(
        {
            "method": ["M", "M", "M", "N", "N"],
            "checkpoint": [1, 4, 10, 1, 10],
            "failed": [0, 0, 2, 0, 0],
            "perplexity": [10.0, 11.0, 30.0, 10.0, 12.0],
            "norm_growth": [0.1, 0.2, 0.5, 0.1, 0.3],
        }
    )
    table = curves(outcomes, checkpoints)
    retention = table[table["measure"] == "retention"].set_index(
        ["method", "checkpoint"]
    )
    assert retention.loc[("M", 4), "value"] == 0.75
    assert retention.loc[("M", 10), "value"] == 0.3
    assert retention.loc[("M", 10), "n_edits"] == 10
    low, high = retention.loc[("M", 10), ["ci_low", "ci_high"]]
    assert 0.0 <= low < 0.3 < high <= 0.7
    # one edit: the bootstrap has nothing to vary
    assert tuple(retention.loc[("M", 1), ["ci_low", "ci_high"]]) == (1.0, 1.0)
    perplexity = table[(table["measure"] == "perplexity") & (table["method"] == "M")]
    assert list(perplexity["value"]) == [10.0, 11.0, 30.0]
    assert set(table["protocol"]) == {"prob", "ppl", "weights"}

    collapse = collapse_points(table, checkpoints, below=0.5).set_index("method")
    assert collapse.loc["M", "collapse_at"] == 10
    assert collapse.loc["M", "retention_at_collapse"] == 0.3
    assert collapse.loc["M", "failed"] == 2
    assert pd.isna(collapse.loc["N", "collapse_at"])
    assert collapse.loc["N", "final_retention"] == 0.6
