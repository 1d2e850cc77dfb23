// Exact dense seeding: cosine against every node of the dataset (measures the index's recall).
MATCH (n:{{dataset}})
WITH n.id AS id, 2.0 * vector.similarity.cosine(n.embedding, $embedding) - 1.0 AS similarity
ORDER BY similarity DESC, id ASC
LIMIT $k
RETURN id, similarity
