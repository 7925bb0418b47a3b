"""papers: a research library of papers, authors and citations, with the user's collections and notes.

The catalogue holds papers with their authors (the first ones, plus a count of the others), venue, year,
arXiv id, abstract and the catalogue papers they cite. Citation counts and h-indexes are computed within
the catalogue. The user keeps collections of papers (exportable as BibTeX) and notes on papers.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, fold, id_problems, lookup, matches, words

Topic = Literal["nlp", "vision", "rl", "ml", "optimization", "agents", "generative"]
Direction = Literal["cited_by", "references"]

Id = Annotated[str, Field(max_length=64)]
Name = Annotated[str, Field(min_length=1, max_length=200)]

MAX_COLLECTIONS = 200
MAX_COLLECTION_PAPERS = 500
MAX_NOTES = 2000
STOPWORDS = frozenset({"a", "an", "the", "on", "of", "for", "to", "in", "is"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Author(_Model):
    id: Annotated[str, Field(pattern=r"^aut_\d{4,}$", max_length=64)]
    name: Name
    affiliation: Annotated[str, Field(max_length=200)] = ""


class Paper(_Model):
    id: Annotated[str, Field(pattern=r"^pap_\d{4,}$", max_length=64)]
    title: Annotated[str, Field(min_length=1, max_length=300)]
    author_ids: Annotated[list[Id], Field(min_length=1, max_length=30)]
    more_authors: int = Field(default=0, ge=0, le=5000, description="Authors not listed in author_ids.")
    year: int = Field(ge=1900, le=2100)
    venue: Annotated[str, Field(max_length=100)] | None = Field(
        default=None, description="Null for preprints."
    )
    arxiv_id: Annotated[str, Field(pattern=r"^\d{4}\.\d{4,5}$", max_length=10)]
    abstract: Annotated[str, Field(max_length=5000)]
    topics: Annotated[list[Topic], Field(min_length=1, max_length=7)]
    references: Annotated[list[Id], Field(max_length=500)] = Field(
        default_factory=list, description="Catalogue papers this one cites."
    )


class Collection(_Model):
    id: Annotated[str, Field(pattern=r"^col_\d{4,}$", max_length=64)]
    name: Annotated[str, Field(min_length=1, max_length=100)]
    description: Annotated[str, Field(max_length=2000)] = ""
    paper_ids: Annotated[list[Id], Field(max_length=MAX_COLLECTION_PAPERS)] = Field(default_factory=list)
    created_at: NaiveDatetime
    updated_at: NaiveDatetime


class Note(_Model):
    id: Annotated[str, Field(pattern=r"^nte_\d{4,}$", max_length=64)]
    paper_id: Id
    text: Annotated[str, Field(min_length=1, max_length=10_000)]
    created_at: NaiveDatetime


class PapersState(EnvState):
    """The catalogue (authors, papers, citations) and the user's collections and notes."""

    authors: dict[str, Author] = Field(default_factory=dict, max_length=20_000)
    papers: dict[str, Paper] = Field(default_factory=dict, max_length=10_000)
    collections: dict[str, Collection] = Field(default_factory=dict, max_length=MAX_COLLECTIONS)
    notes: dict[str, Note] = Field(default_factory=dict, max_length=MAX_NOTES)

    @model_validator(mode="after")
    def _integrity(self) -> PapersState:
        problems = id_problems(
            self, {"aut": self.authors, "pap": self.papers, "col": self.collections, "nte": self.notes}
        )
        arxiv: dict[str, str] = {}
        for p in self.papers.values():
            if p.arxiv_id in arxiv:
                problems.append(f"papers {arxiv[p.arxiv_id]} and {p.id} have the same arXiv id {p.arxiv_id}")
            arxiv[p.arxiv_id] = p.id
            if len(set(p.author_ids)) != len(p.author_ids):
                problems.append(f"paper {p.id} lists an author twice")
            for a in p.author_ids:
                if a not in self.authors:
                    problems.append(f"paper {p.id} has unknown author {a}")
            if len(set(p.references)) != len(p.references):
                problems.append(f"paper {p.id} cites a paper twice")
            for r in p.references:
                cited = self.papers.get(r)
                if cited is None:
                    problems.append(f"paper {p.id} cites unknown paper {r}")
                elif r == p.id or cited.year > p.year:
                    problems.append(f"paper {p.id} ({p.year}) cannot cite {r} ({cited.year})")
        names: dict[str, str] = {}
        for c in self.collections.values():
            key = fold(c.name)
            if key in names:
                problems.append(f"collections {names[key]} and {c.id} have the same name")
            names[key] = c.id
            if len(set(c.paper_ids)) != len(c.paper_ids):
                problems.append(f"collection {c.id} holds a paper twice")
            for pid in c.paper_ids:
                if pid not in self.papers:
                    problems.append(f"collection {c.id} holds unknown paper {pid}")
            if not c.created_at <= c.updated_at <= self.now:
                problems.append(f"collection {c.id}: created_at <= updated_at <= now must hold")
        for n in self.notes.values():
            if n.paper_id not in self.papers:
                problems.append(f"note {n.id} is on unknown paper {n.paper_id}")
            if n.created_at > self.now:
                problems.append(f"note {n.id} is written in the future")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# ---- results ------------------------------------------------------------------------------------------


