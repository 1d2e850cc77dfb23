// Full-text seeding: nodes whose names match the question's words (Lucene query built from the
// escaped question, passed as a parameter), with their cosine to the query for K-hop scoring.
CALL db.index.fulltext.queryNodes($index, $lucene, {limit: $candidates}) YIELD node, score
RETURN node.id AS id, node.name AS name, score AS text_score,
       2.0 * vector.similarity.cosine(node.embedding, $embedding) - 1.0 AS similarity
ORDER BY text_score DESC, id ASC
