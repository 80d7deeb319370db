"""Does a generated reply give the expected answer? One matcher for every free answer.

A reader grading "What is the capital of South Korea?" accepts "Seoul, South Korea",
"The capital of South Korea is Seoul." and "the city of Seoul", and rejects "Seoul or
Busan", "not Seoul", "Seoul Station" and "Busan, not far from Seoul". ``wild_match``
reads a reply the same way:

- **the reply**: what the model said up to its first line end (leading whitespace is
  no answer);
- **the answer leads it**: some occurrence of the answer, or of another name of it,
  whose words come before anything else the reply asserts. What may stand before it
  is a *frame*: filler ("the", "of course", "the city of", "located in"), a
  restatement of the question or of its subject ("Japan's official language is", "It
  is located in", "The city where Joe Biden was born is"), titles ("President",
  "King"), the generic words of an official name ("the Republic of") and adjectives
  ("the French region of"). A frame never holds a negation, a hedge ("or"), a word
  that moves the answer elsewhere ("near", "outside", "than"), a name that is not in
  the question (that is another answer given first), nor, for a named answer, a
  relative clause the answer ends ("a country that has been ruled by the United
  States").
- **and is not copied or something longer**: the occurrence is not inside a passage
  copied from the question ("a car with an African man and an Asian man" answers
  no "which of them drove?"), not part of a longer name ("New Mexico" for Mexico,
  "Paris Hilton" for Paris, "the University of Paris": a capitalised word joined to
  it), not a possessive modifier ("Obama's wife"), not negated right after ("Paris is
  not"), not one of several candidates ("Paris or London", "Paris and Lyon"). A
  qualifier or a clause may follow ("Seoul, South Korea", "Lagos, which is ...",
  "Harald V of Norway", "the Spanish language").

Names are compared as words after Unicode decomposition (accents dropped), lower
case, a plural or third-person "s" dropped ("whiten teeth" for "whitens teeth"),
"St." read as "Saint" (and "Mt.", "Ft."), "&" as "and", dotted initials joined
("U.S." is "US"), and a leading article optional. An answer with a qualifier
("Scranton, Pennsylvania") is also given by its first part ("Scranton"), and one that
opens with a word of the question's subject ("Mexican peso", asked about Mexico) by
the rest ("the peso"). An acronym answer ("UK", "USA") must be written in capitals,
so that "us" the pronoun is not the USA.

This is a hand-written reader, not a library: no maintained package grades short
answers this way (SQuAD's normalisation, which ``strict_match`` keeps, accepts the
bare answer only), and its rules are few enough to read. Its agreement with a
hand-labelled set of the demo's real generations is measured in
``tests/scoring/data/wild_labels.jsonl`` (docs/evaluation.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kebench.scoring.metrics import exact_match

# the shortest word whose final "s" is dropped ("its", "has" and "was" keep theirs)
MIN_STEMMED = 4
# a word of the answer and one of the question's subject share this many letters at
# least when the answer's word is derived from it ("mexican", "mexico")
SHARED_STEM = 4


def stem(word: str) -> str:
    """A lower-case word without a plural or third-person "s" ("states", "whitens")."""
    if len(word) >= MIN_STEMMED and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _stems(text: str) -> frozenset[str]:
    return frozenset(stem(word) for word in text.split())


# Words a frame may hold whatever the question: articles, pronouns, auxiliaries,
# prepositions and the nouns and verbs replies restate questions with.
COMMON_WORDS = _stems(
    """
    a an the this that these those it its he she his her him they them their
    there here i we you my our your one ones
    is are was were be been being am has have had do does did will would shall
    should can could may might must
    of in on at to for from by with as into onto about within upon over under
    and but so then also just only still now currently today presently
    answer answers reply correct true yes well sure course indeed actually likely
    probably perhaps maybe possibly
    called named known titled
    located situated based found lies lie lying placed positioned
    born died lived lives grew raised
    married wed wife husband spouse partner
    city town capital country nation state republic kingdom place region area
    province county village language languages tongue official national main
    primary largest biggest home headquarters headquartered seat centre center heart
    continent currency citizen citizens citizenship nationality
    head leader leads led president chief executive officer ceo founder founded
    part member belongs belong race ethnicity man woman person people
    spoken speak speaks used
    """
)
# Nouns an adjective before them modifies, so that "the French region of France" and
# "the Italian city of Rome" hold no other name.
MODIFIED_NOUNS = _stems(
    """
    city town capital country nation state region area province county village
    language people man woman person government president king queen prince monarch
    politician leader company automaker firm
    """
)
# Generic words of an official name, which may stand capitalised before the name:
# "the Republic of Ireland", "the Kingdom of Spain", "the State of Israel".
NAME_DESCRIPTORS = _stems(
    """
    republic kingdom state states commonwealth federation federal democratic
    people peoples islamic union united city town county province region empire
    principality duchy grand emirate sultanate island islands free
    """
)
# Titles that may stand before a person's name: "President Emmanuel Macron".
TITLES = _stems(
    """
    president king queen prince princess emperor empress pope sir dame lord lady
    dr doctor prof professor chancellor minister prime premier general gen
    mr mrs ms mister madam monsieur senator governor mayor chairman ceo
    his her majesty highness royal crown
    """
)
NEGATIONS = _stems("not no never neither nor none nobody")
# words that put the answer beside another candidate ("probably Paris" is still an
# answer; "Paris or London" is not)
HEDGES = _stems("or either whether vs versus")
# what a reply may call its answer right after it: "Paris is wrong"
REFUTATIONS = _stems("not no never incorrect wrong false untrue mistaken")
# words after which the answer is not the thing asked about but a reference point
# or an agent ("near Paris", "a country ruled by the United Kingdom")
DISPLACERS = _stems(
    """
    near nearby outside beyond than instead rather except besides beside unlike
    between among around close next adjacent suburb suburbs outskirts north south
    east west northern southern eastern western neighbouring neighboring bordering
    borders formerly former previously once until before after
    ruled governed colonised colonized occupied owned controlled administered
    annexed conquered invaded surrounded influenced inspired
    """
)
AUXILIARIES = _stems(
    "is are was were does do did has have had will would can could should may might "
    "must"
)
COPULAS = _stems("is are was were")
RELATIVES = _stems("that which who whom whose where")
# what may stand between a relative clause's copula and the answer: "The city where
# he was born is (located in) (the city of) Scranton"
AFTER_COPULA = _stems(
    "the a an located situated based in of on at city town country capital called "
    "named known as also currently now still the"
)
# read as the full word they abbreviate
ABBREVIATIONS = {"st": "saint", "mt": "mount", "ft": "fort", "&": "and"}
# short forms whose full stop ends no sentence ("Dr. Martin Luther King")
SHORT_FORMS = frozenset(
    "st mt ft dr mr mrs ms prof jr sr gen gov sen inc ltd co corp".split()
)
ARTICLES = ("the", "a", "an")
# a language's name, said without the word: "English" for "English language"
LANGUAGE = stem("language")
# a clause begins: a reply's leading answer ends before these (``answer_span``)
CLAUSE_WORDS = _stems(
    """
    is are was were has have had which who whom whose where when that and or but
    with since because although though while in
    """
)
SENTENCE_MARKS = frozenset(".!?;")
# words that open a clause of its own after an answer (``_hedged``)
CLAUSE_OPENERS = _stems("which who whom whose where when while but because since")
_TOKEN = re.compile(r"'s\b|[^\W_]+|[^\w\s'\-]", re.UNICODE)
_INITIALS = re.compile(r"\b(?:[^\W\d_]\.){2,}", re.UNICODE)


@dataclass(frozen=True)
class Token:
    """One word or mark of a text: its normal form, whether it is a word, a mark
    (punctuation) or a possessive "'s", and how it was written."""

    norm: str
    kind: str  # word | mark | possessive
    capitalised: bool = False
    upper: bool = False


def _fold(text: str) -> str:
    """Accents dropped (Unicode decomposition), curly quotes straightened."""
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def tokens(text: str) -> list[Token]:
    """The words and marks of ``text`` in order (``Token``); "n't" is a "not", "&"
    an "and"."""
    folded = _fold(text).replace("n't", " not")
    folded = _INITIALS.sub(lambda m: m.group(0).replace(".", "") + " ", folded)
    out = []
    previous = ""
    for match in _TOKEN.finditer(folded):
        piece, before = match.group(0), previous
        previous = piece
        if piece == "." and before.lower() in SHORT_FORMS:
            continue
        if piece.lower() == "'s":
            out.append(Token("'s", "possessive"))
        elif piece[0].isalnum():
            norm = stem(ABBREVIATIONS.get(piece.lower(), piece.lower()))
            upper = piece.isupper() and len(piece) > 1
            out.append(Token(norm, "word", piece[0].isupper(), upper))
        elif piece == "&":
            out.append(Token("and", "word"))
        else:
            out.append(Token(piece, "mark"))
    return out


def reply_of(text: str) -> str:
    """A generation's reply: from its first non-space character to its first line end."""
    return text.lstrip().split("\n", 1)[0].strip()


