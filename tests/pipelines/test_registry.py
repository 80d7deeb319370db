"""Each pipeline is a modular pipeline of its own name, and namespacing renamed no
dataset: every catalog entry is still read or written under its name."""

from __future__ import annotations

from kebench.hooks import all_pipelines
from kebench.project import load_config

# the namespaces of each pipeline's nodes: evaluation runs editing's nodes, and lifelong
# editing's hparams and stealthiness's general sets, each in its own pipeline's box
NAMESPACES = {
    "kg_build": {"kg_build"},
    "rule_mining": {"rule_mining"},
    "qa_generation": {"qa_generation"},
    "risk_unification": {"risk_unification"},
    "editing": {"editing"},
    "evaluation": {"editing", "evaluation"},
    "stealthiness": {"stealthiness"},
    "mitigation": {"mitigation"},
    "lifelong": {"editing", "lifelong", "stealthiness"},
}


def test_each_pipeline_is_a_modular_pipeline_of_its_own_name():
    registry = all_pipelines()
    assert {
        name: {node.namespace for node in pipeline.nodes}
        for name, pipeline in registry.items()
    } == NAMESPACES
    assert "kg_build.parse_edit_requests" in {
        n.name for n in registry["kg_build"].nodes
    }
    assert {n.name for n in registry["lifelong"].nodes} >= {
        "editing.resolve_edit_hparams",
        "stealthiness.build_general_sets",
    }


def test_every_catalog_entry_keeps_its_name_in_the_pipelines():
    """A dataset a namespace renamed (``kg_build.kg_triples``) would no longer match
    its catalog entry, and be an unsaved MemoryDataset without a word."""
    catalog = {name for name in load_config({})["catalog"] if not name.startswith("_")}
    used = set().union(*(p.datasets() for p in all_pipelines().values()))
    assert catalog - used == set()
    # the catalog entries internal to one pipeline are among them
    assert {"parsed_edit_requests", "entity_mentions", "edit_run_params"} <= catalog
    assert not {name for name in used if name.split(".")[0] in NAMESPACES}
