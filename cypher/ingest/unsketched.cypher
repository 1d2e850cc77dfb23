// A page of nodes that have an embedding but no sketch: ingested before sketches existed, or
// written by other tools. One row of parallel lists.
MATCH (n:{{dataset}})
WHERE n.{{sketch}} IS NULL AND n.{{embedding}} IS NOT NULL
WITH n LIMIT $limit
RETURN collect(n.{{id}}) AS ids, collect(n.{{embedding}}) AS embeddings