def _words(text: str | None) -> list[str]:
    return [t.norm for t in tokens(text or "") if t.kind == "word"]


@dataclass(frozen=True)
class _Name:
    """An answer's words, and whether it is an acronym (to be written in capitals)."""

    words: tuple[str, ...]
    acronym: bool


def _forms(text: str, context: frozenset[str]) -> Iterable[tuple[str, ...]]:
    """The word sequences that give the answer ``text``: itself, without a leading
    article or a closing "language" ("English language"), its first part before a
    qualifier ("Scranton, Pennsylvania"), and without an opening word derived from
    the question ("Mexican peso")."""
    words = tuple(_words(text))
    yield words
    if words[:1] and words[0] in ARTICLES:
        words = words[1:]
        yield words
    if len(words) > 1 and words[-1] == LANGUAGE:
        yield words[:-1]
    if "," in text:
        yield tuple(_words(text.split(",", 1)[0]))
    if len(words) > 1 and any(
        len(c) >= SHARED_STEM and words[0][:SHARED_STEM] == c[:SHARED_STEM]
        for c in context
    ):
        yield words[1:]


def _names(answer: str, aliases: Iterable[str], context: frozenset[str]) -> list[_Name]:
    """Every name to look for, the answer's and its aliases' (``_forms``), longest
    first."""
    names: dict[tuple[str, ...], bool] = {}
    for text in (answer, *aliases):
        if not isinstance(text, str):
            continue
        acronym = bool(re.fullmatch(r"[A-Z]{2,5}", text.replace(".", "").strip()))
        for form in _forms(text, context):
            if form and not all(w in ARTICLES for w in form):
                names[form] = names.get(form, True) and acronym
    return [
        _Name(words, acronym)
        for words, acronym in sorted(names.items(), key=lambda kv: -len(kv[0]))
    ]


