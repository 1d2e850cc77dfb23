// Dense seeding: the $k nodes nearest to the query embedding in the dataset's vector index.
// Neo4j reports cosine as (1 + cos) / 2; return the cosine itself so every method shares one scale.
CALL db.index.vector.queryNodes($index, $k, $embedding) YIELD node, score
RETURN node.id AS id, 2.0 * score - 1.0 AS similarity
ORDER BY similarity DESC, id ASC
