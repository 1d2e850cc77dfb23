// Nodes of a dataset with ids in [$lo, $hi): id, type and embedding (range seek on the id index),
// as one row of parallel lists (a record per node cost the driver more than the query).
MATCH (n:{{dataset}})
WHERE n.{{id}} >= $lo AND n.{{id}} < $hi
RETURN collect(n.{{id}}) AS ids, collect(n.{{type}}) AS types, collect(n.{{embedding}}) AS embeddings
