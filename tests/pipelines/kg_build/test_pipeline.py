"""kg_build end to end: a Kedro session on a copy of the project, and HTTP vs embedded."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pandas as pd
import pyoxigraph as ox
import pytest
import yaml
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
from mlflow.tracking import MlflowClient

from kebench.kg.oxigraph_server import load_store, serve
from kebench.project import run_pipeline
from kebench.schemas import EDIT_REQUESTS, ENTITY_LINKS, KG_TRIPLES
from tests.helpers import copy_project, ripple_project

TESTS = Path(__file__).parents[2]

DBO = "http://dbpedia.org/ontology/"
DBR = "http://dbpedia.org/resource/"


@pytest.fixture(scope="module")
def demo_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project (conf and demo data) in which `kedro run` writes its outputs."""
    root = copy_project(tmp_path_factory.mktemp("project"))
    bootstrap_project(root)
    with KedroSession.create(project_path=root) as session:
        session.run(pipeline_names=["kg_build"])
    return root


def test_the_session_leaves_no_mlflow_run_open(demo_project):
    """kedro-mlflow reopens its run before each node; the session must still close it,
    or the next session in this process logs into it."""
    assert mlflow.active_run() is None
    client = MlflowClient()
    (run,) = client.search_runs(
        client.get_experiment_by_name("kebench").experiment_id,
        filter_string="tags.`kebench.pipelines` = 'kg_build'",
        max_results=1,
    )
    assert run.info.status == "FINISHED"


def test_demo_outputs_follow_their_schemas(demo_project):
    out = demo_project / "data"
    EDIT_REQUESTS.validate(
        pd.read_parquet(out / "02_intermediate/demo/edit_requests.parquet")
    )
    ENTITY_LINKS.validate(
        pd.read_parquet(out / "02_intermediate/demo/entity_links.parquet")
    )
    triples = KG_TRIPLES.validate(
        pd.read_parquet(out / "03_primary/demo/kg_triples.parquet")
    )
    rdf = list(
        ox.parse(
            path=str(out / "03_primary/demo/kg_triples.nt"),
            format=ox.RdfFormat.N_TRIPLES,
        )
    )
    assert len(rdf) == len(triples)
    amie_lines = (
        (out / "03_primary/demo/kg_triples.amie.tsv")
        .read_text(encoding="utf-8")
        .splitlines()
    )
    assert amie_lines and all(len(line.split("\t")) == 3 for line in amie_lines)
    assert len(amie_lines) == (~triples["o_is_literal"]).sum()


