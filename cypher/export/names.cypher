// Names and source ids (key) of the nodes of one dataset with ids in [$lo, $hi), for matching the
// answer names or ids of a question file to the nodes of that same graph.
MATCH (n:{{dataset}})
WHERE n.{{id}} >= $lo AND n.{{id}} < $hi
// toStringOrNull and coalesce: an adopted node's name and key are the user's properties, which may be
// numbers or missing (collect() would drop a null and misalign the lists).
RETURN collect(n.{{id}}) AS ids, collect(coalesce(toStringOrNull(n.{{name}}), '')) AS names,
       collect(coalesce(toStringOrNull(n.{{key}}), '')) AS keys