class AuthorRef(_Model):
    id: str
    name: str
    affiliation: str


class PaperSummary(_Model):
    id: str
    title: str
    authors: list[str] = Field(description="Listed author names; see more_authors for the rest.")
    more_authors: int
    year: int
    venue: str | None
    arxiv_id: str
    cited_by_count: int = Field(description="Catalogue papers that cite it.")


class PaperView(PaperSummary):
    abstract: str
    topics: list[Topic]
    author_refs: list[AuthorRef]
    references: list[str]
    cited_by: list[str]
    collections: list[str] = Field(description="Ids of the user's collections that hold it.")
    notes: int = Field(description="How many notes the user has on it.")


class AuthorSummary(_Model):
    id: str
    name: str
    affiliation: str
    papers: int


class AuthorView(_Model):
    id: str
    name: str
    affiliation: str
    h_index: int = Field(description="h-index over catalogue citations.")
    citations: int = Field(description="Catalogue citations of their papers.")
    papers: list[PaperSummary]
    coauthors: list[AuthorRef]


class CollectionView(_Model):
    id: str
    name: str
    description: str
    created_at: NaiveDatetime
    updated_at: NaiveDatetime
    papers: list[PaperSummary]


class CollectionSummary(_Model):
    id: str
    name: str
    description: str
    paper_count: int
    updated_at: NaiveDatetime


class NoteView(Note):
    paper_title: str


class BibtexExport(_Model):
    collection_id: str
    name: str
    entries: int
    bibtex: str


env = Environment(
    "papers",
    PapersState,
    version="1.0.0",
    domain="research",
    description=(
        "A research library: search papers by words, author, year and topic, read details, follow citations "
        "both ways, look up authors with their catalogue h-index, keep collections exportable as BibTeX, "
        "and write notes on papers."
    ),
)


# ---- helpers ------------------------------------------------------------------------------------------


def _paper(state: PapersState, paper_id: str) -> Paper:
    return lookup(state.papers, paper_id, "paper", "Find papers with search_papers.")


def _collection(state: PapersState, collection_id: str) -> Collection:
    return lookup(state.collections, collection_id, "collection", "List them with list_collections.")


def _cited_by(state: PapersState, paper_id: str) -> list[str]:
    return sorted(p.id for p in state.papers.values() if paper_id in p.references)


def _summary(state: PapersState, p: Paper) -> PaperSummary:
    return PaperSummary(
        id=p.id,
        title=p.title,
        authors=[state.authors[a].name for a in p.author_ids],
        more_authors=p.more_authors,
        year=p.year,
        venue=p.venue,
        arxiv_id=p.arxiv_id,
        cited_by_count=len(_cited_by(state, p.id)),
    )


def _ref(a: Author) -> AuthorRef:
    return AuthorRef(id=a.id, name=a.name, affiliation=a.affiliation)


