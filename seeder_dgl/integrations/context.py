"""The retrieved subgraph as text an LLM reads: one passage per retrieved node, best first.

RAG frameworks pass a retriever's items to the LLM one after the other (neo4j-graphrag's
``GraphRAG`` joins their ``content`` with newlines; LangChain chains join ``Document`` texts). So
each retrieved node becomes one item: its name and type, then the retrieved triples it takes part
in. A triple joins two retrieved nodes; it is listed once, under the better-ranked of the two, so
the context holds every retrieved triple exactly once and the most relevant facts come first.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from seeder_dgl.api import Retrieval


@dataclass
class NodeContext:
    """One retrieved node with the triples listed under it."""

    rank: int
    """1 for the best-ranked node."""
    id: int
    name: str
    type: str
    score: float
    triples: list[str] = field(default_factory=list)
    """'head -[relation]-> tail' lines, in the order ``Retrieval.triples()`` gives them."""

    def text(self) -> str:
        """What the LLM reads: 'name (type)', then one indented line per triple."""
        return "\n".join([f"{self.name} ({self.type})", *(f"  {line}" for line in self.triples)])

    def metadata(self) -> dict:
        """Everything but the text, for a framework's metadata field (ids to look the node up again)."""
        return {"rank": self.rank, "id": self.id, "name": self.name, "type": self.type, "score": self.score,
                "triples": list(self.triples)}


def node_contexts(result: Retrieval) -> list[NodeContext]:
    """The retrieval's nodes, best first, each with the retrieved triples whose better-ranked end it is.

    Triples name their ends (``Retrieval`` keeps names, not ids), so two retrieved nodes with the
    same name share one entry here: a triple goes to the better-ranked node of that name, and it
    reads the same under either.
    """
    contexts = [NodeContext(rank, n.id, n.name, n.type, float(n.score)) for rank, n in enumerate(result.nodes, start=1)]
    first_rank: dict[str, int] = {}
    for context in contexts:
        first_rank.setdefault(context.name, context.rank)
    for triple in result.to_dict()["triples"]:
        head, relation, tail = triple["head"], triple["relation"], triple["tail"]
        ranks = [first_rank[name] for name in (head, tail) if name in first_rank]
        if ranks:  # always, as both ends are retrieved nodes; a node renamed mid-query would be skipped
            contexts[min(ranks) - 1].triples.append(f"{head} -[{relation}]-> {tail}")
    return contexts
