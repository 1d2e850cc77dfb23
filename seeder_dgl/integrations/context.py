"""The retrieved subgraph as text an LLM reads: one passage per retrieved node, best first.

RAG frameworks pass a retriever's items to the LLM one after the other (neo4j-graphrag's
``GraphRAG`` joins their ``content`` with newlines; LangChain chains join ``Document`` texts). So
each retrieved node becomes one item: its name and type, its text when it has one beyond its name
(a STaRK description, a table's text column), then the retrieved triples it takes part in. A triple joins two retrieved nodes; it is listed once, under the better-ranked of the two, so
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
    description: str = ""
    """The node's text when it says more than its name, else ''."""
    triples: list[str] = field(default_factory=list)
    """'head -[relation]-> tail' lines, in the order ``Retrieval.triples()`` gives them."""

    def text(self) -> str:
        """What the LLM reads: 'name (type)', its description, then one indented line per triple."""
        head = f"{self.name} ({self.type})" + (f": {self.description}" if self.description else "")
        return "\n".join([head, *(f"  {line}" for line in self.triples)])

    def metadata(self) -> dict:
        """Everything but the text, for a framework's metadata field (ids to look the node up again)."""
        return {"rank": self.rank, "id": self.id, "name": self.name, "type": self.type, "score": self.score,
                "description": self.description, "triples": list(self.triples)}


def node_contexts(result: Retrieval) -> list[NodeContext]:
    """The retrieval's nodes, best first, each with the retrieved triples whose better-ranked end it is."""
    contexts = [NodeContext(rank, n.id, n.name, n.type, float(n.score),
                            n.text if n.text and n.text.strip() != n.name.strip() else "")
                for rank, n in enumerate(result.nodes, start=1)]
    rank_of: dict[int, int] = {}
    for context in contexts:
        rank_of.setdefault(context.id, context.rank)
    for triple in result.to_dict()["triples"]:
        ranks = [rank_of[i] for i in (triple["head_id"], triple["tail_id"]) if i in rank_of]
        if ranks:  # always, as both ends are retrieved nodes
            contexts[min(ranks) - 1].triples.append(f"{triple['head']} -[{triple['relation']}]-> {triple['tail']}")
    return contexts
