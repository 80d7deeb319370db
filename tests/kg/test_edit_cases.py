"""Edit-case readers: the three formats, and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kebench.kg.edit_cases import (
    EditCaseError,
    RawEditCases,
    RelationCatalog,
    counterfact_prompts,
    dataset_probes,
    load_edit_case_file,
    load_edit_case_files,
    parse_edit_cases,
)
from kebench.project import load_config

RELATIONS = RelationCatalog.from_config(
    {
        "P27": {"label": "country of citizenship"},
        "P35": {
            "label": "head of state",
            "prompts": ["The name of the current head of state in {} is"],
        },
    }
)


def mquake_case(case_id: int, **rewrite_overrides) -> dict:
    rewrite = {
        "prompt": "{} is a citizen of",
        "relation_id": "P27",
        "subject": "Barack Obama",
        "target_true": {"str": "United States", "id": "Q30"},
        "target_new": {"str": "Canada", "id": "Q16"},
        "question": "What is the country of citizenship of Barack Obama?",
    } | rewrite_overrides
    return {
        "case_id": case_id,
        "requested_rewrite": [rewrite],
        "questions": [],
        "answer": "x",
        "new_answer": "y",
    }


def raw(records, fmt="mquake", path="cases.json", skip_invalid=False) -> RawEditCases:
    return RawEditCases("demo", fmt, "counterfactual", path, records, skip_invalid)


def test_mquake_schema():
    frame = parse_edit_cases(raw([mquake_case(7)]), RELATIONS)
    row = frame.iloc[0]
    assert row["case_id"] == "demo-7"
    assert (row["target_true"], row["target_new"]) == ("United States", "Canada")
    assert row["relation_label"] == "country of citizenship"
    assert row["risk"] == "counterfactual" and row["source"] == "demo"


def test_multi_edit_case_gets_one_row_per_rewrite():
    case = mquake_case(3)
    case["requested_rewrite"].append(
        case["requested_rewrite"][0] | {"subject": "Michelle Obama"}
    )
    assert list(parse_edit_cases(raw([case]), RELATIONS)["case_id"]) == [
        "demo-3.0",
        "demo-3.1",
    ]


def test_malformed_json_names_file_and_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"case_id": 1,, }]', encoding="utf-8")
    with pytest.raises(
        EditCaseError, match=r"broken\.json: malformed JSON at line 1, column 16"
    ):
        load_edit_case_file(path)


def test_missing_target_new_names_file_and_record(tmp_path):
    cases = [mquake_case(1), mquake_case(2, target_new=None)]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases), encoding="utf-8")
    records = load_edit_case_file(path)
    with pytest.raises(EditCaseError) as err:
        parse_edit_cases(raw(records, path=str(path)), RELATIONS)
    assert str(err.value) == (
        f"{path}: record #1 (2), requested_rewrite[0]: missing or empty field 'target_new'"
    )


def test_invalid_records_can_be_skipped(caplog):
    records = [mquake_case(1), mquake_case(2, subject="")]
    frame = parse_edit_cases(raw(records, skip_invalid=True), RELATIONS)
    assert list(frame["case_id"]) == ["demo-1"]
    assert "missing or empty field 'subject'; skipped" in caplog.text


def test_flat_records_dedupe_and_map_relations():
    record = {
        "prompt": "The name of the current head of state in {} is",
        "subject": "United States of America",
        "target_new": "Joe Biden",
        "target_true": "Donald Trump",
        "question": "Who is the head of state?",
    }
    placeholder = dict.fromkeys(record)
    frame = parse_edit_cases(
        raw([record, placeholder, record], "flat_mquake"), RELATIONS
    )
    assert list(frame["case_id"]) == ["demo-0"]
    assert frame.iloc[0]["relation_id"] == "P35"


def test_mlake_sentence_becomes_a_cloze():
    record = {
        "question": "Where did Carl Sagan work?",
        "prompt": "Carl Sagan worked at Cornell University during his career.",
        "o_answer": "Cornell University",
        "target_new": "BBC",
        "subject": "Carl Sagan",
    }
    row = parse_edit_cases(raw([record], "mlake"), RELATIONS).iloc[0]
    assert row["prompt"] == "{} worked at"
    assert row["target_true"] == "Cornell University"


def test_csv_is_read(tmp_path):
    path = tmp_path / "edits.csv"
    path.write_text(
        'prompt,subject,target_new,target_true,question\n"{} is a citizen of",Ann,Peru,Chile,Q?\n',
        encoding="utf-8",
    )
    frame = parse_edit_cases(raw(load_edit_case_file(path), "flat_mquake"), RELATIONS)
    assert frame.iloc[0]["relation_id"] == "unknown"


def test_unknown_format_is_named():
    with pytest.raises(EditCaseError, match="unknown edit-case format 'xml'"):
        parse_edit_cases(raw([mquake_case(1)], "xml"), RELATIONS)


def test_paper_data_parses(data_dir):
    path = data_dir / "benchmarking_ke" / "mquake_t_edits.json"
    mquake_t = parse_edit_cases(
        RawEditCases(
            "mquake_t",
            "flat_mquake",
            "benign_update",
            str(path),
            load_edit_case_file(path),
        ),
        RELATIONS,
    )
    assert len(mquake_t) == 96  # 3,736 records, one empty placeholder, the rest repeats
    path = data_dir / "benchmarking_ke" / "mlake_en_edits.json"
    mlake = parse_edit_cases(
        RawEditCases(
            "mlake",
            "mlake",
            "counterfactual",
            str(path),
            load_edit_case_file(path),
            True,
        ),
        RELATIONS,
    )
    assert len(mlake) == 966  # 1,013 records, 47 whose subject is the answer
    assert mlake["prompt"].str.contains("{}", regex=False).all()


DATA = Path(__file__).parent / "data"


def read(fmt: str, name: str) -> RawEditCases:
    path = DATA / name
    return RawEditCases(
        "src", fmt, "counterfactual", str(path), load_edit_case_file(path)
    )


def probes_of(frame, case_id: str, probe_type: str) -> list[tuple]:
    rows = frame[(frame["case_id"] == case_id) & (frame["probe_type"] == probe_type)]
    rows = rows.astype(object).where(rows.notna(), None)  # an unknown answer: None
    return list(
        rows[["text", "answer_old", "answer_new", "origin"]].itertuples(
            index=False, name=None
        )
    )


def test_counterfact_prompts_of_every_kind_for_its_standard_metrics():
    prompts = counterfact_prompts(read("counterfact", "counterfact.json"))
    first = prompts[prompts["case_id"] == "src-0"]
    assert list(first[["kind", "prompt"]].itertuples(index=False, name=None)) == [
        # the rewrite prompt with its subject, as ROME scores it
        ("rewrite", "The official language of Brazil is"),
        ("paraphrase", "The river was wide. In Brazil, the official language is"),
        ("paraphrase", "Brazil's official language is"),
        ("neighborhood", "The official language of Portugal is"),
        ("neighborhood", "The official language of Mozambique is"),
        ("generation", "In Brazil, people speak"),
        ("generation", "Brazil's schools teach in"),
    ]
    assert set(first["target_new"]) == {"Finnish"}
    assert set(first["target_true"]) == {"Portuguese"}
    assert set(first["relation_id"]) == {"P37"}
    assert set(first["target_new_id"]) == {"Q1412"}
    assert set(prompts["risk"]) == {"counterfactual"} and set(prompts["source"]) == {
        "src"
    }
    # other formats have none
    assert counterfact_prompts(read("zsre", "zsre_mem_eval.json")).empty


def test_counterfact_rewrite_and_its_probes():
    raw = read("counterfact", "counterfact.json")
    requests = parse_edit_cases(raw, RELATIONS)
    first = requests.iloc[0]
    assert (first["case_id"], first["subject"], first["prompt"]) == (
        "src-0",
        "Brazil",
        "The official language of {} is",
    )
    assert (first["target_true"], first["target_new"]) == ("Portuguese", "Finnish")
    assert first["relation_id"] == "P37" and pd.isna(first["question"])
    probes = dataset_probes(raw)
    assert probes_of(probes, "src-0", "paraphrase") == [
        (
            "The river was wide. In Brazil, the official language is",
            "Portuguese",
            "Finnish",
            "paraphrase_prompts",
        ),
        (
            "Brazil's official language is",
            "Portuguese",
            "Finnish",
            "paraphrase_prompts",
        ),
    ]
    # a neighbour keeps the true object: its answer must not move to the new one
    assert probes_of(probes, "src-0", "locality") == [
        (
            "The official language of Portugal is",
            "Portuguese",
            "Portuguese",
            "neighborhood_prompts",
        ),
        (
            "The official language of Mozambique is",
            "Portuguese",
            "Portuguese",
            "neighborhood_prompts",
        ),
    ]
    assert set(probes["style"]) == {"as_is"}
    assert len(probes) == 6  # noqa: PLR2004 - 4 of case 0, 2 of case 1


def test_counterfact_rewrite_must_be_an_object(tmp_path):
    path = tmp_path / "cf.json"
    path.write_text(json.dumps([{"case_id": 4, "requested_rewrite": []}]))
    with pytest.raises(
        EditCaseError,
        match=r"cf\.json: record #0 \(4\): field 'requested_rewrite' must be an object",
    ):
        parse_edit_cases(read_path("counterfact", path), RELATIONS)


def counterfact_record(**fields) -> dict:
    rewrite = {
        "prompt": "The official language of {} is",
        "relation_id": "P37",
        "subject": "Brazil",
        "target_true": {"str": "Portuguese"},
        "target_new": {"str": "Finnish"},
    }
    return {"case_id": 7, "requested_rewrite": rewrite, **fields}


def test_counterfact_prompt_without_its_subject_slot_names_the_record(tmp_path):
    record = counterfact_record()
    record["requested_rewrite"]["prompt"] = "The official language of Brazil is"
    path = tmp_path / "cf.json"
    path.write_text(json.dumps([record]))
    with pytest.raises(
        EditCaseError,
        match=r"cf\.json: record #0 \(7\): field 'prompt' must hold \{\} once",
    ):
        parse_edit_cases(read_path("counterfact", path), RELATIONS)


def test_a_prompt_list_given_as_a_string_names_the_record(tmp_path):
    path = tmp_path / "cf.json"
    path.write_text(
        json.dumps([counterfact_record(paraphrase_prompts="Brazil speaks")])
    )
    cases = read_path("counterfact", path)
    with pytest.raises(
        EditCaseError,
        match=r"cf\.json: record #0 \(7\): field 'paraphrase_prompts' must be a "
        r"list of strings, got str",
    ):
        dataset_probes(cases)
    with pytest.raises(EditCaseError, match="'paraphrase_prompts' must be a list"):
        counterfact_prompts(cases)


def read_path(fmt: str, path) -> RawEditCases:
    return RawEditCases(
        "src", fmt, "counterfactual", str(path), load_edit_case_file(path)
    )


def test_zsre_question_is_the_prompt_and_answers_zero_the_truth():
    raw = read("zsre", "zsre_mem_eval.json")
    requests = parse_edit_cases(raw, RELATIONS)
    assert list(requests["prompt"]) == [
        "Which country is {} located in?",
        "What is the native language of {}?",
    ]
    # answers[0] is the truth, not the model prediction `pred`
    assert list(requests["target_true"]) == ["Russia", "English"]
    assert list(requests["target_new"]) == ["Canada", "Dutch"]
    probes = dataset_probes(raw)
    assert probes_of(probes, "src-0", "paraphrase") == [
        ("In which country can Lake Baikal be found?", "Russia", "Canada", "rephrase")
    ]
    assert probes_of(probes, "src-1", "locality") == [
        ("nq question: how many moons does mars have", "two", "two", "loc")
    ]


def test_zsre_question_without_its_subject_names_the_record(tmp_path):
    record = json.loads((DATA / "zsre_mem_eval.json").read_text())[0]
    path = tmp_path / "zsre.json"
    path.write_text(json.dumps([record | {"subject": "Loch Ness"}]))
    with pytest.raises(
        EditCaseError, match=r"zsre\.json: record #0 \('Loch Ness'\): field 'src'"
    ):
        parse_edit_cases(read_path("zsre", path), RELATIONS)
    path.write_text(json.dumps([record | {"answers": []}]))
    with pytest.raises(EditCaseError, match=r"record #0 .*'answers'"):
        parse_edit_cases(read_path("zsre", path), RELATIONS)


def test_mquake_v2_multihop_questions_carry_their_aliases():
    raw = read("mquake", "mquake_cf_v2.json")
    assert list(parse_edit_cases(raw, RELATIONS)["case_id"]) == ["src-11"]
    probes = dataset_probes(raw)
    assert list(probes["probe_type"]) == ["multihop"] * 3
    assert set(probes["style"]) == {"question"} and set(probes["hops"]) == {2}
    first = probes.iloc[0]
    assert (first["answer_old"], first["answer_new"]) == ("London", "Tokyo")
    assert json.loads(first["aliases_old"]) == ["London, England", "City of London"]
    assert json.loads(first["aliases_new"]) == ["Tokyo Metropolis", "Tōkyō"]


# the relations a run parses RippleEdits files with: the project's shipped tables
PARAMETERS = load_config({})["parameters"]
RIPPLE_RELATIONS = RelationCatalog.from_config(
    PARAMETERS["relations"], PARAMETERS["rippleedits_relations"]
)


def ripple() -> RawEditCases:
    """The three RippleEdits test files as one source; nothing may be skipped."""
    files = [
        DATA / "rippleedits" / f"{name}.json"
        for name in ("popular", "random", "recent")
    ]
    records, origins = load_edit_case_files(files)
    return RawEditCases(
        "ripple",
        "rippleedits",
        "counterfactual",
        ", ".join(map(str, files)),
        records,
        skip_invalid=False,
        origins=origins,
    )


def test_rippleedits_edits_of_three_files():
    requests = parse_edit_cases(ripple(), RIPPLE_RELATIONS)
    assert list(requests["case_id"]) == [
        "ripple-popular-0",
        "ripple-popular-1",
        "ripple-random-0",
        "ripple-recent-0",
    ]
    assert list(requests["subject"]) == [
        "Leonardo DiCaprio",
        "Marie Curie",
        "Haruki Murakami",
        "Ada Limón",
    ]
    assert set(requests["prompt"]) == {
        "The name of the country of citizenship of {} is"
    }
    # the recent example adds a fact: it has no old target
    assert list(requests["target_true"].iloc[:3]) == [
        "United States of America",
        "Poland",
        "Japan",
    ]
    assert pd.isna(requests["target_true"].iloc[3])
    assert list(requests["target_new"]) == ["Syria", "Brazil", "Kenya", "Ireland"]
    assert set(requests["relation_id"]) == {"COUNTRY_OF_CITIZENSHIP"}
    assert requests.iloc[0]["relation_label"] == "country of citizenship"


def one_record(name: str) -> RawEditCases:
    """One of the hand-written 1-record files in RippleEdits' published schema."""
    return read("rippleedits", f"rippleedits/one/{name}.json")


