// Nodes of a dataset with ids in [$lo, $hi): id, type and embedding (range seek on the id index).
MATCH (n:{{dataset}})
WHERE n.id >= $lo AND n.id < $hi
RETURN n.id AS id, n.type AS type, n.embedding AS embedding
