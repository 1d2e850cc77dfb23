// Full-text seeding: nodes whose names match the question's words (Lucene query built from the
// escaped question, passed as a parameter), with their cosine to the query for K-hop scoring
// (from the Euclidean similarity of unit vectors, as in retrieval/khop_hop.cypher).
CALL db.index.fulltext.queryNodes($index, $lucene, {limit: $candidates}) YIELD node, score
RETURN node.id AS id, node.name AS name, score AS text_score,
       1.5 - 0.5 / vector.similarity.euclidean(node.embedding, $embedding) AS similarity
ORDER BY text_score DESC, id ASC
