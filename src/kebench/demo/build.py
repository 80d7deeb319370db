"""Build the demo data from ``kebench.demo.facts``: a KG of true facts (N-Triples)
and MQuAKE-style single-edit cases (JSON), deterministic (sorted triples, fixed case
order).

The edit cases are *derived* from the tables: each case gives only the edited
relation, subject, new object and the other hop of its 2-hop chain; old and new
answers, single hops and labelled triples are computed from the graph, so they cannot
drift apart from ``kg.nt``. Checks run as the data is built (every referenced entity
exists with the right type, labels are unique, capitals and largest cities lie in
their country, nobody is in two couples, every edit has single-valued hops and
really changes its answer); a failed check stops the build.

Rebuild with ``kebench build-demo`` (writes ``data/01_raw/demo``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from kebench.demo.facts import (
    ALIASES,
    ALMA_MATER,
    CITIES,
    COMPANIES,
    CONTINENTS,
    COUNTRIES,
    COUPLES,
    EDITS,
    LABELS,
    LANGUAGES,
    MULTI_HOP,
    ONT,
    PEOPLE,
    PID,
    QIDS,
    RDF_TYPE,
    RDFS_LABEL,
    REL_PROMPT,
    REL_QUESTION,
    RES,
    UNIVERSITIES,
)

_IRI_BAD = re.compile(r'[\x00-\x20<>"{}|^`\\]')


def iri(key: str, base: str = RES) -> str:
    """Full IRI for a resource key, percent-encoding characters illegal in IRIs."""
    enc = _IRI_BAD.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), key)
    return base + enc


def literal(text: str, lang: str = "en") -> str:
    """N-Triples language-tagged literal with the required escapes."""
    esc = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
    )
    return f'"{esc}"@{lang}'


def label_of(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))


def split(values: str, sep: str = "|") -> list[str]:
    return [v for v in (values.split(sep) if sep else values.split()) if v]


class KG:
    def __init__(self) -> None:
        self.types: dict[str, str] = {}
        self.facts: set[tuple[str, str, str]] = (
            set()
        )  # (subject key, dbo pred, object key)

    def entity(self, key: str, cls: str) -> None:
        old = self.types.setdefault(key, cls)
        assert old == cls, f"{key} typed both {old} and {cls}"

    def add(self, s: str, p: str, o: str) -> None:
        self.facts.add((s, p, o))

    def objects(self, s: str, preds: list[str]) -> list[str]:
        return sorted(o for (s2, p, o) in self.facts if s2 == s and p in preds)


def build_kg() -> KG:  # noqa: PLR0912 - one loop per fact table
    kg = KG()
    for c in CONTINENTS:
        kg.entity(c, "Continent")
    for lang in LANGUAGES:
        kg.entity(lang, "Language")

    city_country: dict[str, str] = {}
    for country, names in CITIES.items():
        assert country in COUNTRIES, country
        for city in split(names, sep=""):
            assert city not in city_country, f"duplicate city {city}"
            city_country[city] = country
            kg.entity(city, "City")
            kg.add(city, "country", country)

    def need(kind: str, key: str) -> str:
        assert key in kg.types and kg.types[key] == kind, f"unknown {kind}: {key}"
        return key

    for person in PEOPLE:
        kg.entity(person, "Person")

    for country, (caps, langs, conts, cur, big, hos) in COUNTRIES.items():
        kg.entity(country, "Country")
        for cap in split(caps):
            assert city_country.get(cap) == country, f"capital {cap} not in {country}"
            kg.add(country, "capital", cap)
        for lang in split(langs):
            kg.add(country, "officialLanguage", need("Language", lang))
        for cont in split(conts):
            kg.add(country, "continent", need("Continent", cont))
        kg.entity(cur, "Currency")
        kg.add(country, "currency", cur)
        if big:
            assert city_country.get(big) == country, (
                f"largest city {big} not in {country}"
            )
            kg.add(country, "largestCity", big)
        if hos:
            kg.add(country, "leader", need("Person", hos))

    for person, (birth, cits, death) in PEOPLE.items():
        if birth:
            kg.add(person, "birthPlace", need("City", birth))
        for cit in split(cits):
            kg.add(person, "citizenship", need("Country", cit))
        if death:
            kg.add(person, "deathPlace", need("City", death))

    married: set[str] = set()
    for a, b in COUPLES:
        for x in (a, b):
            need("Person", x)
            assert x not in married, f"{x} listed in two couples"
            married.add(x)
        kg.add(a, "spouse", b)
        kg.add(b, "spouse", a)

    for uni, country in UNIVERSITIES.items():
        kg.entity(uni, "University")
        kg.add(uni, "country", need("Country", country))
    for person, unis in ALMA_MATER.items():
        for uni in split(unis, sep=""):
            kg.add(need("Person", person), "almaMater", need("University", uni))

    for comp, (hq, founders, ceo) in COMPANIES.items():
        kg.entity(comp, "Company")
        kg.add(comp, "headquarter", need("City", hq))
        kg.add(comp, "locationCountry", city_country[hq])
        for f in split(founders):
            kg.add(comp, "foundedBy", need("Person", f))
        if ceo:
            kg.add(comp, "ceo", need("Person", ceo))

    labels = [label_of(k) for k in kg.types]
    dupes = {x for x in labels if labels.count(x) > 1}
    assert not dupes, f"duplicate labels: {dupes}"
    return kg


def write_nt(kg: KG, path: Path) -> int:
    lines = set()
    for key, cls in kg.types.items():
        lines.add(f"<{iri(key)}> <{RDF_TYPE}> <{ONT}{cls}> .")
        lines.add(f"<{iri(key)}> <{RDFS_LABEL}> {literal(label_of(key))} .")
    for s, p, o in kg.facts:
        lines.add(f"<{iri(s)}> <{ONT}{p}> <{iri(o)}> .")
    out = sorted(lines)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return len(out)


# --------------------------------------------------------------------------
# Edit cases
# --------------------------------------------------------------------------


def one(kg: KG, s: str, pid: str, override: dict | None = None) -> str:
    """The single object of (s, pid), optionally under an edit override."""
    if override and (s, pid) in override:
        return override[(s, pid)]
    objs = kg.objects(s, PID[pid][1])
    assert len(objs) == 1, f"({s}, {pid}) has {len(objs)} objects: {objs}"
    return objs[0]


def hop(pid: str, s: str, o: str) -> dict:
    subj = label_of(s)
    return {
        "question": REL_QUESTION[pid].format(subj),
        "cloze": REL_PROMPT[pid].format(subj),
        "answer": label_of(o),
    }


def build_cases(kg: KG) -> list[dict]:
    cases = []
    for n, (rel, subj, new, other, head) in enumerate(EDITS, start=1):
        old = one(kg, subj, rel)
        assert new != old and new in kg.types and kg.types[new] == kg.types[old], (
            subj,
            new,
        )
        assert new not in kg.objects(subj, PID[rel][1]), (
            f"{subj} {rel} {new} is already true"
        )
        edit = {(subj, rel): new}

        if head is None:
            rels, start = (rel, other), subj
        else:
            rels, start = (other, rel), head
            assert one(kg, head, other) == subj, (head, other, subj)

        def chain(override: dict | None) -> list[tuple[str, str, str]]:
            triples, cur = [], start
            for pid in rels:
                nxt = one(kg, cur, pid, override)
                triples.append((cur, pid, nxt))
                cur = nxt
            return triples

        orig, edited = chain(None), chain(edit)
        ans, new_ans = orig[-1][2], edited[-1][2]
        assert ans != new_ans, f"case {n}: edit does not change the answer"

        def labelled(triples):
            return [[label_of(s), PID[p][0], label_of(o)] for s, p, o in triples]

        cases.append(
            {
                "case_id": n,
                "requested_rewrite": [
                    {
                        "prompt": REL_PROMPT[rel],
                        "relation_id": rel,
                        "subject": label_of(subj),
                        "target_true": {"str": label_of(old), "id": QIDS.get(old)},
                        "target_new": {"str": label_of(new), "id": QIDS.get(new)},
                        "question": REL_QUESTION[rel].format(label_of(subj)),
                    }
                ],
                "questions": [q.format(label_of(start)) for q in MULTI_HOP[rels]],
                "answer": label_of(ans),
                "answer_alias": ALIASES.get(ans, []),
                "new_answer": label_of(new_ans),
                "new_answer_alias": ALIASES.get(new_ans, []),
                "single_hops": [hop(p, s, o) for s, p, o in orig],
                "new_single_hops": [hop(p, s, o) for s, p, o in edited],
                "orig": {
                    "triples_labeled": labelled(orig),
                    "new_triples_labeled": labelled(edited),
                    "edit_triples_labeled": labelled([(subj, rel, new)]),
                },
            }
        )
    return cases


def write_demo(folder: Path) -> dict[str, object]:
    """Write ``kg.nt`` and ``edit_cases.json`` into ``folder``; what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    kg = build_kg()
    n_triples = write_nt(kg, folder / "kg.nt")
    cases = build_cases(kg)
    (folder / "edit_cases.json").write_text(
        json.dumps(cases, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    by_type: dict[str, int] = defaultdict(int)
    for cls in kg.types.values():
        by_type[cls] += 1
    by_pred: dict[str, int] = defaultdict(int)
    for _, p, _ in kg.facts:
        by_pred[p] += 1
    by_rel: dict[str, int] = defaultdict(int)
    for rel, *_ in EDITS:
        by_rel[rel] += 1
    return {
        "triples": n_triples,
        "entities": dict(sorted(by_type.items())),
        "facts": dict(sorted(by_pred.items())),
        "cases": len(cases),
        "cases_by_relation": dict(by_rel),
    }