def test_rippleedits_relation_of_the_table_reads_from_one_record():
    # one subject of CAPITAL in the whole file: only the table knows its phrase
    (row,) = parse_edit_cases(one_record("random"), RIPPLE_RELATIONS).to_dict("records")
    assert row["case_id"] == "src-random-0"
    assert (row["subject"], row["prompt"]) == (
        "Burkina Faso",
        "The name of the capital city of {} is",
    )
    assert (row["target_true"], row["target_new"]) == ("Ouagadougou", "Bobo-Dioulasso")
    # the relation keeps RippleEdits' name; its label is relations.yml's of P36
    assert (row["relation_id"], row["relation_label"]) == ("CAPITAL", "capital")


def test_rippleedits_one_record_of_each_file_and_its_probes():
    popular = one_record("popular")
    (edit,) = parse_edit_cases(popular, RIPPLE_RELATIONS).to_dict("records")
    assert (edit["subject"], edit["prompt"], edit["relation_label"]) == (
        "Leonardo DiCaprio",
        "The name of the mother of {} is",
        "mother",  # P25 is not in relations.yml: the name in words
    )
    assert (edit["target_true"], edit["target_new"]) == (
        "Irmelin Indenbirken",
        "Meryl Streep",
    )
    probes = dataset_probes(popular, RIPPLE_RELATIONS)
    assert list(probes["probe_type"]) == [
        "locality",
        "paraphrase",
        "entailed",
        "multihop",
    ]
    # the alias asks the edit itself: its old target comes from the table's phrase
    assert probes_of(probes, "src-popular-0", "paraphrase") == [
        (
            "The name of the mother of Leo DiCaprio is",
            "Irmelin Indenbirken",
            "Meryl Streep",
            "Subject_Aliasing",
        )
    ]
    assert probes_of(probes, "src-popular-0", "multihop") == [
        (
            "The place of birth of the mother of Leonardo DiCaprio is",
            None,
            "Summit",
            "Compositionality_I",
        )
    ]
    # the recent example adds a fact; the phrase's words after the subject occur
    # once in its sentence, so no query of the example needs to restate the edit
    recent = one_record("recent")
    (added,) = parse_edit_cases(recent, RIPPLE_RELATIONS).to_dict("records")
    assert (added["subject"], added["prompt"], added["relation_id"]) == (
        "Kylian Mbappé",
        "The name of the sports team which {} is a member of is",
        "MEMBER_OF_SPORTS_TEAM",
    )
    assert pd.isna(added["target_true"]) and added["target_new"] == "Real Madrid CF"
    assert probes_of(
        dataset_probes(recent, RIPPLE_RELATIONS), "src-recent-0", "paraphrase"
    ) == [
        (
            "The name of the sports team which Kylian Mbappé Lottin is a member of is",
            None,
            "Real Madrid CF",
            "Subject_Aliasing",
        )
    ]


