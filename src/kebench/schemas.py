"""The one definition of each table that crosses a pipeline boundary (design §3).

Every schema is checked where its table is written: the node that produces it calls
``validate`` before returning.
"""

from __future__ import annotations

import pandera.pandas as pa

RISKS = ("benign_update", "counterfactual", "misinformation", "bias")

EDIT_REQUESTS = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str, unique=True),
        "source": pa.Column(str),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        "subject": pa.Column(str, pa.Check.str_length(min_value=1)),
        "relation_id": pa.Column(str),
        "relation_label": pa.Column(str),
        "prompt": pa.Column(str, pa.Check.str_contains(r"\{\}")),
        # None: the edit adds a fact and replaces none (RippleEdits' recent examples)
        "target_true": pa.Column(str, pa.Check.str_length(min_value=1), nullable=True),
        "target_new": pa.Column(str, pa.Check.str_length(min_value=1)),
        "question": pa.Column(str, nullable=True),
        "subject_uri": pa.Column(str, nullable=True),
        "target_true_uri": pa.Column(str, nullable=True),
        "target_new_uri": pa.Column(str, nullable=True),
    },
    strict=True,
    coerce=True,
    name="edit_requests",
)

MENTIONS = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str),
        "field": pa.Column(str),
        "mention": pa.Column(str, pa.Check.str_length(min_value=1)),
        "origin": pa.Column(str, pa.Check.isin(["spacy", "dataset"])),
    },
    strict=True,
    coerce=True,
    name="mentions",
)

LINK_METHODS = ("label", "normalised_label", "iri_fallback", "unlinked")

ENTITY_LINKS = pa.DataFrameSchema(
    {
        "mention": pa.Column(str, unique=True),
        "uri": pa.Column(str, nullable=True),
        "method": pa.Column(str, pa.Check.isin(LINK_METHODS)),
        "reason": pa.Column(str, nullable=True),
        "n_cases": pa.Column(int, pa.Check.ge(1)),
    },
    checks=pa.Check(
        lambda df: df["uri"].isna() == (df["method"] == "unlinked"),
        error="a mention has a uri exactly when it is linked",
    ),
    strict=True,
    coerce=True,
    name="entity_links",
)

KG_TRIPLES = pa.DataFrameSchema(
    {
        "s": pa.Column(str),
        "p": pa.Column(str),
        "o": pa.Column(str),
        "o_is_literal": pa.Column(bool),
        "o_lang": pa.Column(str, nullable=True),
        "s_label": pa.Column(str),
        "p_local": pa.Column(str),
        "o_label": pa.Column(str),
    },
    unique=["s", "p", "o", "o_is_literal", "o_lang"],
    strict=True,
    coerce=True,
    name="kg_triples",
)

# An atom is [subject variable, relation, object variable].
ATOM_ARITY = 3
ATOM = pa.Column(object, pa.Check(lambda atoms: atoms.map(len) == ATOM_ARITY))
MAX_RULE_BODY = 2  # AMIE's maxad=3: at most three atoms, head included

RULES = pa.DataFrameSchema(
    {
        "rule_id": pa.Column(str, unique=True),
        "body": pa.Column(
            object, pa.Check(lambda bodies: bodies.map(len).between(1, 3))
        ),
        "head": ATOM,
        "head_coverage": pa.Column(float, pa.Check.in_range(0, 1)),
        "std_confidence": pa.Column(float, pa.Check.in_range(0, 1)),
        "pca_confidence": pa.Column(float, pa.Check.in_range(0, 1)),
        "support": pa.Column(int, pa.Check.ge(1)),
        "body_size": pa.Column(int, pa.Check.ge(1)),
        "pca_body_size": pa.Column(int, pa.Check.ge(1)),
        "functional_variable": pa.Column(str, pa.Check.isin(["?a", "?b"])),
        "amie_line": pa.Column(str),
    },
    strict=True,
    name="rules",
)

# Other names of the KG's entities (kebench.kg.aliases): their labels and names, the
# labels of pages that redirect to them, and of resources they are sameAs.
ENTITY_ALIASES = pa.DataFrameSchema(
    {
        "uri": pa.Column(str),
        "alias": pa.Column(str, pa.Check.str_length(min_value=1)),
        "via": pa.Column(str, pa.Check.isin(["label", "redirect", "same_as"])),
    },
    unique=["uri", "alias"],
    strict=True,
    coerce=True,
    name="entity_aliases",
)