def _occurrences(reply: list[Token], name: _Name) -> Iterable[tuple[int, int]]:
    """(start, end) token spans of ``reply`` that spell ``name``'s words in order,
    marks between them allowed (``"Washington, D.C."``)."""
    for start, token in enumerate(reply):
        if token.kind != "word" or token.norm != name.words[0]:
            continue
        index, matched = start, 0
        while index < len(reply) and matched < len(name.words):
            current = reply[index]
            if current.kind == "word":
                if current.norm != name.words[matched]:
                    break
                if name.acronym and not current.upper:
                    break
                matched += 1
            elif current.kind == "possessive":
                break
            index += 1
        if matched == len(name.words):
            yield start, index


def _names_another(frame: list[Token], index: int, context: frozenset[str]) -> bool:
    """Whether ``frame[index]`` names something the question does not: a capitalised
    word that is neither a common, title or descriptor word nor a word of the
    question (or of the answer), nor an adjective before a common noun ("the French
    region"), nor a possessive that restates the subject ("France's capital")."""
    token = frame[index]
    if not token.capitalised or token.norm in context:
        return False
    if token.norm in COMMON_WORDS | TITLES | NAME_DESCRIPTORS:
        return False
    following = frame[index + 1] if index + 1 < len(frame) else None
    if following is not None and following.kind == "possessive":
        return False
    return not (
        following is not None
        and following.kind == "word"
        and not following.capitalised
        and following.norm in MODIFIED_NOUNS
    )


def _ends_sentence(tokens: list[Token], index: int) -> bool:
    """Whether the mark at ``index`` ends a sentence: "!", "?" or ";", or a full
    stop before a capitalised word ("Berlin. Paris"; "Apple Inc. are" goes on)."""
    mark = tokens[index]
    if mark.norm != ".":
        return mark.norm in SENTENCE_MARKS
    following = tokens[index + 1] if index + 1 < len(tokens) else None
    return following is None or following.capitalised


def _frame_holds(frame: list[Token], context: frozenset[str], named: bool) -> bool:
    """Whether the tokens before an occurrence are a frame (module docstring);
    ``named``: whether the answer is a name, which a relative clause in the frame
    may not end ("a natural remedy that helps whiten teeth" gives a description)."""
    for index, token in enumerate(frame):
        if token.kind == "mark" and _ends_sentence(frame, index):
            return False  # a sentence said before the answer
        if token.kind != "word":
            continue
        if token.norm in NEGATIONS or token.norm in HEDGES:
            return False
        # "north of Paris" is elsewhere; "the north of Italy" is Italy
        inside = index > 0 and frame[index - 1].norm == "the"
        if token.norm in DISPLACERS and token.norm not in context and not inside:
            return False
        if _names_another(frame, index, context):
            return False
    return not named or _closes_relative_clause(frame)