def _ranked(state: PapersState, papers: list[Paper]) -> list[PaperSummary]:
    summaries = [_summary(state, p) for p in papers]
    return sorted(summaries, key=lambda s: (-s.cited_by_count, -s.year, s.id))


def _collection_view(state: PapersState, c: Collection) -> CollectionView:
    return CollectionView(
        id=c.id,
        name=c.name,
        description=c.description,
        created_at=c.created_at,
        updated_at=c.updated_at,
        papers=[_summary(state, state.papers[pid]) for pid in c.paper_ids],
    )


def _ascii_word(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", fold(text))


def _bibtex_key(state: PapersState, p: Paper) -> str:
    last = _ascii_word(state.authors[p.author_ids[0]].name.split()[-1])
    first_word = next(
        (w for w in (_ascii_word(x) for x in words(p.title)) if w and w not in STOPWORDS), "paper"
    )
    return f"{last}{p.year}{first_word}"


def _bibtex_entry(state: PapersState, p: Paper, key: str) -> str:
    names = [state.authors[a].name for a in p.author_ids] + (["others"] if p.more_authors else [])
    fields = [("title", p.title), ("author", " and ".join(names))]
    if p.venue:
        kind = "inproceedings"
        fields.append(("booktitle", p.venue))
    else:
        kind = "article"
        fields.append(("journal", f"arXiv preprint arXiv:{p.arxiv_id}"))
    fields += [("year", str(p.year)), ("eprint", p.arxiv_id), ("archivePrefix", "arXiv")]
    body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields)
    return f"@{kind}{{{key},\n{body}\n}}"


# ---- tools: catalogue ---------------------------------------------------------------------------------


@env.tool(read_only=True)
def search_papers(
    state: PapersState,
    query: Annotated[str, Field(max_length=200)] = "",
    author: Annotated[str, Field(max_length=200)] | None = None,
    year_from: Annotated[int, Field(ge=1900, le=2100)] | None = None,
    year_to: Annotated[int, Field(ge=1900, le=2100)] | None = None,
    topic: Topic | None = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
) -> list[PaperSummary]:
    """Search papers by words in the title or abstract, author name, year range and topic; most cited first.

    Args:
        query: Words that must all start a word of the title or abstract, e.g. "preference optimization".
        author: Words of an author's name, e.g. "narasimhan".
        year_from: Only papers from this year on.
        year_to: Only papers up to this year.
        topic: Only papers on this topic: nlp, vision, rl, ml, optimization, agents or generative.
        limit: The most results to return (1-50, default 10).
    """
    if year_from is not None and year_to is not None and year_to < year_from:
        raise ToolError(f"year_to {year_to} is before year_from {year_from}.")
    found = [
        p
        for p in state.papers.values()
        if matches(query, p.title, p.abstract)
        and (author is None or any(matches(author, state.authors[a].name) for a in p.author_ids))
        and (year_from is None or p.year >= year_from)
        and (year_to is None or p.year <= year_to)
        and (topic is None or topic in p.topics)
    ]
    return _ranked(state, found)[:limit]


@env.tool(read_only=True)
def get_paper(state: PapersState, paper_id: Id) -> PaperView:
    """Get a paper: abstract, authors with affiliations, topics, what it cites and what cites it, and the
    user's collections and notes on it.

    Args:
        paper_id: The paper's id, e.g. "pap_0001" (from search_papers).
    """
    p = _paper(state, paper_id)
    return PaperView(
        **_summary(state, p).model_dump(),
        abstract=p.abstract,
        topics=p.topics,
        author_refs=[_ref(state.authors[a]) for a in p.author_ids],
        references=p.references,
        cited_by=_cited_by(state, p.id),
        collections=sorted(c.id for c in state.collections.values() if p.id in c.paper_ids),
        notes=sum(n.paper_id == p.id for n in state.notes.values()),
    )