# The vocabulary's axioms (kebench.kg.vocabulary): one per row, relations and values as
# full IRIs; ``origin`` names the file and line, or the KG, each came from.
AXIOM_KINDS = (
    "factual",
    "symmetric",
    "transitive",
    "functional",
    "inverse_of",
    "sub_property_of",
    "equivalent_property",
    "domain",
    "range",
    "sub_class_of",
)

AXIOMS = pa.DataFrameSchema(
    {
        "relation": pa.Column(str),
        "axiom": pa.Column(str, pa.Check.isin(AXIOM_KINDS)),
        "value": pa.Column(str, nullable=True),
        "source": pa.Column(str),
        "origin": pa.Column(str),
    },
    strict=True,
    coerce=True,
    name="axioms",
)

# The rdf:type classes of the KG's entities (domain and range checks).
ENTITY_TYPES = pa.DataFrameSchema(
    {"uri": pa.Column(str), "type": pa.Column(str)},
    unique=["uri", "type"],
    strict=True,
    coerce=True,
    name="entity_types",
)

# Two tiers of consequences, never mixed in one number (docs/qa_generation.md):
# deductive ones a perfect reasoner must draw from the edit, the unchanged KG and the
# vocabulary's axioms; inductive ones from mined rules the axioms do not entail.
TIERS = ("deductive", "inductive")
DEDUCTIVE_KINDS = ("composition", "inverse", "symmetric", "subject_alias", "axiom")
INDUCTIVE_KINDS = ("rule",)
FACT_STATUSES = (
    "entailed",  # probed
    "conflicting",
    "contested",
    "additive",  # a step has more than one value: no single answer
    "ill_typed",  # a step's subject is not of its relation's domain
)

ENTAILED_FACTS = pa.DataFrameSchema(
    {
        "fact_id": pa.Column(str, unique=True),
        "case_id": pa.Column(str),
        "tier": pa.Column(str, pa.Check.isin(TIERS)),
        "kind": pa.Column(str, pa.Check.isin(DEDUCTIVE_KINDS + INDUCTIVE_KINDS)),
        # the mined rule (inductive, axiom); null for the other deductive kinds
        "rule_id": pa.Column(str, nullable=True),
        "confidence": pa.Column(float, nullable=True),  # the rule's PCA confidence
        "bindings": pa.Column(str),  # JSON: rule variable -> entity local name
        "subject_uri": pa.Column(str),
        "subject_label": pa.Column(str),
        # the property path from subject_label to answer_new: KG local names joined
        # by "/", each optionally prefixed by "^" (walked against the stored triple)
        "relation": pa.Column(
            str, pa.Check.str_matches(r"^\^?[^/^\s]+(/\^?[^/^\s]+)*$")
        ),
        # the last hop's single fact (subject IRI, predicate local name), as stored
        "fact_subject_uri": pa.Column(str),
        "fact_relation": pa.Column(str),
        # null where the old world gives the path no single answer
        "answer_old": pa.Column(str, pa.Check.str_length(min_value=1), nullable=True),
        "answer_old_uri": pa.Column(str, nullable=True),
        "answer_new": pa.Column(str, pa.Check.str_length(min_value=1)),
        "answer_new_uri": pa.Column(str),
        # JSON: [[relation, "out"|"in"|"named", label], ...]; inductive: from the
        # edited subject to the consequence's subject; deductive: every step of the
        # property path from subject_label
        "chain": pa.Column(str),
        # JSON [[s, r, o], ...] (labels): deductive, the triples walked from
        # subject_label to answer_new, each stored as it is ("^r" in relation when
        # walked against it); inductive, the rule's bound body, edit included
        "path": pa.Column(str),
        "path_uri": pa.Column(str),  # the same triples as IRIs (literals as text)
        # JSON: the KG facts the derivation rests on, neither the edit nor derived ones
        "premises": pa.Column(str),
        "hops": pa.Column(int, pa.Check.ge(1)),
        "status": pa.Column(str, pa.Check.isin(FACT_STATUSES)),
        "reason": pa.Column(str, nullable=True),
        "depth": pa.Column(int, pa.Check.ge(1)),  # rule applications from the edit
        "semantics": pa.Column(str, pa.Check.isin(["paper", "consistent"])),
    },
    checks=[
        pa.Check(
            lambda df: (
                df["answer_old_uri"].isna()
                | (df["answer_old_uri"] != df["answer_new_uri"])
            ),
            error="answer unchanged",
        ),
        pa.Check(
            lambda df: (
                (df["tier"] == "deductive") == df["kind"].isin(list(DEDUCTIVE_KINDS))
            ),
            error="a deductive row has a deductive kind, an inductive row kind 'rule'",
        ),
    ],
    strict=True,
    coerce=True,
    name="entailed_facts",
)

