// Names and source ids (key) of the nodes of one dataset with ids in [$lo, $hi), for matching the
// answer names or ids of a question file to the nodes of that same graph.
MATCH (n:{{dataset}})
WHERE n.id >= $lo AND n.id < $hi
RETURN collect(n.id) AS ids, collect(n.name) AS names, collect(coalesce(n.key, '')) AS keys