@env.tool(read_only=True)
def get_citations(state: PapersState, paper_id: Id, direction: Direction = "cited_by") -> list[PaperSummary]:
    """List the catalogue papers that cite a paper, or that it cites; most cited first.

    Args:
        paper_id: The paper, e.g. "pap_0001".
        direction: "cited_by" (papers citing it, the default) or "references" (papers it cites).
    """
    p = _paper(state, paper_id)
    ids = _cited_by(state, p.id) if direction == "cited_by" else p.references
    return _ranked(state, [state.papers[i] for i in ids])


@env.tool(read_only=True)
def search_authors(
    state: PapersState, query: Annotated[str, Field(min_length=1, max_length=200)]
) -> list[AuthorSummary]:
    """Find authors by name or affiliation, e.g. "finn" or "stanford"; most papers first.

    Args:
        query: Words of the author's name or affiliation.
    """
    if not words(query):
        raise ToolError("The query is blank; give part of a name or an affiliation.")
    counts = Counter(a for p in state.papers.values() for a in p.author_ids)
    found = [a for a in state.authors.values() if matches(query, a.name, a.affiliation)]
    found.sort(key=lambda a: (-counts[a.id], fold(a.name), a.id))
    return [
        AuthorSummary(id=a.id, name=a.name, affiliation=a.affiliation, papers=counts[a.id]) for a in found
    ]


@env.tool(read_only=True)
def get_author(state: PapersState, author_id: Id) -> AuthorView:
    """Get an author's catalogue papers (most cited first), citations, h-index and co-authors.

    Args:
        author_id: The author's id, e.g. "aut_0012" (from search_authors or get_paper).
    """
    author = lookup(state.authors, author_id, "author", "Find authors with search_authors.")
    papers = _ranked(state, [p for p in state.papers.values() if author.id in p.author_ids])
    cites = sorted((s.cited_by_count for s in papers), reverse=True)
    h_index = sum(1 for i, c in enumerate(cites, 1) if c >= i)
    co = sorted(
        {a for p in state.papers.values() if author.id in p.author_ids for a in p.author_ids} - {author.id}
    )
    return AuthorView(
        id=author.id,
        name=author.name,
        affiliation=author.affiliation,
        h_index=h_index,
        citations=sum(cites),
        papers=papers,
        coauthors=sorted((_ref(state.authors[a]) for a in co), key=lambda r: (fold(r.name), r.id)),
    )


# ---- tools: the user's library ------------------------------------------------------------------------


@env.tool
def create_collection(
    state: PapersState,
    name: Annotated[str, Field(min_length=1, max_length=100)],
    description: Annotated[str, Field(max_length=2000)] = "",
) -> CollectionView:
    """Create an empty collection; names are unique (case is ignored).

    Args:
        name: The collection's name, e.g. "Reading group: RLHF".
        description: What it is for.
    """
    if not name.strip():
        raise ToolError("The name is blank.")
    for c in state.collections.values():
        if fold(c.name) == fold(name.strip()):
            raise ToolError(f"There is already a collection named {c.name!r} ({c.id}).")
    if len(state.collections) >= MAX_COLLECTIONS:
        raise ToolError(f"At most {MAX_COLLECTIONS} collections.")
    c = Collection(
        id=state.new_id("col"),
        name=name.strip(),
        description=description,
        created_at=state.now,
        updated_at=state.now,
    )
    state.collections[c.id] = c
    return _collection_view(state, c)


@env.tool(read_only=True)
def list_collections(state: PapersState) -> list[CollectionSummary]:
    """List the user's collections with how many papers each holds."""
    return [
        CollectionSummary(
            id=c.id,
            name=c.name,
            description=c.description,
            paper_count=len(c.paper_ids),
            updated_at=c.updated_at,
        )
        for c in sorted(state.collections.values(), key=lambda c: c.id)
    ]


@env.tool(read_only=True)
def get_collection(state: PapersState, collection_id: Id) -> CollectionView:
    """Get a collection with its papers, in the order they were added.

    Args:
        collection_id: The collection's id, e.g. "col_0001" (from list_collections).
    """
    return _collection_view(state, _collection(state, collection_id))