ENTAILED_QUESTIONS = pa.DataFrameSchema(
    {
        "fact_id": pa.Column(str),
        "case_id": pa.Column(str),
        "tier": pa.Column(str, pa.Check.isin(TIERS)),
        "kind": pa.Column(str, pa.Check.isin(DEDUCTIVE_KINDS + INDUCTIVE_KINDS)),
        "rule_id": pa.Column(str),  # the rule, or the derivation: "<kind>:<path>"
        "question": pa.Column(str, pa.Check.str_length(min_value=1)),
        "cloze": pa.Column(str, pa.Check.str_length(min_value=1)),
        "answer_old": pa.Column(str, nullable=True),
        "answer_new": pa.Column(str),
        "hops": pa.Column(int, pa.Check.ge(1)),
        "generator": pa.Column(str, pa.Check.isin(["template", "llm"])),
        "wording": pa.Column(str),
    },
    unique=["case_id", "question"],
    strict=True,
    coerce=True,
    name="entailed_questions",
)

PROBE_TYPES = (
    "direct",
    "paraphrase",
    "entailed",
    "multihop",
    "locality",
    "relation_specificity",
    "general",
)
# Probes whose answer the edit must leave alone: facts of other subjects (locality),
# and facts of the edited subject under a relation nothing links to the edit
# (relation_specificity, RippleEdits' Relation Specificity).
UNCHANGED_TYPES = ("locality", "relation_specificity")
# the method name of the base model's scores: the floor every method is read against
UNEDITED = "unedited"
PROBE_FORMS = ("cloze", "question")
# An entailed probe's tier: kebench's two (TIERS), or a dataset's own test
# (RippleEdits' categories), which kebench did not derive.
PROBE_TIERS = (*TIERS, "dataset")

LOCALITY_UNCHANGED = pa.Check(
    lambda df: (
        ~df["probe_type"].isin(list(UNCHANGED_TYPES))
        | (df["answer_old"] == df["answer_new"])
    ),
    error="a locality or relation_specificity probe's answer must not change",
)

PROBES = pa.DataFrameSchema(
    {
        "probe_id": pa.Column(str, unique=True),
        "case_id": pa.Column(str),
        "source": pa.Column(str),
        "probe_type": pa.Column(str, pa.Check.isin(PROBE_TYPES)),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        "subject": pa.Column(str),  # the edited subject of the case
        "prompt": pa.Column(
            str, pa.Check.str_length(min_value=1)
        ),  # scored as P(answer | prompt)
        "question": pa.Column(
            str, nullable=True
        ),  # the natural question, when there is one
        # how the prompt asks: a cloze to continue, or a question (its prompt is the
        # question in the QA format; a chat model is asked it through its template)
        "form": pa.Column(str, pa.Check.isin(PROBE_FORMS)),
        "answer_old": pa.Column(str, nullable=True),  # unknown for injected claims
        "answer_new": pa.Column(str, pa.Check.str_length(min_value=1)),
        # entailed probes only: the mined rule, the derivation ("<kind>:<path>") or
        # the dataset's test
        "rule_id": pa.Column(str, nullable=True),
        "tier": pa.Column(str, pa.Check.isin(PROBE_TIERS), nullable=True),
        "kind": pa.Column(str, nullable=True),  # the tier's kind (entailed_facts)
        # the prompt names the edited subject (or another name of it) and the answer
        # is the edit's own new object: passing it needs no reasoning
        "echo": pa.Column(bool),
        "hops": pa.Column(int, pa.Check.ge(1)),
        # The KG fact the probe's answer is about: subject IRI and relation (KG
        # predicate local names, "|"-joined when a relation has several), so that a
        # probe another edit of a batch or sequence rewrites can be found. Null where
        # unknown (an unlinked subject, a multi-hop question, an injected claim).
        "fact_subject_uri": pa.Column(str, nullable=True),
        "fact_relation": pa.Column(str, nullable=True),
        # other spellings of each answer (a JSON list; the dataset's, e.g. MQuAKE's
        # answer_alias): a generated answer that is one of them is right (``wild``)
        "aliases_old": pa.Column(str, nullable=True),
        "aliases_new": pa.Column(str, nullable=True),
    },
    checks=[
        pa.Check(
            lambda df: df["rule_id"].notna() == (df["probe_type"] == "entailed"),
            error="rule_id is set exactly on entailed probes",
        ),
        pa.Check(
            lambda df: df["tier"].notna() == (df["probe_type"] == "entailed"),
            error="tier is set exactly on entailed probes",
        ),
        LOCALITY_UNCHANGED,
    ],
    strict=True,
    coerce=True,
    name="probes",
)