def ripple_file(tmp_path, records: list[dict]) -> RawEditCases:
    path = tmp_path / "ripple.json"
    path.write_text(json.dumps(records))
    return read_path("rippleedits", path)


def first_record(name: str) -> dict:
    return json.loads((DATA / "rippleedits" / "one" / f"{name}.json").read_text())[0]


def test_rippleedits_readme_spelling_of_relation_specificity_reads(tmp_path):
    """RippleEdits' README example spells the category Relation_Specifity: a file
    written after it keeps its locality probe."""
    record = first_record("popular")
    record["Relation_Specifity"] = record.pop("Relation_Specificity")
    probes = dataset_probes(ripple_file(tmp_path, [record]), RIPPLE_RELATIONS)
    assert probes_of(probes, "src-ripple-0", "locality") == [
        (
            "The name of the country of citizenship of Leonardo DiCaprio is",
            "United States of America",
            "United States of America",
            "Relation_Specificity",
        )
    ]


def test_rippleedits_prompt_off_the_table_phrase_names_the_record(tmp_path):
    record = first_record("random")
    record["edit"]["prompt"] = "The capital of Burkina Faso is Bobo-Dioulasso."
    with pytest.raises(
        EditCaseError,
        match=r"ripple\.json: record #0: cannot find the subject in 'The capital of "
        r"Burkina Faso is Bobo-Dioulasso\.' with its relation's phrase "
        r"'The name of the capital city of ' \.\.\. ' is'",
    ):
        parse_edit_cases(ripple_file(tmp_path, [record]), RIPPLE_RELATIONS)


