// Dense seeding: the $k nodes nearest to the query embedding in the dataset's vector index.
// The index is asked for $candidates >= $k neighbours (HNSW searches wider for a larger k, which
// raises recall of the top k). Neo4j reports cosine as (1 + cos) / 2: return cos itself.
CALL db.index.vector.queryNodes($index, $candidates, $embedding) YIELD node, score
WITH node.{{id}} AS id, 2.0 * score - 1.0 AS similarity
ORDER BY similarity DESC, id ASC
LIMIT $k
RETURN id, similarity