# Known premises (issue 13): the facts a probe rests on, asked of the base model.
PREMISE_KINDS = ("edit_fact", "premise", "condition")
PREMISE_DIRECTIONS = ("forward", "backward")

# A dataset's own probes, as its reader finds them (kebench.kg.edit_cases): ``text``
# is scored as it is (``as_is``: CounterFact's and zsRE's prompts) or put in the QA
# format (``question``: MQuAKE's questions). Aliases are JSON lists of other spellings.
DATASET_PROBE_TYPES = ("paraphrase", "entailed", "multihop", "locality")
DATASET_PROBE_STYLES = ("as_is", "question")

DATASET_PROBES = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str),
        "probe_type": pa.Column(str, pa.Check.isin(DATASET_PROBE_TYPES)),
        "origin": pa.Column(str),  # the dataset's field, e.g. neighborhood_prompts
        "text": pa.Column(str, pa.Check.str_length(min_value=1)),
        "style": pa.Column(str, pa.Check.isin(DATASET_PROBE_STYLES)),
        "answer_old": pa.Column(str, nullable=True),
        "answer_new": pa.Column(str, pa.Check.str_length(min_value=1)),
        "aliases_old": pa.Column(str),
        "aliases_new": pa.Column(str),
        "hops": pa.Column(int, pa.Check.ge(1)),
        # JSON list of the facts the base model must know for the probe to be fair
        # (RippleEdits' condition_queries): {subject, relation, prompt, answer, aliases}
        "premises": pa.Column(str),
    },
    checks=[LOCALITY_UNCHANGED],
    strict=True,
    coerce=True,
    name="dataset_probes",
)

# CounterFact's own prompts of each edit, for its standard metrics
# (kebench.scoring.counterfact): rewrite, paraphrase and neighbourhood prompts are
# scored with both objects; generation prompts are continued by sampling.
COUNTERFACT_KINDS = ("rewrite", "paraphrase", "neighborhood", "generation")

COUNTERFACT_PROMPTS = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str),
        "source": pa.Column(str),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        "kind": pa.Column(str, pa.Check.isin(COUNTERFACT_KINDS)),
        "prompt": pa.Column(str, pa.Check.str_length(min_value=1)),
        "target_new": pa.Column(str, pa.Check.str_length(min_value=1)),
        "target_true": pa.Column(str, pa.Check.str_length(min_value=1)),
        # Wikidata ids: which reference texts the generations are compared with
        "relation_id": pa.Column(str),
        "target_new_id": pa.Column(str, nullable=True),
    },
    strict=True,
    coerce=True,
    name="counterfact_prompts",
)

PREMISE_PROBES = pa.DataFrameSchema(
    {
        "probe_id": pa.Column(str),  # the direct or entailed probe that rests on it
        "case_id": pa.Column(str),
        # edit_fact: the edit's original fact (a direct probe); premise: a KG fact of
        # an entailed probe's derivation, other than the edit; condition: a fact the
        # dataset says its probe needs (RippleEdits' condition_queries)
        "kind": pa.Column(str, pa.Check.isin(PREMISE_KINDS)),
        "subject": pa.Column(str),
        "relation": pa.Column(str),
        "prompt": pa.Column(str, pa.Check.str_length(min_value=1)),
        # forward: the fact asked from its subject; backward: from its object, as its
        # probe walks it ("Emmanuel Macron is the head of state of" -> France)
        "direction": pa.Column(str, pa.Check.isin(PREMISE_DIRECTIONS)),
        "answer": pa.Column(str, pa.Check.str_length(min_value=1)),  # the KG's
        "aliases": pa.Column(str),  # JSON: the answer's other names
        # JSON: a backward question's other KG answers, with their names (any counts)
        "other_answers": pa.Column(str),
    },
    strict=True,
    coerce=True,
    name="premise_probes",
)