@env.tool
def add_to_collection(state: PapersState, collection_id: Id, paper_id: Id) -> CollectionView:
    """Add a paper to a collection (at the end).

    Args:
        collection_id: The collection, e.g. "col_0002".
        paper_id: The paper, e.g. "pap_0017".
    """
    c = _collection(state, collection_id)
    p = _paper(state, paper_id)
    if p.id in c.paper_ids:
        raise ToolError(f"{p.title!r} ({p.id}) is already in {c.name!r}.")
    if len(c.paper_ids) >= MAX_COLLECTION_PAPERS:
        raise ToolError(f"A collection holds at most {MAX_COLLECTION_PAPERS} papers.")
    c.paper_ids.append(p.id)
    c.updated_at = state.now
    return _collection_view(state, c)


@env.tool(destructive=True)
def remove_from_collection(state: PapersState, collection_id: Id, paper_id: Id) -> CollectionView:
    """Take a paper out of a collection (the paper and its notes stay).

    Args:
        collection_id: The collection, e.g. "col_0001".
        paper_id: The paper to take out, e.g. "pap_0016".
    """
    c = _collection(state, collection_id)
    if paper_id not in c.paper_ids:
        raise ToolError(
            f"{paper_id!r} is not in {c.name!r} ({c.id}); it holds: {', '.join(c.paper_ids) or 'nothing'}."
        )
    c.paper_ids.remove(paper_id)
    c.updated_at = state.now
    return _collection_view(state, c)


@env.tool(read_only=True)
def export_bibtex(state: PapersState, collection_id: Id) -> BibtexExport:
    """Export a collection as BibTeX entries (keys like vaswani2017attention), in collection order.

    Args:
        collection_id: The collection to export, e.g. "col_0001".
    """
    c = _collection(state, collection_id)
    if not c.paper_ids:
        raise ToolError(f"Collection {c.name!r} is empty; add papers with add_to_collection first.")
    keys: Counter[str] = Counter()
    entries = []
    for pid in c.paper_ids:
        p = state.papers[pid]
        key = _bibtex_key(state, p)
        keys[key] += 1
        entries.append(
            _bibtex_entry(state, p, key if keys[key] == 1 else f"{key}{chr(ord('a') + keys[key] - 1)}")
        )
    return BibtexExport(
        collection_id=c.id, name=c.name, entries=len(entries), bibtex="\n\n".join(entries) + "\n"
    )


@env.tool
def add_note(
    state: PapersState, paper_id: Id, text: Annotated[str, Field(min_length=1, max_length=10_000)]
) -> NoteView:
    """Write a note on a paper.

    Args:
        paper_id: The paper, e.g. "pap_0015".
        text: The note.
    """
    p = _paper(state, paper_id)
    if not text.strip():
        raise ToolError("The note is blank.")
    if len(state.notes) >= MAX_NOTES:
        raise ToolError(f"At most {MAX_NOTES} notes; delete some first.")
    note = Note(id=state.new_id("nte"), paper_id=p.id, text=text.strip(), created_at=state.now)
    state.notes[note.id] = note
    return NoteView(**note.model_dump(), paper_title=p.title)


@env.tool(read_only=True)
def list_notes(state: PapersState, paper_id: Id | None = None) -> list[NoteView]:
    """List the user's notes, oldest first.

    Args:
        paper_id: Only notes on this paper.
    """
    if paper_id is not None:
        _paper(state, paper_id)
    notes = [n for n in state.notes.values() if paper_id is None or n.paper_id == paper_id]
    notes.sort(key=lambda n: (n.created_at, n.id))
    return [NoteView(**n.model_dump(), paper_title=state.papers[n.paper_id].title) for n in notes]


@env.tool(destructive=True)
def delete_note(state: PapersState, note_id: Id) -> NoteView:
    """Delete a note.

    Args:
        note_id: The note, e.g. "nte_0002" (from list_notes).
    """
    note = lookup(state.notes, note_id, "note", "List them with list_notes.")
    del state.notes[note.id]
    return NoteView(**note.model_dump(), paper_title=state.papers[note.paper_id].title)