def test_demo_links_every_subject(demo_project):
    edits = pd.read_parquet(
        demo_project / "data/02_intermediate/demo/edit_requests.parquet"
    )
    assert len(edits) >= 40
    assert edits["subject_uri"].notna().all()
    assert edits["target_new_uri"].notna().mean() > 0.9
    coverage = json.loads(
        (demo_project / "data/08_reporting/demo/kg_coverage.json").read_text()
    )
    assert coverage["subjects_linked_pct"] == 100.0
    assert coverage["queries_per_linked_entity"] <= 0.05
    # every demo entity has a class; its types and axioms took one query per batch of
    # entities and one more
    assert coverage["typed_entities_pct"] == 100.0
    triples = pd.read_parquet(demo_project / "data/03_primary/demo/kg_triples.parquet")
    n_entities = len(
        set(triples["s"]) | set(triples.loc[~triples["o_is_literal"], "o"])
    )
    batch = yaml.safe_load(
        (demo_project / "conf/base/parameters/kg_build.yml").read_text()
    )["kg_build"]["neighbourhood"]["batch_size"]
    assert coverage["type_and_axiom_queries"] == 1 + -(-n_entities // batch)


def test_demo_kg_has_inverse_capitals_and_other_names_of_subjects(demo_project):
    """The demo's P1376 "capital of" facts reach kg_triples; its redirects do not (a
    redirect is no fact, dbo:wikiPageRedirects is excluded) but give the edited
    subjects their other names in entity_aliases."""
    triples = pd.read_parquet(demo_project / "data/03_primary/demo/kg_triples.parquet")
    capital_of = triples[triples["p"] == "http://www.wikidata.org/prop/direct/P1376"]
    assert (DBR + "Paris", DBR + "France") in set(zip(capital_of["s"], capital_of["o"]))
    capital = triples[triples["p"] == DBO + "capital"]
    assert set(zip(capital_of["s"], capital_of["o"])) == set(
        zip(capital["o"], capital["s"])
    )
    assert not (triples["p"] == DBO + "wikiPageRedirects").any()
    assert DBR + "Barack_Hussein_Obama" not in set(triples["s"]) | set(triples["o"])

    aliases = pd.read_parquet(
        demo_project / "data/03_primary/demo/entity_aliases.parquet"
    )
    rows = set(aliases.itertuples(index=False, name=None))
    assert (DBR + "Barack_Obama", "Barack Hussein Obama", "redirect") in rows
    # Apple is an edited subject (its headquarters) and no object of the KG or target
    # of an edit: only as a subject is it aliased
    assert not (triples["o"] == DBR + "Apple_Inc.").any()
    assert (DBR + "Apple_Inc.", "Apple Computer", "redirect") in rows
    coverage = json.loads(
        (demo_project / "data/08_reporting/demo/kg_coverage.json").read_text()
    )
    # 54 distinct edited subjects, of which redirects.csv names 5 people (Scholz, Xi,
    # Kohli, Federer, Lewandowski) and Canada with no other name
    assert coverage["edited_subjects_with_other_names"] == 48
    assert coverage["aliases_by_kind"]["redirect"] > 0


def test_rippleedits_added_fact_goes_through_kg_build(tmp_path):
    """A RippleEdits source whose recent example adds a fact (no old target) on the
    demo KG: the old target is neither a mention nor linked, the rest is. Its two
    files name two subjects of their relation: its phrase is the shipped table's."""
    files = [
        TESTS / "kg" / "data" / "rippleedits" / f"{name}.json"
        for name in ("random", "recent")
    ]
    root = ripple_project(tmp_path, files)
    bootstrap_project(root)
    with KedroSession.create(
        project_path=root, runtime_params={"dataset": "ripple"}
    ) as session:
        session.run(pipeline_names=["kg_build"])
    edits = pd.read_parquet(
        root / "data/02_intermediate/ripple/edit_requests.parquet"
    ).set_index("case_id")
    added = edits.loc["ripple-recent-0"]
    assert pd.isna(added["target_true"]) and pd.isna(added["target_true_uri"])
    assert added["target_new_uri"] == "http://dbpedia.org/resource/Republic_of_Ireland"
    replaced = edits.loc["ripple-random-0"]
    assert replaced["target_true_uri"] == "http://dbpedia.org/resource/Japan"
    mentions = pd.read_parquet(
        root / "data/02_intermediate/ripple/entity_mentions.parquet"
    )
    assert set(mentions.loc[mentions["case_id"] == "ripple-recent-0", "field"]) == {
        "subject",
        "target_new",
        "prompt",
    }


def rule_support(triples: pd.DataFrame, first: str, second: str, head: str) -> int:
    """Distinct (x, z) with first(x, y), second(y, z) and head(x, z): a path rule's support."""
    rel = {
        p: triples.loc[triples["p"] == DBO + p, ["s", "o"]]
        for p in (first, second, head)
    }
    body = rel[first].merge(rel[second], left_on="o", right_on="s", suffixes=("", "_2"))
    body = body[["s", "o_2"]].drop_duplicates().rename(columns={"o_2": "o"})
    return len(body.merge(rel[head], on=["s", "o"]))


def test_demo_kg_supports_real_rules(demo_project):
    triples = pd.read_parquet(demo_project / "data/03_primary/demo/kg_triples.parquet")
    spouse = triples.loc[triples["p"] == DBO + "spouse", ["s", "o"]].rename(
        columns={"s": "x", "o": "y"}
    )
    citizen = triples.loc[triples["p"] == DBO + "citizenship", ["s", "o"]]
    shared = spouse.merge(citizen, left_on="x", right_on="s").merge(
        citizen, left_on=["y", "o"], right_on=["s", "o"]
    )
    # spouse(x,y) & citizenship(x,z) => citizenship(y,z)
    assert len(shared[["y", "o"]].drop_duplicates()) >= 5
    assert rule_support(triples, "birthPlace", "country", "citizenship") >= 5
    capital = triples.loc[triples["p"] == DBO + "capital", ["s", "o"]]
    country = triples.loc[triples["p"] == DBO + "country", ["s", "o"]]
    inverse = capital.merge(country, left_on=["s", "o"], right_on=["o", "s"])
    assert len(inverse) >= 5  # capital(z,y) => country(y,z)


@pytest.mark.server
def test_paper_kg_over_http_equals_embedded(data_dir, tmp_path):
    """The paper's MQuAKE-T edits against a real `oxigraph serve` loaded with its KG."""
    kg_file = data_dir / "benchmarking_ke" / "dbpedia_triples_mquake.tsv"
    # the paper's one-hop KG: its batching target is per linked entity (a second hop
    # queries the entities the first reached, in batches of the same size)
    params = {"dataset": "mquake_t", "kg_hops": 1}
    embedded = run_pipeline("kg_build", params, tmp_path / "embedded")
    with serve(load_store([kg_file], tmp_path / "store")) as url:
        http = run_pipeline("kg_build", params | {"endpoint": url}, tmp_path / "http")
        http_triples = http.load("kg_triples")
    pd.testing.assert_frame_equal(http_triples, embedded.load("kg_triples"))
    pd.testing.assert_frame_equal(
        http.load("entity_links"), embedded.load("entity_links")
    )
    # the answers' other names: the same over HTTP, and the dump's foaf:name gives
    # New York City its common name
    aliases = embedded.load("entity_aliases")
    pd.testing.assert_frame_equal(http.load("entity_aliases"), aliases)
    nyc = aliases[aliases["uri"] == "http://dbpedia.org/resource/New_York_City"]
    assert "New York" in set(nyc["alias"])
    coverage = http.load("kg_coverage")
    assert coverage["endpoint"] == url
    assert coverage["subjects_linked_pct"] > 90
    assert coverage["triples_per_entity"] > 50
    assert coverage["queries_per_linked_entity"] <= 0.05
