// Full-text seeding: nodes whose names match the question's words (Lucene query built from the
// escaped question, passed as a parameter), with their cosine to the query for K-hop scoring
// (from the Euclidean similarity of unit vectors, as in retrieval/khop_hop.cypher).
// One row of parallel lists: 50 records cost the driver about 2 ms more than one record of lists.
CALL db.index.fulltext.queryNodes($index, $lucene, {limit: $candidates}) YIELD node, score
WITH node.{{id}} AS id, node.{{name}} AS name, score AS text_score,
     1.5 - 0.5 / vector.similarity.euclidean(node.{{embedding}}, $embedding) AS similarity
ORDER BY text_score DESC, id ASC
// Rows ordered before collect() give lists in that order (Cypher manual, ORDER BY); entity
// linking (seeding.py) orders the hits again by a total key anyway.
RETURN collect(id) AS ids, collect(name) AS names, collect(text_score) AS text_scores,
       collect(similarity) AS similarities