def _closes_relative_clause(frame: list[Token]) -> bool:
    """Whether a frame with a relative clause gives the answer as its main clause's
    complement: a copula after the last relative pronoun, and only fillers after it
    ("The city where he was born is located in"), not a clause the answer ends ("a
    country that has been ruled by the")."""
    words = [t.norm for t in frame if t.kind == "word"]
    relatives = [i for i, w in enumerate(words) if w in RELATIVES]
    if not relatives:
        return True
    after = words[relatives[-1] + 1 :]
    copulas = [i for i, w in enumerate(after) if w in COPULAS]
    return bool(copulas) and all(w in AFTER_COPULA for w in after[copulas[-1] + 1 :])


def _longer_name_before(reply: list[Token], start: int, name: _Name) -> bool:
    """Whether the occurrence at ``start`` ends a longer name: a capitalised word, or
    "<Capitalised> of", right before it ("New Mexico", "the University of Paris"),
    titles, common words, the generic words of official names and the name itself
    said twice ("Dublin Dublin") aside."""
    joined = reply[start - 1] if start else None
    if joined is not None and joined.norm == "of":
        joined = reply[start - 2] if start > 1 else None
    return (
        joined is not None
        and joined.kind == "word"
        and joined.capitalised
        and joined.norm not in TITLES | NAME_DESCRIPTORS | COMMON_WORDS
        and joined.norm != name.words[-1]
    )


def _ends_cleanly(reply: list[Token], end: int, name: _Name) -> bool:
    """Whether what follows an occurrence leaves it the answer: no longer name (the
    name said again, "Shakira Shakira", is none), no possessive, no negation of it,
    no other candidate beside it."""
    rest = reply[end : end + 4]
    if not rest:
        return True
    first, norms = rest[0], [t.norm for t in rest]
    # "Paris, or", "Paris, and Lyon": a comma does not part the candidates
    after_comma = rest[1:] if first.norm == "," else rest
    joined = after_comma[1] if len(after_comma) > 1 else None
    spoiled = (
        first.kind == "possessive"
        # "Paris Hilton", "Mexico City"
        or (
            first.kind == "word"
            and first.capitalised
            and first.norm not in TITLES
            and first.norm != name.words[0]
        )
        or first.norm in {"/", "-"}
        # "Paris is not", "Paris isn't", "Paris is wrong", "Paris? No"
        or norms[0] in NEGATIONS
        or (len(norms) > 1 and norms[0] in AUXILIARIES and norms[1] in REFUTATIONS)
        or (first.norm in {"?", "."} and len(norms) > 1 and norms[1] in NEGATIONS)
        # "Paris or London", "Paris, Lyon or Nice", "Paris and Lyon"
        or _hedged(reply[end:])
        or (
            bool(after_comma)
            and after_comma[0].norm == "and"
            and joined is not None
            and joined.kind == "word"
            and joined.capitalised
        )
    )
    return not spoiled


def _hedged(rest: list[Token]) -> bool:
    """Whether the clause after an occurrence offers another candidate: a hedge word
    ("or", "vs") before the clause ends (a sentence mark, or a relative or
    subordinate clause: "Lagos, which ... or ..." is not a hedge)."""
    for token in rest:
        if token.kind == "mark" and token.norm in SENTENCE_MARKS:
            return False
        if token.kind == "word" and token.norm in CLAUSE_OPENERS:
            return False
        if token.kind == "word" and token.norm in HEDGES:
            return True
    return False


# how many words on each side of an occurrence decide whether it is copied from the
# question, and how many of them it takes
ECHO_WINDOW, ECHO_WORDS = 3, 3


def _copies_question(
    reply: list[Token], start: int, end: int, question: list[str]
) -> bool:
    """Whether the occurrence at ``reply[start:end]`` sits in a passage copied from
    the question: its name with the words around it, at least ``ECHO_WORDS`` of
    them, appears in the question as it is."""
    before = [t.norm for t in reply[:start] if t.kind == "word"][-ECHO_WINDOW:]
    after = [t.norm for t in reply[end:] if t.kind == "word"][:ECHO_WINDOW]
    if len(before) + len(after) < ECHO_WORDS:
        return False
    window = before + [t.norm for t in reply[start:end] if t.kind == "word"] + after
    width = len(window)
    return any(
        question[i : i + width] == window for i in range(len(question) - width + 1)
    )


