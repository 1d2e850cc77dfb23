// Nodes of a dataset as stored.
MATCH (n:{{dataset}}) RETURN count(n) AS nodes
