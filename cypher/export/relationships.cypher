// Relationships whose stored source has an id in [$lo, $hi), as one row of parallel lists
// (sources, targets, relation types); $types: only those relationship types (null: all).
MATCH (a:{{dataset}})-[r]->(b:{{dataset}})
WHERE a.{{id}} >= $lo AND a.{{id}} < $hi AND ($types IS NULL OR type(r) IN $types)
RETURN collect(a.{{id}}) AS sources, collect(b.{{id}}) AS targets, collect(type(r)) AS relations