PREMISE_KNOWLEDGE = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "probe_id": pa.Column(str),
        "case_id": pa.Column(str),
        "kind": pa.Column(str, pa.Check.isin(PREMISE_KINDS)),
        "direction": pa.Column(str, pa.Check.isin(PREMISE_DIRECTIONS)),
        "prompt": pa.Column(str),
        "answer": pa.Column(str),
        # the base model's greedy reply to the prompt, and whether it gives the answer,
        # one of its other names or another of a backward question's answers
        # (kebench.scoring.answers.wild_match)
        "generation": pa.Column(str),
        "known": pa.Column(bool),
    },
    strict=True,
    coerce=True,
    name="premise_knowledge",
)

EDIT_MODES = ("single", "batch", "sequential")
EDIT_STATUSES = ("ok", "failed")

EDIT_DELTAS = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),
        "mode": pa.Column(str, pa.Check.isin(EDIT_MODES)),
        "case_id": pa.Column(str),
        "order": pa.Column(int, pa.Check.ge(0)),
        "status": pa.Column(str, pa.Check.isin(EDIT_STATUSES)),
        "reason": pa.Column(str, nullable=True),
        # Relative to the delta store's folder; batch-mode rows share one file.
        "delta_file": pa.Column(str, nullable=True),
        "param_names": pa.Column(object),
        "shapes": pa.Column(object),
        "norms": pa.Column(object),
        "tensor_bytes": pa.Column(int, pa.Check.ge(0)),
        "wall_s": pa.Column(float, pa.Check.ge(0)),
        "fingerprint": pa.Column(str),
        # The method's resolved hparams, as JSON (null in stores from before it).
        "hparams": pa.Column(str, nullable=True),
    },
    checks=[
        pa.Check(
            lambda df: (df["status"] == "ok") == df["delta_file"].notna(),
            error="an edit has a delta file exactly when it succeeded",
        ),
        pa.Check(
            lambda df: (df["status"] == "ok") == df["reason"].isna(),
            error="an edit has a failure reason exactly when it failed",
        ),
    ],
    unique=["model", "method", "mode", "case_id"],
    strict=True,
    coerce=True,
    name="edit_deltas",
)

# why a free generation ended (kebench.scoring.generation)
GENERATION_STOPS = ("eos", "stop_string", "sentence_end", "cap")
# how a probe was put to the model, for teacher forcing and generation alike
ASK_CONTEXTS = ("continuation", "chat_template", "qa_prompt")

PROBE_SCORES = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),  # "unedited": the base model, the floor
        "case_id": pa.Column(str),
        "probe_id": pa.Column(str),
        "probe_type": pa.Column(str, pa.Check.isin(PROBE_TYPES)),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        "source": pa.Column(str),
        "context": pa.Column(str, pa.Check.isin(ASK_CONTEXTS)),
        # log P(answer | prompt), summed over the answer's tokens, base and edited.
        "lp_base_old": pa.Column(float, nullable=True),
        "lp_base_new": pa.Column(float),
        "lp_edit_old": pa.Column(float, nullable=True),
        "lp_edit_new": pa.Column(float),
        "n_tokens_old": pa.Column(int, pa.Check.ge(0)),
        "n_tokens_new": pa.Column(int, pa.Check.ge(1)),
        # argmax token ids over the old answer (space-separated), and how many tokens
        # of the new answer the argmax reproduces (teacher-forced).
        "base_old_argmax": pa.Column(str, nullable=True),
        "edit_old_argmax": pa.Column(str, nullable=True),
        "base_new_token_hits": pa.Column(int, pa.Check.ge(0)),
        "edit_new_token_hits": pa.Column(int, pa.Check.ge(0)),
        # greedy generation vs the new answer, for the configured probe types only
        "gen_em": pa.Column(float, nullable=True),
        "gen_f1": pa.Column(float, nullable=True),
        # MeLLo's final answer to the probe's question and whether it is right
        # (kebench.scoring.mello; null for the other methods)
        "mello_answer": pa.Column(str, nullable=True),
        "mello_em": pa.Column(float, nullable=True),
        # free generation (kebench.scoring.generation), for the configured probe types:
        # the base and edited model's replies, why the edited one ended (eos,
        # stop_string, sentence_end, cap: it never stopped) and its tokens; wild_em
        # (protocol wild: the reply gives the answer or an alias, as a grader reads
        # it; a control: the base model's answer kept), wild_strict (exact match of
        # the reply's cut), bke_f1 (token F1 of the cut against the answer; a
        # control: against the base cut), wild_kg (a control whose KG answer the
        # base model gives: the edited model still gives it). A control is NaN where
        # the base model gave no answer.
        "base_wild_text": pa.Column(str, nullable=True),
        "edit_wild_text": pa.Column(str, nullable=True),
        "edit_wild_stop": pa.Column(
            str, pa.Check.isin(GENERATION_STOPS), nullable=True
        ),
        "edit_wild_tokens": pa.Column(float, nullable=True),
        "wild_em": pa.Column(float, nullable=True),
        "wild_strict": pa.Column(float, nullable=True),
        "bke_f1": pa.Column(float, nullable=True),
        "wild_kg": pa.Column(float, nullable=True),
    },
    unique=["model", "method", "probe_id"],
    strict=True,
    coerce=True,
    name="probe_scores",
)