def test_rippleedits_replaced_fact_needs_its_original_fact(tmp_path):
    # a random example that names its old fact otherwise would lose its old target
    record = first_record("random")
    record["edit"]["previous_fact"] = record["edit"].pop("original_fact")
    with pytest.raises(
        EditCaseError,
        match=r"ripple\.json: record #0: a random example replaces a fact, but its "
        r"edit has no 'original_fact'",
    ):
        parse_edit_cases(ripple_file(tmp_path, [record]), RIPPLE_RELATIONS)


def nominated(subject_id: str, subject: str, award: str) -> dict:
    """A plain query of NOMINATED_FOR, a relation the table does not have."""
    return {
        "prompt": f"The award {subject} was nominated for is",
        "answers": [{"value": award, "aliases": []}],
        "query_type": "regular",
        "subject_id": subject_id,
        "relation": "NOMINATED_FOR",
        "target_ids": ["Q1"],
        "phrase": None,
    }


def nomination_edit(subjects: list[tuple[str, str]]) -> dict:
    """A popular example editing Meryl Streep's NOMINATED_FOR, with plain queries of
    that relation about ``subjects`` in its specificity tests."""
    return {
        "example_type": "popular",
        "edit": {
            "prompt": "The award Meryl Streep was nominated for is Golden Globe Award.",
            "subject_id": "Q873",
            "relation": "NOMINATED_FOR",
            "target_id": "Q1011547",
            "original_fact": {
                "prompt": "The award Meryl Streep was nominated for is Academy Award.",
                "subject_id": "Q873",
                "relation": "NOMINATED_FOR",
                "target_id": "Q19020",
            },
        },
        "Relation_Specificity": [
            {"test_queries": [nominated(qid, name, "Academy Award")]}
            for qid, name in subjects
        ],
    }


