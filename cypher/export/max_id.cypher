// Largest node id of a dataset (export walks ids in ranges up to it).
MATCH (n:{{dataset}}) RETURN max(n.{{id}}) AS max_id, count(n) AS nodes