def wild_match(
    text: str, answer: str, aliases: Sequence[str] = (), prompt: str | None = None
) -> float:
    """``wild``: 1.0 when the generated ``text`` gives ``answer`` (or one of its
    ``aliases``) as a reader would grade it (module docstring), else 0.0. ``prompt``,
    the question or cloze the model was asked, lets a reply restate it."""
    if not isinstance(text, str) or not isinstance(answer, str):
        return 0.0
    reply = tokens(reply_of(text))
    question = _words(prompt)
    context = frozenset(question)
    named = answer.strip()[:1].isupper()
    for name in _names(answer, aliases, context):
        # the answer's own words name nothing else ("... of Barack Canada is Canada")
        allowed = context | frozenset(name.words)
        for start, end in _occurrences(reply, name):
            if (
                _frame_holds(reply[:start], allowed, named)
                and not _longer_name_before(reply, start, name)
                and _ends_cleanly(reply, end, name)
                and not _copies_question(reply, start, end, question)
            ):
                return 1.0
    return 0.0


# Tokens a reply's restatement of the question ends on, before its answer: "The
# capital of France is", "It is located in", "Japan's official language:".
_LINKS = frozenset({"is", "are", "was", "were", "of", "in", "to", "by", "as", ":", ","})
# Marks that end a leading answer.
_SPAN_ENDS = frozenset(",.;:!?()[]")
MAX_SPAN_WORDS = 12


def answer_span(text: str, prompt: str | None = None) -> str:
    """The answer a reply leads with, as words: after its frame (the longest opening
    of frame words, those of the question and common ones, that ends on a link: "The
    capital of France is"), without leading articles, up to the first mark or clause
    word ("Paris, the city of light" gives "pari"). "" when the reply gives none."""
    reply = tokens(reply_of(text))
    context = frozenset(_words(prompt))
    start = 0
    for index, token in enumerate(reply):
        if token.norm in _LINKS:
            start = index + 1
        elif token.kind == "possessive":
            continue
        elif token.kind != "word" or token.norm in NEGATIONS | HEDGES:
            break
        elif token.norm not in context and token.norm not in COMMON_WORDS:
            break
    while start < len(reply) and reply[start].norm in ARTICLES:
        start += 1
    words: list[str] = []
    for index in range(start, len(reply)):
        token = reply[index]
        if token.kind == "possessive" or token.norm in _SPAN_ENDS:
            break
        if token.norm in CLAUSE_WORDS and words and not _joins_name(reply, index):
            break
        words.append(token.norm)
        if len(words) == MAX_SPAN_WORDS:
            break
    return " ".join(words)


def _joins_name(reply: list[Token], index: int) -> bool:
    """Whether the "and" at ``index`` joins two capitalised parts of one name
    ("Bosnia and Herzegovina")."""
    following = reply[index + 1] if index + 1 < len(reply) else None
    return (
        reply[index].norm == "and"
        and following is not None
        and following.kind == "word"
        and following.capitalised
    )


def unchanged_answer(  # noqa: PLR0913 - two replies and what the probe knows
    base: str,
    edited: str,
    answer: str | None = None,
    aliases: Sequence[str] = (),
    prompt: str | None = None,
) -> float:
    """``wild`` on a control probe: 1.0 when the edited reply gives the base model's
    answer, 0.0 when it does not, NaN when the base model gave none (an empty reply,
    or none ``answer_span`` finds: there is nothing to keep).

    Where the base reply gives the KG's ``answer`` (or an alias), the edited reply
    must give it too. Otherwise the answer is the base reply's leading span, and the
    two replies agree when their spans are the same or either's span leads the other
    ("the United States" and "the United States of America")."""
    if not isinstance(base, str) or not isinstance(edited, str):
        return float("nan")
    kept = answer_span(base, prompt)
    if not kept:
        return float("nan")
    if isinstance(answer, str) and wild_match(base, answer, aliases, prompt):
        return wild_match(edited, answer, aliases, prompt)
    given = answer_span(edited, prompt)
    agree = (
        given == kept
        or wild_match(edited, kept, (), prompt)
        or (given and wild_match(base, given, (), prompt))
    )
    return float(bool(agree))


def strict_match(text: str, answer: str, aliases: Sequence[str] = ()) -> float:
    """``wild_strict``: SQuAD-normalised exact match of the text against the answer
    or an alias (the paper repository's scoring of a generation)."""
    return max(exact_match(text, gold) for gold in (answer, *aliases))