def test_rippleedits_relation_off_the_table_is_learnt_from_three_subjects(tmp_path):
    record = nomination_edit(
        [("Q873", "Meryl Streep"), ("Q2263", "Tom Hanks"), ("Q4679286", "Ada Limón")]
    )
    (row,) = parse_edit_cases(
        ripple_file(tmp_path, [record]), RIPPLE_RELATIONS
    ).to_dict("records")
    assert (row["subject"], row["prompt"]) == (
        "Meryl Streep",
        "The award {} was nominated for is",
    )
    assert (row["target_true"], row["target_new"]) == (
        "Academy Award",
        "Golden Globe Award",
    )
    assert row["relation_label"] == "nominated for"


def test_rippleedits_relation_off_the_table_with_too_few_subjects_names_the_record(
    tmp_path,
):
    record = nomination_edit([("Q873", "Meryl Streep"), ("Q2263", "Tom Hanks")])
    with pytest.raises(
        EditCaseError,
        match=r"ripple\.json: record #0: relation 'NOMINATED_FOR' is not in the "
        r"rippleedits_relations table and has plain queries of fewer than 3 subjects",
    ):
        parse_edit_cases(ripple_file(tmp_path, [record]), RIPPLE_RELATIONS)


def test_rippleedits_label_is_that_of_the_tables_wikidata_id():
    catalog = RelationCatalog.from_config(
        {"P36": {"label": "capital city"}},
        {"CAPITAL": {"wikidata": "P36", "phrase": "The capital of {} is"}},
    )
    assert catalog.ripple_label("CAPITAL") == "capital city"
    assert catalog.ripple_label("CAPITAL_OF") == "capital of"


