// Exact dense seeding: cosine against every node of the dataset (measures the index's recall).
// cos from the Euclidean similarity of unit vectors, as in retrieval/khop_hop.cypher.
MATCH (n:{{dataset}})
WITH n.{{id}} AS id, 1.5 - 0.5 / vector.similarity.euclidean(n.{{embedding}}, $embedding) AS similarity
ORDER BY similarity DESC, id ASC
LIMIT $k
RETURN id, similarity