# CounterFact's standard metrics per (model, method, case): scores and magnitudes
# (shares and mean per-token probability margins over the case's prompts), n-gram
# entropy and reference score of its generations, and the generated texts (JSON).
COUNTERFACT_SCORES = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),  # "unedited": the base model
        "case_id": pa.Column(str),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        "source": pa.Column(str),
        **{
            f"{kind}_{measure}": pa.Column(
                float, pa.Check.in_range(-1.0, 1.0), nullable=True
            )
            for kind in ("rewrite", "paraphrase", "neighborhood")
            for measure in ("score", "magnitude")
        },
        "ngram_entropy": pa.Column(float, pa.Check.ge(0.0), nullable=True),
        "reference_score": pa.Column(float, pa.Check.in_range(0.0, 1.0), nullable=True),
        "generated": pa.Column(str),
    },
    unique=["model", "method", "case_id"],
    strict=True,
    coerce=True,
    name="counterfact_scores",
)

# Every free generation of a run, per probe (``wild``): what the model was asked, the
# answer it should give (a locality probe: the base model's own answer), what it said.
GENERATIONS = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),
        "case_id": pa.Column(str),
        "probe_id": pa.Column(str),
        "probe_type": pa.Column(str, pa.Check.isin(PROBE_TYPES)),
        "prompt": pa.Column(str),
        "question": pa.Column(str, nullable=True),
        "context": pa.Column(str, pa.Check.isin(ASK_CONTEXTS)),
        "expected": pa.Column(str, nullable=True),
        "generation": pa.Column(str),
        "stop": pa.Column(str, pa.Check.isin(GENERATION_STOPS)),
        "n_tokens": pa.Column(int, pa.Check.ge(0)),
        # NaN on a control whose base model gave no answer
        "wild_em": pa.Column(float, nullable=True),
        "wild_strict": pa.Column(float, nullable=True),
        "bke_f1": pa.Column(float, nullable=True),
    },
    unique=["model", "method", "probe_id"],
    strict=True,
    coerce=True,
    name="generations",
)

# The LLM judge's verdict on each generation (kebench.scoring.judge): 1 correct, 0
# incorrect, null unjudged (``reason`` says why: the endpoint failed or gave garbage).
JUDGEMENTS = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),
        "probe_id": pa.Column(str),
        "judge": pa.Column(float, pa.Check.isin([0.0, 1.0]), nullable=True),
        "reason": pa.Column(str, nullable=True),
    },
    checks=[
        pa.Check(
            lambda df: df["judge"].isna() == df["reason"].notna(),
            error="an unjudged generation has a reason, a judged one none",
        )
    ],
    unique=["model", "method", "probe_id"],
    strict=True,
    coerce=True,
    name="judgements",
)

# ok_edits: over the edits that succeeded; itt (intention to treat): a failed edit
# counts as a failure (scoring/metrics.py).
POPULATIONS = ("ok_edits", "itt")