@pytest.mark.parametrize("phrase", ["The capital is", "The capital of {}", "{} {} is"])
def test_rippleedits_table_phrase_needs_its_subject_once_and_text_after(phrase):
    with pytest.raises(ValueError, match=r"rippleedits_relations\.CAPITAL: phrase"):
        RelationCatalog.from_config(
            {}, {"CAPITAL": {"wikidata": "P36", "phrase": phrase}}
        )


def recent_edit(tmp_path, prompt: str, own_queries: list[dict]) -> RawEditCases:
    """One recent example that adds the fact ``prompt`` and has ``own_queries`` as
    conditions."""
    record = {
        "example_type": "recent",
        "edit": {
            "prompt": prompt,
            "subject_id": "Q1",
            "relation": "COUNTRY_OF_CITIZENSHIP",
            "target_id": "Q27",
        },
        "Forgetfulness": [{"test_queries": [], "condition_queries": own_queries}],
    }
    return ripple_file(tmp_path, [record])


def test_rippleedits_added_fact_subject_from_its_own_query(tmp_path):
    # "is" is the phrase's last word and also inside the subject: the example's query
    # of the subject tells where the subject ends
    query = {
        "prompt": "The name of the country of citizenship of Tom is Here is",
        "answers": [{"value": "Ireland", "aliases": []}],
        "query_type": "regular",
        "subject_id": "Q1",
        "relation": "COUNTRY_OF_CITIZENSHIP",
        "phrase": None,
    }
    raw = recent_edit(
        tmp_path,
        "The name of the country of citizenship of Tom is Here is Ireland.",
        [query],
    )
    added = parse_edit_cases(raw, RIPPLE_RELATIONS).iloc[-1]
    assert (added["subject"], added["target_new"]) == ("Tom is Here", "Ireland")
    assert pd.isna(added["target_true"])


def test_rippleedits_added_fact_without_its_subject_names_the_record(tmp_path):
    raw = recent_edit(
        tmp_path,
        "The name of the country of citizenship of Tom is Here is Ireland.",
        [],
    )
    with pytest.raises(
        EditCaseError,
        match=r"ripple\.json: record #0: the edit adds a fact .* cannot be told apart",
    ):
        parse_edit_cases(raw, RIPPLE_RELATIONS)