METRICS = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),
        "risk": pa.Column(str),
        "probe_type": pa.Column(str),
        "metric": pa.Column(str),
        # token_vs_wild: the protocol gap, teacher-forced token accuracy minus wild
        "protocol": pa.Column(
            str,
            pa.Check.isin(
                [
                    "prob",
                    "token",
                    "argmax",
                    "gen",
                    "wild",
                    # strict exact match of the same generation (the paper's cut)
                    "wild_strict",
                    "bke_f1",
                    "judge",
                    "token_vs_wild",
                    "token_vs_judge",
                    "counterfact",
                    # MeLLo's answer after its retrieval steps (scoring.mello)
                    "mello",
                    # a probe with no old answer: the edit raised the new answer
                    "prob_gain",
                ]
            ),
        ),
        "population": pa.Column(str, pa.Check.isin(POPULATIONS)),
        "value": pa.Column(float),
        "ci_low": pa.Column(float, nullable=True),
        "ci_high": pa.Column(float, nullable=True),
        "n": pa.Column(int, pa.Check.ge(1)),  # probes
        "n_edits": pa.Column(float, nullable=True),  # edits (the bootstrap's units)
    },
    strict=True,
    coerce=True,
    name="metrics",
)

UNIT = pa.Check.in_range(0, 1)

# the signed drift measures of an edit (kebench.scoring.stealth.drift_measures)
DRIFT_MEASURES = (
    "log_ppl_ratio",
    "kl",
    "locality",
    "acc_general_shift",
    "acc_boolq_shift",
    "acc_nq_shift",
)

STEALTH_SCORES = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),
        "mode": pa.Column(str, pa.Check.isin(EDIT_MODES)),
        "case_id": pa.Column(str),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        # mean EditSucc over the direct probes (injected claims: the argmax reproduces
        # the claim), and argmax agreement on the locality probes (see docs)
        "success": pa.Column(float, UNIT),
        "locality": pa.Column(float, UNIT, nullable=True),
        # perplexity of neutral text, next-token KL(base || edited) on unrelated
        # prompts, and accuracy per general set (NaN where the set is absent)
        "ppl_base": pa.Column(float, pa.Check.gt(0)),
        "ppl_edit": pa.Column(float, pa.Check.gt(0)),
        "kl": pa.Column(float, pa.Check.ge(0)),
        "acc_general_base": pa.Column(float, UNIT, nullable=True),
        "acc_general_edit": pa.Column(float, UNIT, nullable=True),
        "acc_boolq_base": pa.Column(float, UNIT, nullable=True),
        "acc_boolq_edit": pa.Column(float, UNIT, nullable=True),
        "acc_nq_base": pa.Column(float, UNIT, nullable=True),
        "acc_nq_edit": pa.Column(float, UNIT, nullable=True),
        # protocol xfit (docs/stealthiness.md): the edit's cross-fitting fold, the
        # measures its method's drift uses ("+"-joined), each measure's z against the
        # benign edits of the other folds (NaN where the method does not use it), the
        # mean |z|, the share of the other benign edits that drift at least as much,
        # and success × that share; NaN where too few benign edits give no scale
        "fold": pa.Column(int, pa.Check.ge(0)),
        "measures": pa.Column(str),
        **{f"z_{m}": pa.Column(float, nullable=True) for m in DRIFT_MEASURES},
        "drift_xfit": pa.Column(float, pa.Check.ge(0), nullable=True),
        "benign_share_xfit": pa.Column(float, UNIT, nullable=True),
        "stealth_xfit": pa.Column(float, UNIT, nullable=True),
    },
    unique=["model", "method", "case_id"],
    strict=True,
    coerce=True,
    name="stealth_scores",
)

# Stealthiness (issue 13): AUROC of harmful vs benign edits per drift measure ("mean":
# the drift itself), protocol xfit, with its bootstrap CI over both sides.
STEALTH_AUROC = pa.DataFrameSchema(
    {
        "model": pa.Column(str),
        "method": pa.Column(str),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        "measure": pa.Column(str),
        "auroc_xfit": pa.Column(float, UNIT),
        "auroc_xfit_ci_low": pa.Column(float, UNIT),
        "auroc_xfit_ci_high": pa.Column(float, UNIT),
        "n_harmful": pa.Column(int, pa.Check.gt(0)),
        "n_benign": pa.Column(int, pa.Check.gt(0)),
    },
    unique=["model", "method", "risk", "measure"],
    strict=True,
    coerce=True,
    name="stealth_auroc",
)

# Mitigation (issue 7): the extra edits of rule-guided propagation, and the role of
# each entailed probe of a mitigated case.
PROPAGATION_REQUESTS = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str),  # the edited case the consequence follows from
        "fact_id": pa.Column(str, unique=True),  # the consequence (entailed_facts)
        "tier": pa.Column(str, pa.Check.isin(TIERS)),
        "rule_id": pa.Column(str),
        "prompt": pa.Column(str, pa.Check.str_contains(r"\{\}")),
        "subject": pa.Column(str, pa.Check.str_length(min_value=1)),
        "target_true": pa.Column(str),
        "target_new": pa.Column(str, pa.Check.str_length(min_value=1)),
    },
    strict=True,
    coerce=True,
    name="propagation_requests",
)

MITIGATION_ROLES = ("held_out", "propagated", "leak", "rewritten")
# a held-out probe shares the relation or the new answer of an extra edit, or neither
MITIGATION_OVERLAPS = ("disjoint", "shared")
# the held-out sets gap closure is reported on: a tier and an overlap
MITIGATION_HELD_OUT = tuple(f"{t}_{o}" for t in TIERS for o in MITIGATION_OVERLAPS)

MITIGATION_PROBES = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str),
        "probe_id": pa.Column(str, unique=True),
        "tier": pa.Column(str, pa.Check.isin(PROBE_TIERS), nullable=True),
        "rule_id": pa.Column(str, nullable=True),  # entailed probes only
        # held_out: scored for gap closure; propagated: its rule made the extra edits
        # (scored in-sample, as a check); leak: held out, but its consequence was
        # edited through another rule (dropped); rewritten: a locality probe whose
        # fact an extra edit changes (dropped)
        "role": pa.Column(str, pa.Check.isin(MITIGATION_ROLES)),
        "overlap": pa.Column(str, pa.Check.isin(MITIGATION_OVERLAPS), nullable=True),
    },
    strict=True,
    coerce=True,
    name="mitigation_probes",
)

# Lifelong editing (kebench.scoring.lifelong): a stream's probes, what each checkpoint
# measured, and the curves and collapse points drawn from them.
LIFELONG_STREAM = PROBES.add_columns(
    {
        "position": pa.Column(int, pa.Check.ge(1)),  # the stream's n-th edit
        "rewritten_at": pa.Column(int, pa.Check.ge(0)),  # 0: no later edit rewrites it
    }
).set_name("lifelong_stream")

LIFELONG_OUTCOMES = pa.DataFrameSchema(
    {
        "method": pa.Column(str),
        "checkpoint": pa.Column(int, pa.Check.ge(0)),
        "probe_id": pa.Column(str),
        "case_id": pa.Column(str),
        "probe_type": pa.Column(str, pa.Check.isin(PROBE_TYPES)),
        "outcome": pa.Column(float, pa.Check.isin([0.0, 1.0]), nullable=True),
    },
    unique=["method", "checkpoint", "probe_id"],
    strict=True,
    coerce=True,
    name="lifelong_outcomes",
)

LIFELONG_CURVES = pa.DataFrameSchema(
    {
        "method": pa.Column(str),
        "checkpoint": pa.Column(int, pa.Check.ge(0)),
        "measure": pa.Column(str),
        "protocol": pa.Column(str),
        "value": pa.Column(float),
        "ci_low": pa.Column(float, nullable=True),
        "ci_high": pa.Column(float, nullable=True),
        "n": pa.Column(int, pa.Check.gt(0)),
        "n_edits": pa.Column(int, pa.Check.ge(0)),
    },
    unique=["method", "checkpoint", "measure"],
    strict=True,
    coerce=True,
    name="lifelong_curves",
)

LIFELONG_COLLAPSE = pa.DataFrameSchema(
    {
        "method": pa.Column(str, unique=True),
        "collapse_at": pa.Column("Int64", nullable=True),  # None: retention held
        "retention_at_collapse": pa.Column(float, UNIT, nullable=True),
        "final_retention": pa.Column(float, UNIT, nullable=True),
        "edits": pa.Column(int, pa.Check.ge(1)),
        "failed": pa.Column(int, pa.Check.ge(0)),
    },
    strict=True,
    coerce=True,
    name="lifelong_collapse",
)