def test_rippleedits_tests_become_probes():
    probes = dataset_probes(ripple(), RIPPLE_RELATIONS)
    first = probes[probes["case_id"] == "ripple-popular-0"].set_index("probe_type")
    assert tuple(
        first.loc["locality", ["text", "answer_old", "answer_new", "origin"]]
    ) == (
        "The name of the mother of Leonardo DiCaprio is",
        "Irmelin Indenbirken",
        "Irmelin Indenbirken",
        "Relation_Specificity",
    )
    assert json.loads(first.loc["locality", "aliases_old"]) == ["Irmelin DiCaprio"]
    # the alias asks the edit itself: old and new answer are the edit's
    assert tuple(first.loc["paraphrase", ["text", "answer_old", "answer_new"]]) == (
        "The name of the country of citizenship of Leo DiCaprio is",
        "United States of America",
        "Syria",
    )
    assert json.loads(first.loc["paraphrase", "aliases_new"]) == [
        "Syrian Arab Republic"
    ]
    assert json.loads(first.loc["paraphrase", "aliases_old"]) == []
    two_hop = first.loc["multihop"]
    assert (two_hop["answer_new"], two_hop["hops"]) == ("Damascus", 2)
    assert pd.isna(two_hop["answer_old"])
    # the test's condition queries are the probe's premises (RippleEdits checks them
    # on the unedited model before it runs the test)
    assert json.loads(two_hop["premises"]) == [
        {
            "subject": "Q858",
            "relation": "CAPITAL",
            "prompt": "The name of the capital city of Syria is",
            "answer": "Damascus",
            "aliases": [],
        },
        {
            "subject": "Q38111",
            "relation": "COUNTRY_OF_CITIZENSHIP",
            "prompt": "The name of the country of citizenship of Leonardo DiCaprio is",
            "answer": "Syria",
            "aliases": [],
        },
    ]
    assert json.loads(first.loc["locality", "premises"]) == []
    assert probes_of(probes, "ripple-popular-1", "locality") == [
        (
            "The name of the country of citizenship of Marie Curie is",
            "France",
            "France",
            "Forgetfulness",
        )
    ]
    assert probes_of(probes, "ripple-random-0", "entailed") == [
        ("Haruki Murakami holds a passport of", None, "Kenya", "Logical_Generalization")
    ]
    # the added fact's two-hop query: the old answer is unknown, as for any two-hop
    assert probes_of(probes, "ripple-recent-0", "multihop") == [
        (
            "The name of the capital city of the country of citizenship of Ada Limón is",
            None,
            "Dublin",
            "Compositionality_I",
        )
    ]
    # condition queries are not probes
    assert len(probes) == 6  # noqa: PLR2004
    assert set(probes["style"]) == {"as_is"}


def test_rippleedits_relation_named_by_its_wikidata_id_reads_with_kebench_prompt():
    # P159 is not in RippleEdits' table: `kebench export` names it by its id and
    # phrases it with relations.yml's prompt, which the reader knows from one record
    record = {
        "example_type": "random",
        "edit": {
            "prompt": "The headquarters of Acme Corp is located in the city of Lyon.",
            "subject_id": "Acme",
            "relation": "P159",
            "target_id": "Lyon",
            "original_fact": {
                "prompt": "The headquarters of Acme Corp is located in the city of "
                "Paris.",
                "subject_id": "Acme",
                "relation": "P159",
                "target_id": "Paris",
            },
        },
    }
    cases = RawEditCases("x", "rippleedits", "counterfactual", "x.json", [record])
    (row,) = parse_edit_cases(cases, RIPPLE_RELATIONS).to_dict("records")
    assert (row["subject"], row["target_true"], row["target_new"]) == (
        "Acme Corp",
        "Paris",
        "Lyon",
    )
    assert (row["relation_id"], row["relation_label"]) == (
        "P159",
        "headquarters location",
    )
    assert RIPPLE_RELATIONS.ripple_phrase("P159")[0] == "P159"
    assert RIPPLE_RELATIONS.ripple_phrase("P36")[0] == "CAPITAL"
    assert RIPPLE_RELATIONS.ripple_phrase("P999999") is None
